"""Shapes from the 59th field trial and the one false alarm trial 58 left, reduced and written
anew (no fetched code).

- A run-wide microbatch counter (``pos + 1 + len(loader) * epoch``) whose epoch term the run does
  not know (read from a progress object of another package): the counter's start is open, and A
  is the symbol the cadence divides by. The run bound A to the epoch's label instead, then
  simulated "a group of 5 microbatches from two epochs" (ACC005). Now undecided, with the reason.
"""

from __future__ import annotations

import libcst as cst

from accumlint.model.module_functions import ModuleFunctions
from accumlint.model.simulation import simulate
from tests.support import lint

# --- a run-wide counter whose epoch term comes from an object the run cannot see -----------------

_EPOCH_FROM_AN_UNSEEN_OBJECT = """
import torch

from tracking import Progress


class Runner:
    def __init__(self, net, loader, settings):
        self.net = net
        self.loader = loader
        self.opt = torch.optim.SGD(net.parameters(), lr=0.1)
        self.epochs = settings.epochs
        self.accum = settings.accum

    def train(self):
        progress = Progress()
        for epoch in range(self.epochs):
            progress.update(epoch=epoch)
            for pos, (x, y) in enumerate(self.loader):
                loss = torch.nn.functional.mse_loss(self.net(x), y)
                self.apply(loss, progress.epoch, pos)

    def apply(self, loss, epoch, pos):
        loss.backward()
        seen = pos + 1 + len(self.loader) * epoch
        if seen % self.accum == 0:
            self.opt.step()
            self.opt.zero_grad()
"""


def test_a_run_wide_counter_with_an_unknown_epoch_term_is_silent() -> None:
    assert lint(_EPOCH_FROM_AN_UNSEEN_OBJECT) == []


def test_its_loop_is_undecided_with_the_open_start_as_reason() -> None:
    results = simulate(ModuleFunctions(cst.parse_module(_EPOCH_FROM_AN_UNSEEN_OBJECT)), "train.py")
    (train,) = [s for s in results if s.entry.name == "Runner.train"]
    assert not train.decided
    assert train.symbols == ("settings.accum",)  # A is what the cadence divides by, not the epoch
    reasons = {reason for trace in train.traces for reason in trace.undecided}
    assert reasons == {"the condition `seen % self.accum == 0` counts from a start the code does not fix "
                       "(`progress.epoch`)"}


def test_the_same_shape_counting_within_the_epoch_keeps_acc005() -> None:
    # the twin restarts its count at each epoch: the tail really joins the next epoch's first group
    per_epoch = _EPOCH_FROM_AN_UNSEEN_OBJECT.replace("seen = pos + 1 + len(self.loader) * epoch", "seen = pos + 1")
    assert [code for code, _ in lint(per_epoch)] == ["ACC005"]
