"""Shapes from the 59th field trial and the one false alarm trial 58 left, reduced and written
anew (no fetched code).

- A run-wide microbatch counter (``pos + 1 + len(loader) * epoch``) whose epoch term the run does
  not know (read from a progress object of another package): the counter's start is open, and A
  is the symbol the cadence divides by. The run bound A to the epoch's label instead, then
  simulated "a group of 5 microbatches from two epochs" (ACC005). Now undecided, with the reason.
- A loop over the optimizers (``for i, opt in enumerate(self.optimizers)``) with a backward and
  an update for each, inside the loop over the loader, in epochs of ``while True``: the optimizers'
  loop was read as a pass over data, the loader's pass drew nothing after the run's data, and the
  epochs spun to the iteration budget (trial 58's NATSpeech, undecided). Its items are what it steps:
  optimizers, once; and a ``while True`` iteration that draws nothing after the run's last
  microbatch ends the run.
- A clip every microbatch under ``if cfg.train.max_grad_norm > 0:`` among many other settings
  (trial 59's DPR): the runs a configuration makes covered sixteen combinations of the others
  first. A choice whose branch clips shapes the events, as one whose branch updates does.
"""

from __future__ import annotations

import libcst as cst
import pytest

from accumlint.model.interpreter import SyntaxFacts
from accumlint.model.module_functions import ModuleFunctions
from accumlint.model.simulation import Simulation, simulate
from tests.simulation.test_simulation import run, updates
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


# --- a loop over the optimizers inside the microbatch loop, under `while True` epochs ------------
# (trial 58's NATSpeech trainer: its one loop was undecided, "ran past 2000 iterations")

_OPTIMIZERS_PER_MICROBATCH = """
import torch
import tqdm


class Runner:
    def __init__(self, task, max_updates, accum):
        self.task = task
        self.max_updates = max_updates
        self.accum = accum
        self.global_step = 0
        self.optimizers = task.build_optimizers()

    def fit(self):
        loader = self.task.train_dataloader()
        epoch = 0
        while True:
            self.task.current_epoch = epoch
            bar = tqdm.tqdm(loader, initial=self.global_step, total=float("inf"))
            for batch_idx, batch in enumerate(bar):
                self.one_batch(batch)
                self.global_step += 1
                if self.global_step > self.max_updates:
                    break
            epoch += 1
            if self.global_step > self.max_updates:
                break

    def one_batch(self, batch):
        for index, optimizer in enumerate(self.optimizers):
            loss = self.task.training_step(batch, index) / self.accum
            loss.backward()
            if (self.global_step + 1) % self.accum == 0:
                optimizer.step()
                optimizer.zero_grad()
"""


def _fit(source: str) -> Simulation:
    results = simulate(ModuleFunctions(cst.parse_module(source)), "train.py")
    (fit,) = [s for s in results if s.entry.name == "Runner.fit"]
    return fit


def test_a_loop_over_the_optimizers_it_steps_takes_no_microbatch() -> None:
    fit = _fit(_OPTIMIZERS_PER_MICROBATCH)
    assert fit.decided and fit.symbols == ("accum",)
    # the loader's batches are the microbatches: a run-wide count gates the update of each optimizer
    assert updates(run(fit, 2, 5)) == [(0, 1), (0, 3), (1, 0), (1, 2), (1, 4)]


def test_a_while_true_epoch_loop_ends_with_the_runs_data(monkeypatch: pytest.MonkeyPatch) -> None:
    # read as passes over data, the optimizers' loop draws the microbatches; the loader's pass made
    # at each epoch of `while True` then draws nothing once the run's data is drawn: the run ends there
    # instead of spinning to the iteration budget
    monkeypatch.setattr(SyntaxFacts, "steps_its_items", lambda self, loop: False)
    fit = _fit(_OPTIMIZERS_PER_MICROBATCH)
    reasons = {reason for trace in fit.traces for reason in trace.undecided} | set(fit.undecided)
    assert not any("ran past" in reason for reason in reasons), reasons
    assert fit.traces and all(trace.microbatches_drawn for trace in fit.traces)


# --- a clip under a setting among more settings than the runs a configuration makes --------------
# (trial 59's DPR trainers: the runs covered sixteen combinations of other settings first)

_CLIP_AMONG_SETTINGS = """
import torch


class Wrapped(torch.nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(x)


def fit(net, loader, cfg):
    if cfg.wrap_a:
        net = Wrapped(net)
    if cfg.wrap_b:
        net = Wrapped(net)
    if cfg.wrap_c:
        net = Wrapped(net)
    if cfg.wrap_d:
        net = Wrapped(net)
    if cfg.wrap_e:
        net = Wrapped(net)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for epoch in range(cfg.epochs):
        for i, (x, y) in enumerate(loader):
            loss = torch.nn.functional.mse_loss(net(x), y) / cfg.accum
            loss.backward()
            limit = cfg.max_norm
            if limit > 0:
                torch.nn.utils.clip_grad_norm_(net.parameters(), limit)
            if (i + 1) % cfg.accum == 0:
                opt.step()
                opt.zero_grad()
"""


def test_a_clip_under_a_setting_is_run_before_settings_that_only_wrap_the_model() -> None:
    # a choice whose branch clips shapes the events: the runs take it the other way among the first
    assert ("ACC301", 32) in lint(_CLIP_AMONG_SETTINGS)


def test_the_same_clip_under_the_update_gate_is_silent() -> None:
    gated = _CLIP_AMONG_SETTINGS.replace("""            limit = cfg.max_norm
            if limit > 0:
                torch.nn.utils.clip_grad_norm_(net.parameters(), limit)
            if (i + 1) % cfg.accum == 0:
""", """            limit = cfg.max_norm
            if (i + 1) % cfg.accum == 0:
                if limit > 0:
                    torch.nn.utils.clip_grad_norm_(net.parameters(), limit)
""")
    assert "ACC301" not in [code for code, _ in lint(gated)]
