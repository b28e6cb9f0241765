"""Reduced shapes from field trial 47: hand-written GRPO with DeepSpeed, a speech trainer on
Accelerate, a detection engine, a StyleGAN trainer, a from-scratch LLM pre-training script and
diffusion LoRA fine-tuning scripts, rewritten as small synthetic snippets (no fetched code).

- DDP's own sync flag written from A (``net.require_backward_grad_sync = accum == 1``) instead
  of from the microbatch's place in its group: with A > 1 every forward arms a backward that
  skips the all-reduce, so the replicas never average their gradients (ACC402 missed it: only
  ``no_sync()`` contexts turned sync off in the simulation; fixed: the flag as the run last
  wrote it on a model decides the sync of that model's forward and of the backward it arms);
- the same flag written off in a script whose DDP switch is the first of several run-level
  choices: ``check``'s few runs per configuration never take the DDP branch (xfail: the runs
  ``check`` affords pick the later choices' combinations first; ``explain`` finds it);
- a backward reached through ``functools.partial`` of a project helper
  (``backwards = partial(run_backward, half)``): no loop was found to reach a backward, so the
  trainer's accumulation loops were not simulated at all (fixed: call resolution and the
  interpreter bind the partial's fixed arguments before the call's own);
- ACC902 (off by default) on a microbatch ``step`` that a log line sets against the loader's
  length, read then as a position in the epoch that nobody takes for an update count (a strict
  xfail). ``shared/cases/041`` counts the same line as ACC902 where it runs on the microbatch path
  (every ``log_interval`` microbatches, the last microbatch's loss): the test now asserts the
  finding; the same line printed at the update is silent (``test_trial60b``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from accumlint.commands.explain import explain_source
from tests.support import one

# --- ACC402: DDP's sync flag written off for every microbatch -----------------------------------

FLAG_FROM_A = """
import os

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from nets import Net, make_loader

accum = 1
launched = int(os.environ.get("RANK", -1)) != -1
net = Net()
opt = torch.optim.AdamW(net.parameters())
if launched:
    net = DDP(net)
loader = make_loader()


def one_epoch():
    for i, (x, y) in enumerate(loader):
        if launched:
            net.require_backward_grad_sync = {flag}
        loss = net(x, y) / accum
        loss.backward()
        if (i + 1) % accum == 0:
            opt.step()
            opt.zero_grad(set_to_none=True)


for epoch in range(10):
    one_epoch()
"""

#: the line of the flag's write in FLAG_FROM_A
FLAG_LINE = 21


def _sync_findings(tmp_path: Path, source: str) -> list[tuple[str, int]]:
    return [(code, line) for code, line in one(tmp_path, source) if code == "ACC402"]


def test_a_sync_flag_computed_from_a_instead_of_the_group_never_syncs(tmp_path: Path) -> None:
    # with A > 1 the flag is False on every microbatch, the group's last one included
    assert _sync_findings(tmp_path, FLAG_FROM_A.format(flag="0 == accum - 1")) == [("ACC402", FLAG_LINE)]


def test_a_sync_flag_written_off_outright_never_syncs(tmp_path: Path) -> None:
    assert _sync_findings(tmp_path, FLAG_FROM_A.format(flag="False")) == [("ACC402", FLAG_LINE)]


def test_a_sync_flag_on_at_the_groups_last_microbatch_is_silent(tmp_path: Path) -> None:
    # the nanoGPT plan: communicate only on the microbatch that ends the group
    assert _sync_findings(tmp_path, FLAG_FROM_A.format(flag="(i + 1) % accum == 0")) == []


def test_a_sync_flag_on_for_every_microbatch_is_silent(tmp_path: Path) -> None:
    assert _sync_findings(tmp_path, FLAG_FROM_A.format(flag="True")) == []


def test_a_flag_written_after_the_forward_is_reported_once_as_misplaced(tmp_path: Path) -> None:
    # the flag is meant for this microbatch but read at the next forward: ACC401 names it; the
    # group's unsynced last backward follows from it and is not a second finding
    source = FLAG_FROM_A.format(flag="(i + 1) % accum == 0").replace(
        "        if launched:\n            net.require_backward_grad_sync = (i + 1) % accum == 0\n"
        "        loss = net(x, y) / accum\n",
        "        loss = net(x, y) / accum\n        net.require_backward_grad_sync = (i + 1) % accum == 0\n")
    assert [code for code, _ in one(tmp_path, source) if code in ("ACC401", "ACC402")] == ["ACC401"]


def test_a_method_writing_the_flag_off_on_its_own_model_never_syncs(tmp_path: Path) -> None:
    # the flag on `self.net`, written in a trainer method the driver calls once per microbatch
    source = """
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP


    class Trainer:
        def __init__(self, net, loader, accum):
            self.net = DDP(net)
            self.opt = torch.optim.SGD(self.net.parameters(), lr=0.1)
            self.loader = loader
            self.accum = accum

        def fit(self):
            for step, batch in enumerate(self.loader):
                self.net.require_backward_grad_sync = self.accum < 2
                loss = self.net(batch) / self.accum
                loss.backward()
                if (step + 1) % self.accum == 0:
                    self.opt.step()
                    self.opt.zero_grad()
    """
    assert _sync_findings(tmp_path, source) == [("ACC402", 15)]


def test_a_no_sync_context_around_every_microbatch_is_still_found(tmp_path: Path) -> None:
    # the control: the context form of the same bug keeps its finding
    source = """
    import torch


    def fit(net, opt, loader, accum):
        for i, (x, y) in enumerate(loader):
            with net.no_sync():
                loss = net(x, y) / accum
                loss.backward()
            if (i + 1) % accum == 0:
                opt.step()
                opt.zero_grad()
    """
    assert [code for code, _ in _sync_findings(tmp_path, source)] == ["ACC402"]


def test_a_sync_flag_behind_the_first_of_several_run_level_choices_is_found(tmp_path: Path) -> None:
    source = """
    import os

    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    from nets import Net, make_loader

    accum = 1
    launched = int(os.environ.get("RANK", -1)) != -1
    net = Net()
    if launched:
        net = DDP(net)
    opt = torch.optim.AdamW(net.parameters())
    if os.name != "nt":
        net = torch.compile(net)
    if torch.cuda.is_bf16_supported():
        torch.backends.cuda.matmul.allow_tf32 = True
    loader = make_loader()


    def one_epoch():
        for i, (x, y) in enumerate(loader):
            if launched:
                net.require_backward_grad_sync = 0 == accum - 1
            loss = net(x, y) / accum
            loss.backward()
            if (i + 1) % accum == 0:
                opt.step()
                opt.zero_grad(set_to_none=True)


    for epoch in range(10):
        one_epoch()
    """
    assert _sync_findings(tmp_path, source) == [("ACC402", 25)]


# --- a backward behind functools.partial ----------------------------------------------------------

#: the trainer of the partial spellings below: a reset inside the micro-loop wipes the group (ACC001)
PARTIAL_TRAINER = """
{imports}


