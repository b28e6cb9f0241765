"""Shapes from field trial 59 (b), reduced and written anew (no fetched code).

False positive (fixed), with a twin that keeps its verdict:

- a plain loop that updates and resets on every batch and, every ``check_every`` batches, runs a
  probe and clears the gradients again: the modulo around that second reset made ``check_every``
  read as A, so the loop was taken for an accumulation loop that steps every microbatch (ACC004).

Misses:

- a tail-leaking gate ``(i + 1) % A == 0 or (n <= A and i + 1 == n)`` in a loop whose epoch
  count is ``1`` on one branch: the simulated runs are said to decide the tail, yet report
  nothing, and the pattern defers to them (ACC005; found since: ACC005 is judged in the runs of
  two epochs, a setting that runs one is left out of its verdict);
- a weight average updated in a LightningModule's ``on_train_batch_end`` (every batch, so every
  microbatch) under ``Trainer(accumulate_grad_batches=4)`` (ACC007; found since);

Still strict xfails:

- a per-update scheduler resumed with ``last_epoch`` set from a microbatch counter (ACC904);
- a ``global_step`` that advances once per microbatch through two increments (inside the loop
  except on the epoch's last batch, then once after the loop) used as a logging ``step=`` (ACC902).
"""

from __future__ import annotations

import libcst as cst
import pytest

from accumlint.model.module_functions import ModuleFunctions
from accumlint.model.simulation import simulate
from tests.support import lint

# --- an evaluation every k batches followed by a reset, in a loop with no accumulation ----------

_PROBE_EVERY_K = """
import torch


def fit(net, loader, opt, epochs, check_every, probe):
    for epoch in range(epochs):
        done = 0
        net.zero_grad()
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(net(x), y){factor}
            loss.backward()
            opt.step()
            opt.zero_grad()
            done += 1
            if check_every > 0 and done % check_every == 0:
                probe(net)
                net.zero_grad()
                net.train()
"""


def test_a_periodic_probe_with_a_reset_does_not_make_a_plain_loop_accumulate() -> None:
    # the reset after the probe clears gradients the update's own reset already cleared: the runs
    # decide the loop (no value decides its updates), and the modulo is no evidence of a group
    assert lint(_PROBE_EVERY_K.format(factor="")) == []


def test_a_periodic_reset_between_a_backward_and_its_update_stays_undecided() -> None:
    # the same period resetting gradients a backward just wrote does decide what the update applies
    source = _PROBE_EVERY_K.format(factor="").replace(
        "            loss.backward()\n            opt.step()",
        "            loss.backward()\n            if done % check_every == 0:\n                net.zero_grad()\n"
        "            opt.step()")
    (loop,) = simulate(ModuleFunctions(cst.parse_module(source)), "train.py")
    assert not loop.decided
    assert any("varies with a counter and a value the code does not fix" in reason
               for trace in loop.traces for reason in trace.undecided)


def test_the_same_loop_dividing_its_loss_by_accumulation_steps_keeps_acc004() -> None:
    # the twin really divides by an A it never gates on: the per-batch update is ACC004
    source = _PROBE_EVERY_K.replace("check_every, probe", "check_every, probe, accum_steps")
    assert lint(source.format(factor=" / accum_steps")) == [("ACC004", 12)]


# --- a short-epoch clause in the gate, and a branch that runs a single epoch --------------------

_SHORT_EPOCH_CLAUSE = """
import torch


def fit(net, loader, opt, accum_steps, cfg):
    sized = hasattr(loader, "__len__")
    if sized:
        n_epochs = cfg.epochs
    else:
        n_epochs = {fallback}
    n = len(loader)
    for epoch in range(n_epochs):
        for i, (x, y) in enumerate(loader):
            loss = torch.nn.functional.mse_loss(net(x), y) / accum_steps
            loss.backward()
            if (i + 1) % accum_steps == 0 or (n <= accum_steps and i + 1 == n):
                opt.step()
                opt.zero_grad()
"""


def test_a_tail_leak_with_a_single_epoch_branch_is_acc005() -> None:
    assert ("ACC005", 16) in lint(_SHORT_EPOCH_CLAUSE.format(fallback="1"))


def test_the_same_tail_leak_without_the_single_epoch_branch_is_acc005() -> None:
    assert ("ACC005", 16) in lint(_SHORT_EPOCH_CLAUSE.format(fallback="cfg.epochs"))


