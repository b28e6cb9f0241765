"""Field trial 42, helper B (vision, diffusion, GANs, detection): reduced shapes of what the
linter got wrong on public training loops. Each snippet is written from scratch; the strict
xfails are the misses still open (the reason says which shape, and why the linter is silent)."""

from __future__ import annotations

import pytest

from tests import support


def lint(source: str) -> list[tuple[str, int]]:
    """(code, line) of every finding of a dedented snippet, with every rule selected."""
    return support.lint(source, "ALL")


# --- ACC902: a microbatch counter logged with a resume offset --------------------------------

_OFFSET_LOG = """
from accelerate import Accelerator

accelerator = Accelerator(gradient_accumulation_steps=4)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
global_step = 0
first_step = resumed_step()
for batch in loader:
    with accelerator.accumulate(model):
        loss = model(batch)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
    accelerator.log({"loss": loss.item()}, step={axis})
    global_step += 1
"""


def test_microbatch_counter_plus_resume_offset_is_an_ambiguous_axis() -> None:
    # the offset is fixed for the run: the x-axis still advances A times per optimizer update
    assert lint(_OFFSET_LOG.replace("{axis}", "global_step + first_step")) == [("ACC902", 14)]
    assert lint(_OFFSET_LOG.replace("{axis}", "first_step + global_step")) == [("ACC902", 14)]


def test_offset_the_loop_reassigns_keeps_the_axis_silent() -> None:
    # an offset rebound every microbatch is not a fixed shift: what the sum counts is not read
    src = _OFFSET_LOG.replace("{axis}", "global_step + first_step").replace(
        "    global_step += 1\n", "    global_step += 1\n    first_step = progress(global_step)\n")
    assert lint(src) == []


def test_update_counter_plus_offset_stays_silent() -> None:
    # the counter moves once per optimizer update: a fixed shift of it is the right axis
    src = _OFFSET_LOG.replace("{axis}", "global_step + first_step").replace(
        "    accelerator.log({\"loss\": loss.item()}, step=global_step + first_step)\n    global_step += 1\n",
        "    if accelerator.sync_gradients:\n        global_step += 1\n"
        "        accelerator.log({\"loss\": loss.item()}, step=global_step + first_step)\n")
    assert "sync_gradients" in src
    assert lint(src) == []


# --- ACC201: a term of the summed loss kept in a running total ----------------------------

def test_running_total_of_a_loss_term_keeps_the_graph() -> None:
    # the running total adds a term of the loss that backward then goes through, not the loss
    src = """
    import torch


    def rounds(n):
        for _ in range(n):
            yield


    class Trainer:
        def __init__(self, net, every):
            self.net = net
            self.every = every
            self.opt = torch.optim.Adam(net.parameters(), lr=1e-4)

        def train(self, batches):
            running = torch.zeros([])
            self.opt.zero_grad()
            for _ in rounds(self.every):
                x = next(batches)
                hinge = self.net(x).relu().mean()
                total = hinge + self.net(x).pow(2).mean()
                (total / self.every).backward()
                running += hinge
            self.opt.step()
            return float(running.item() / self.every)
    """
    assert lint(src) == [("ACC201", 24)]

_TERMS = """
import torch


def train(net, batches, opt, every):
    running = torch.zeros([])
    opt.zero_grad()
    for _ in range(every):
        x = next(batches)
        {term}
        total = net(x).pow(2).mean() + extra
        (total / every).backward()
        running += extra
    opt.step()
"""


@pytest.mark.parametrize("term", ["extra = 0.5", "extra = net(x).relu().mean().detach()"])
def test_a_summed_term_without_a_graph_is_not_kept(term: str) -> None:
    # a constant or a detached term added to the loss holds no graph of the microbatch
    assert lint(_TERMS.replace("{term}", term)) == []


def test_a_summed_term_with_a_graph_is_kept() -> None:
    assert lint(_TERMS.replace("{term}", "extra = net(x).relu().mean()")) == [("ACC201", 13)]


# --- the simulator: a set-up test on A -----------------------------------------------------

def test_setup_condition_on_a_does_not_hide_the_accumulating_runs() -> None:
    # `if cfg.accum > 1:` in the set-up, before any gate binds A, takes its accumulating side first:
    # taken False, the budget's runs all skipped the gate, A stayed unbound and the loop uncounted
    src = """
    import torch


    def one_epoch(cfg, net, loader, opt):
        net.train()
        opt.zero_grad()
        for i, (x, y) in enumerate(loader):
            loss = net(x, y)
            if cfg.accum > 1:
                loss = loss / cfg.accum
                if cfg.precision != "fp32":
                    with scaled(loss, opt) as scaled_loss:
                        scaled_loss.backward()
                else:
                    loss.backward()
                if (i + 1) % cfg.accum == 0:
                    opt.step()
                    opt.zero_grad()
            else:
                opt.zero_grad()
                loss.backward()
                opt.step()


    def main(cfg):
        net = torch.nn.Linear(2, 2)
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        if cfg.auto_resume:
            found = latest_checkpoint(cfg.out)
            if found:
                cfg.resume = found
        if cfg.resume:
            restore(cfg, net, opt)
        for epoch in range(cfg.epochs):
            one_epoch(cfg, net, cfg.loader, opt)


    if __name__ == "__main__":
        cfg = read_config()
        lr = cfg.base_lr * cfg.batch_size / 256.0
        if cfg.accum > 1:
            lr = lr * cfg.accum
        main(cfg)
    """
    assert support.loop_reasons(support.check(src, "ALL").loops) == [()]


# --- misses left open -----------------------------------------------------------------------

#: a loop over the slices of each drawn batch, one optimizer update per batch: {helper} is code
#: before the loop class, {setup} its own set-up, {reset}, {loss} and {backward} its group's steps
_SLICED = """
import torch

{helper}
class Loop:
    def __init__(self, net, data, micro):
        self.net = net
        self.data = data
        self.micro = micro{setup}
        self.opt = torch.optim.AdamW(net.parameters(), lr=1e-4)

    def run(self):
        while True:
            batch = next(self.data)
            self.forward_backward(batch)
            self.opt.step()

    def forward_backward(self, batch):
        {reset}
        for i in range(0, batch.shape[0], self.micro):
            part = batch[i : i + self.micro]
            {loss}
            {backward}
"""


@pytest.mark.xfail(strict=True, reason="ACC103 takes any product on the way to backward for a normalization; "
                                       "per-sample weights inside the microbatch's mean are not one")
def test_weighted_mean_per_slice_is_still_undivided() -> None:
    weighted = "t, w = self.sampler.sample(part.shape[0])\n            loss = (self.net(part, t) * w).mean()"
    src = _SLICED.format(helper="", setup="", reset="self.opt.zero_grad()", loss=weighted, backward="loss.backward()")
    assert lint(src) == [("ACC103", 24)]


@pytest.mark.xfail(strict=True, reason="ACC103 does not follow a loss into another object's `backward(loss)` "
                                       "helper (a mixed-precision wrapper) from a loop over the batch's slices")
def test_undivided_slice_loss_through_a_backward_helper() -> None:
    helper = """
class Precision:
    def __init__(self, net):
        self.net = net

    def zero_grad(self):
        for p in self.net.parameters():
            p.grad = None

    def backward(self, loss):
        loss.backward()

"""
    src = _SLICED.format(helper=helper, setup="\n        self.precision = Precision(net)",
                         reset="self.precision.zero_grad()", loss="loss = self.net(part).mean()",
                         backward="self.precision.backward(loss)")
    assert [code for code, _ in lint(src)] == ["ACC103"]  # on the helper call or its backward