def run_backward(half, loss, opt, scale=1.0):
    if half:
        loss = loss * scale
    loss.backward()


class Trainer:
    def __init__(self, net, opt, loader, every, half):
        self.net, self.opt, self.loader, self.every, self.half = net, opt, loader, every, half

    def own_backward(self, half, loss, opt):
        run_backward(half, loss, opt)

    def train_step(self):
        backwards = {made}
        for _ in range(self.every):
            self.opt.zero_grad()
            loss = self.net(next(self.loader)) / self.every
            backwards(loss, self.opt)
        self.opt.step()
"""


@pytest.mark.parametrize(("imports", "made"), [
    ("from functools import partial", "partial(run_backward, self.half)"),
    ("import functools", "functools.partial(run_backward, self.half)"),
    ("from functools import partial", "partial(run_backward, self.half, scale=2.0)"),
    ("from functools import partial", "partial(self.own_backward, self.half)"),
    ("from functools import partial as bind_first", "bind_first(run_backward, self.half)"),
], ids=["name", "module", "keyword", "bound_method", "alias"])
def test_a_backward_through_a_partial_of_a_project_helper_is_simulated(tmp_path: Path, imports: str,
                                                                       made: str) -> None:
    # before: a partial of a project function was not followed (its bindings shift), so no loop
    # reached a backward and the trainer was not simulated at all
    source = PARTIAL_TRAINER.format(imports=imports, made=made)
    assert [code for code, _ in one(tmp_path, source)] == ["ACC001"]


def test_the_partial_trainer_with_its_reset_at_the_group_start_is_decided_and_silent(tmp_path: Path) -> None:
    # the control: the same partial, the reset moved before the micro-loop; the loop is still
    # simulated (decided, one update per group of A), not silent for want of a backward
    source = PARTIAL_TRAINER.format(imports="from functools import partial",
                                    made="partial(run_backward, self.half)")
    source = source.replace("            self.opt.zero_grad()\n", "").replace(
        "        for _ in range(self.every):", "        self.opt.zero_grad()\n        for _ in range(self.every):")
    assert "zero_grad()\n        for" in source
    assert one(tmp_path, source) == []
    results = explain_source(str(tmp_path / "train.py"), source.encode(), None, None)
    loops = [(r.entry.name, r.decided) for r in results if r.entry.kind == "function"]
    assert loops == [("Trainer.train_step", True)]


def test_the_same_trainer_with_a_direct_backward_is_found(tmp_path: Path) -> None:
    # the control of the xfail above: only the partial hides the loop
    source = """
    class Trainer:
        def __init__(self, net, opt, loader, every):
            self.net, self.opt, self.loader, self.every = net, opt, loader, every

        def train_step(self):
            for _ in range(self.every):
                self.opt.zero_grad()
                loss = self.net(next(self.loader)) / self.every
                loss.backward()
            self.opt.step()
    """
    assert [code for code, _ in one(tmp_path, source)] == ["ACC001"]


# --- ACC902 (off by default): a microbatch position logged against the epoch's microbatch count -----


def test_a_step_logged_against_the_loaders_length_on_the_microbatch_path_is_acc902(tmp_path: Path) -> None:
    source = """
    import logging

    log = logging.getLogger(__name__)


    def fit(net, opt, loader, accum, epochs):
        per_epoch = len(loader)
        for epoch in range(epochs):
            for step, (x, y) in enumerate(loader):
                loss = net(x, y) / accum
                loss.backward()
                if (step + 1) % accum == 0 or step + 1 == per_epoch:
                    opt.step()
                    opt.zero_grad()
                if step % 100 == 0:
                    log.info("epoch %d (%d/%d) loss %.3f", epoch, step, per_epoch, loss.item())
    """
    assert [code for code, _ in one(tmp_path, source) if code == "ACC902"] == ["ACC902"]