# --- a weight average in a Lightning per-batch hook under accumulation --------------------------

_LIGHTNING_AVERAGE = """
import lightning.pytorch as pl
import torch


class Smoother(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Linear(8, 8)
        self.shadow = torch.optim.swa_utils.AveragedModel(self.body)

    def training_step(self, batch, batch_idx):
        return self.body(batch).pow(2).mean()

    def on_train_batch_end(self, outputs, batch, batch_idx):
        self.shadow.update_parameters(self.body)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.body.parameters(), lr=1e-3)


def main(data):
    trainer = pl.Trainer(max_epochs=3, accumulate_grad_batches=4)
    trainer.fit(Smoother(), data)
"""


def test_an_average_updated_in_on_train_batch_end_under_accumulation_is_acc007() -> None:
    assert lint(_LIGHTNING_AVERAGE) == [("ACC007", 16)]


def test_the_same_average_without_accumulation_is_silent() -> None:
    assert lint(_LIGHTNING_AVERAGE.replace("accumulate_grad_batches=4", "accumulate_grad_batches=1")) == []


def test_the_same_average_once_per_update_is_silent() -> None:
    # `on_before_optimizer_step` runs at the group's boundary only
    once = _LIGHTNING_AVERAGE.replace("def on_train_batch_end(self, outputs, batch, batch_idx):",
                                      "def on_before_optimizer_step(self, optimizer):")
    assert lint(once) == []


# --- a scheduler resumed from a microbatch counter ----------------------------------------------

_RESUMED_SCHEDULE = """
import torch


class Runner:
    def __init__(self, net, loader, cfg):
        self.net = net
        self.loader = loader
        self.cfg = cfg
        self.seen = 0

    def load(self, state):
        self.seen = state["seen"]

    def run(self):
        cfg = self.cfg
        opt = torch.optim.AdamW(self.net.parameters(), lr=cfg.lr)
        horizon = len(self.loader) * cfg.epochs // cfg.accum_steps
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda u: 1 - u / horizon, last_epoch=self.seen - 1)
        for epoch in range(cfg.epochs):
            for x, y in self.loader:
                loss = torch.nn.functional.mse_loss(self.net(x), y) / cfg.accum_steps
                loss.backward()
                if (self.seen + 1) % cfg.accum_steps == 0:
                    opt.step()
                    opt.zero_grad()
                    sched.step()
                self.seen += 1
"""


@pytest.mark.xfail(
    strict=True,
    reason="a scheduler stepped once per update resumed at last_epoch = a microbatch count: "
    "after resume the schedule jumps A-fold ahead (ACC904)",
)
def test_a_scheduler_resumed_from_a_microbatch_counter_is_acc904() -> None:
    assert "ACC904" in [code for code, _ in lint(_RESUMED_SCHEDULE, "ALL")]


# --- a global_step advanced every microbatch through two increments ----------------------------

_SPLIT_INCREMENT = """
import torch


def fit(net, loader, opt, epochs, accum_steps, board):
    global_step = 0
    for epoch in range(epochs):
        last = len(loader) - 1
        for pos, (x, y) in enumerate(loader):
            loss = torch.nn.functional.mse_loss(net(x), y) / accum_steps
            loss.backward()
            if (global_step + 1) % accum_steps == 0:
                opt.step()
                opt.zero_grad()
{logging}
"""

_LOG_EVERY_BATCH = """\
            board.log({"loss": loss.item()}, step=global_step)
            global_step += 1
"""

_LOG_BUT_THE_LAST = """\
            if pos != last:
                board.log({"loss": loss.item()}, step=global_step)
                global_step += 1
        board.log({"epoch": epoch}, step=global_step)
        global_step += 1
"""


@pytest.mark.xfail(
    strict=True,
    reason="the step counter advances once per microbatch through an increment skipped on the "
    "epoch's last batch plus one after the loop; as a logging step= it reads as updates (ACC902)",
)
def test_a_microbatch_step_split_across_two_increments_is_acc902() -> None:
    found = lint(_SPLIT_INCREMENT.replace("{logging}", _LOG_BUT_THE_LAST), "ALL")
    assert "ACC902" in [code for code, _ in found]


def test_a_microbatch_step_incremented_once_in_the_loop_is_acc902() -> None:
    found = lint(_SPLIT_INCREMENT.replace("{logging}", _LOG_EVERY_BATCH), "ALL")
    assert "ACC902" in [code for code, _ in found]
