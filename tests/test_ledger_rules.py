"""Issue 16, the rules that read the ledger: ACC101 for A applied twice without a framework
(two divisions in series, or a division and a gradient-side rescale by A), ACC103, ACC104 and
ACC105 silent where the ledger shows a denominator, their messages naming a token mean where
the ledger knows one, and the acceptance case of two legitimate denominators. Each reported
shape has a silent twin that differs by the one fact that makes it correct."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from accumlint.engine import check_source, rules_for
from accumlint.model import EventKind, build_model
from accumlint.model.ledger import divisions_in_series
from tests.test_model import lint

BAD = {
    "ACC101 A twice in series: reassigned, then divided again at the backward": ("""
    def fit(net, opt, loader, accum):
        for i, b in enumerate(loader):
            loss = net(b).mean()
            loss = loss / accum
            (loss / accum).backward()
            if (i + 1) % accum == 0:
                opt.step()
                opt.zero_grad()
    """, "ACC101", [("ACC101", 6)]),
    "ACC101 A twice: a helper returns loss / A and the loop divides with /=": ("""
    def forward_loss(net, b, n_acc):
        out = net(b["x"]).pow(2).mean()
        return out / n_acc

    def fit(net, opt, loader, n_acc):
        for i, b in enumerate(loader):
            loss = forward_loss(net, b, n_acc)
            loss /= n_acc
            loss.backward()
            if (i + 1) % n_acc == 0:
                opt.step()
                opt.zero_grad()
    """, "ACC101", [("ACC101", 9)]),
    "ACC101 loss divided by A, then the group's gradients divided by A again": ("""
    def fit(net, opt, loader, grad_accum):
        for i, b in enumerate(loader):
            (net(b).mean() / grad_accum).backward()
            if (i + 1) % grad_accum == 0:
                for p in net.parameters():
                    p.grad.div_(grad_accum)
                opt.step()
                opt.zero_grad()
    """, "ACC101", [("ACC101", 7)]),
    "ACC103 token mean undivided: the message names the mean": ("""
    import torch.nn.functional as F

    def fit(net, opt, loader, accum):
        for i, (ids, tgt) in enumerate(loader):
            logits = net(ids)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), tgt.view(-1), ignore_index=-100)
            loss.backward()
            if (i + 1) % accum == 0:
                opt.step()
                opt.zero_grad()
    """, "ACC103", [("ACC103", 8)]),
    "ACC103 a micro-loop over slices in a helper, the update in a sibling method": ("""
    class Runner:
        def __init__(self, net, opt, micro):
            self.net, self.opt, self.micro = net, opt, micro

        def accumulate(self, batch):
            self.opt.zero_grad()
            for start in range(0, len(batch), self.micro):
                part = batch[start : start + self.micro]
                err = self.net(part).mean()
                err.backward()

        def apply(self):
            self.opt.step()

        def step(self, batch):
            self.accumulate(batch)
            self.apply()
    """, "ACC103", [("ACC103", 11)]),
    "ACC104 division after a helper's backward, nothing normalizes the gradients": ("""
    def micro(net, b):
        loss = net(b).mean()
        loss.backward()
        return loss

    def fit(net, opt, loader, accum):
        for i, b in enumerate(loader):
            shown = micro(net, b) / accum
            if (i + 1) % accum == 0:
                opt.step()
                opt.zero_grad()
    """, "ACC104", [("ACC104", 9)]),
}

GOOD = {
    # field trial: a contrastive loss over the cached features of the whole group, one slice
    # given gradients per backward (the sum of the A backwards is the group loss's gradient);
    # the backward sits in a helper given the caller's loss: not read (undecided, silent)
    "ACC103 silent: a backward helper of its own, given the caller's loss": ("""
    def backward(total, scaler):
        if scaler is not None:
            scaler.scale(total).backward()
        else:
            total.backward()

    def epoch(model, opt, scaler, loader, contrast, accum_freq):
        cache, feats = [], []
        for i, b in enumerate(loader):
            cache.append(b)
            feats.append(model(b).detach())
            if (i + 1) % accum_freq > 0:
                continue
            opt.zero_grad()
            for j in range(accum_freq):
                mine = model(cache[j])
                total = contrast(feats[:j] + [mine] + feats[j + 1:])
                backward(total, scaler)
            opt.step()
            cache, feats = [], []
    """, "ACC103"),
    # field trial: a pipeline engine that divides each microbatch's loss in its forward,
    # keeps it in a state object, and backpropagates what it pops in another method
    "ACC103 silent: the micro-loop's helper backpropagates what another method pops from a state": ("""
    class Engine:
        def forward(self, state, model, micro):
            out = model(micro) / self.n_micro
            state.keep(out)

        def backward(self, state):
            sum(state.pop_all()).backward()

        def train_batch(self, model, state, batch, n_micro):
            self.n_micro = n_micro
            for micro in batch:
                self.forward(state, model, micro)
                self.backward(state)

    def run(model, opt, state, batches):
        engine = Engine()
        for batch in batches:
            engine.train_batch(model, state, batch, 4)
            opt.step()
            opt.zero_grad()
    """, "ACC103"),
    "acceptance: token sum, divided once by the group's global token count, times world size (DDP)": ("""
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    def fit(model, opt, groups):
        model = DDP(model)
        world_size = dist.get_world_size()
        for group in groups:
            n_tokens = sum((b["labels"] != -100).sum() for b in group)
            dist.all_reduce(n_tokens)
            for b in group:
                logits = model(b["input_ids"])
                summed = F.cross_entropy(logits.flatten(0, 1), b["labels"].flatten(), ignore_index=-100,
                                         reduction="sum")
                (summed * world_size / n_tokens).backward()
            opt.step()
            opt.zero_grad()
    """, "ACC101,ACC102,ACC103,ACC104,ACC105,ACC307,ACC405"),
    "acceptance, gradient side: token sum, grads times world size over the global count once per group": ("""
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    def fit(model, opt, loader, accum):
        model = DDP(model)
        world_size = dist.get_world_size()
        seen = 0
        for i, b in enumerate(loader):
            seen += (b["labels"] != -100).sum()
            logits = model(b["input_ids"])
            F.cross_entropy(logits.flatten(0, 1), b["labels"].flatten(), ignore_index=-100,
                            reduction="sum").backward()
            if (i + 1) % accum == 0:
                dist.all_reduce(seen)
                for p in model.parameters():
                    p.grad.mul_(world_size / seen)
                opt.step()
                opt.zero_grad()
                seen = 0
    """, "ACC101,ACC102,ACC103,ACC104,ACC105,ACC307,ACC405"),
    "ACC101 silent: two terms each divided by A are one division of the total": ("""
    def fit(net, opt, loader, accum):
        for i, b in enumerate(loader):
            main, aux = net(b)
            loss = main.mean() / accum + aux.mean() / accum
            loss.backward()
            if (i + 1) % accum == 0:
                opt.step()
                opt.zero_grad()
    """, "ACC101"),
    "ACC101 silent: the divided value is a logged copy, the backward sees one division": ("""
    def fit(net, opt, loader, accum, log):
        for i, b in enumerate(loader):
            loss = net(b).mean() / accum
            loss.backward()
            log(loss / accum)
            if (i + 1) % accum == 0:
                opt.step()
                opt.zero_grad()
    """, "ACC101"),
    "ACC101 silent: undivided loss, the group's gradients divided by A once": ("""
    def fit(net, opt, loader, grad_accum):
        for i, b in enumerate(loader):
            net(b).mean().backward()
            if (i + 1) % grad_accum == 0:
                for p in net.parameters():
                    p.grad.div_(grad_accum)
                opt.step()
                opt.zero_grad()
    """, "ACC101,ACC103"),
    "ACC101 silent: loss divided by A, gradients divided by the world size (another factor)": ("""
    def fit(net, opt, loader, grad_accum, world):
        for i, b in enumerate(loader):
            (net(b).mean() / grad_accum).backward()
            if (i + 1) % grad_accum == 0:
                for p in net.parameters():
                    p.grad.div_(world)
                opt.step()
                opt.zero_grad()
    """, "ACC101"),
    "ACC104 silent: the gradients are divided by A once per group, the late division is for the log": ("""
    def micro(net, b):
        loss = net(b).mean()
        loss.backward()
        return loss

    def fit(net, opt, loader, accum):
        for i, b in enumerate(loader):
            shown = micro(net, b) / accum
            if (i + 1) % accum == 0:
                for p in net.parameters():
                    p.grad.div_(accum)
                opt.step()
                opt.zero_grad()
    """, "ACC104"),
    "ACC105 silent: manual_backward undivided, the gradients divided by A at the boundary": ("""
    import lightning as L

    class Net(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False

        def training_step(self, batch, batch_idx):
            opt = self.optimizers()
            loss = self.model(batch).mean()
            self.manual_backward(loss)
            if (batch_idx + 1) % self.accum == 0:
                for p in self.parameters():
                    p.grad.div_(self.accum)
                opt.step()
                opt.zero_grad()
    """, "ACC105"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_reports(name: str) -> None:
    source, code, expected = BAD[name]
    assert lint(source, select=code) == expected


@pytest.mark.parametrize("name", sorted(GOOD))
def test_stays_silent(name: str) -> None:
    source, codes = GOOD[name]
    assert lint(source, select=codes) == []


def _message(source: str, code: str) -> str:
    found = check_source("s.py", textwrap.dedent(source).encode(), rules_for([code])).findings
    assert len(found) == 1, found
    return found[0].message


def test_messages_say_the_resulting_scale() -> None:
    assert "1/A of the group's mean gradient" in _message(
        BAD["ACC101 A twice in series: reassigned, then divided again at the backward"][0], "ACC101")
    assert "after the loss's division already divided" in _message(
        BAD["ACC101 loss divided by A, then the group's gradients divided by A again"][0], "ACC101")
    assert "(a mean over its microbatch's tokens: `ignore_index`" in _message(
        BAD["ACC103 token mean undivided: the message names the mean"][0], "ACC103")


def test_series_follows_the_chain_not_the_terms() -> None:
    """Two divisions on the loss's chain are in series; two terms of a sum are not."""
    def series(source: str) -> int:
        model = build_model(cst.parse_module(textwrap.dedent(source)))
        (event,) = [e for e in model.all_events() if e.kind is EventKind.BACKWARD]
        return len(divisions_in_series(model, event, model.is_accumulation_name))

    assert series(BAD["ACC101 A twice in series: reassigned, then divided again at the backward"][0]) == 2
    assert series(BAD["ACC101 A twice: a helper returns loss / A and the loop divides with /="][0]) == 2
    assert series(GOOD["ACC101 silent: two terms each divided by A are one division of the total"][0]) == 0


def test_one_division_on_either_arm_is_no_series() -> None:
    """Field trial (an image-classification engine): ``loss /= A`` in both arms of an AMP
    switch, one backward per arm: one division on every path."""
    source = """
    def fit(net, opt, loader, update_freq, use_amp, scaler):
        for i, b in enumerate(loader):
            if use_amp:
                loss = net(b).mean()
            else:
                loss = net(b).mean()
            if use_amp:
                loss /= update_freq
                scaler(loss, opt, update_grad=(i + 1) % update_freq == 0)
            else:
                loss /= update_freq
                loss.backward()
                if (i + 1) % update_freq == 0:
                    opt.step()
                    opt.zero_grad()
    """
    assert lint(source, select="ACC101") == []
    assert lint(source.replace("                loss /= update_freq\n                loss.backward()",
                               "                loss /= update_freq\n                loss /= update_freq\n"
                               "                loss.backward()"), select="ACC101") == [("ACC101", 13)]
