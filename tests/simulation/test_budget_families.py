"""Accumulation loops that ``check``'s statement budget left undecided in field trial 54, by where
the statements went, reduced in our own words; each is decided now, with the verdict its code
shows, and each has a twin with a bug seeded that is still reported.

A pass restarted at its end: ``batch = next(it, None)``, and where that is None a new pass. The test
``batch is None`` was a condition on data that took the restart on every microbatch, whose items
counted as no microbatch: the run drew one microbatch per optimizer update and went on past its
epochs until the budget. ``next(it, None)`` gives None at the pass's end only, and a batch it drew
is no None."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from accumlint.model import simulation
from accumlint.model.module_functions import ModuleFunctions
from accumlint.model.simulation import Simulation, accumulation_loops, simulate
from accumlint.model.trace import Configuration
from tests.support import lint, lint_codes

#: the group's reset after its update; the bug seeded: the reset before it (the update applies zeros)
GOOD, BAD = ("pass", "opt.zero_grad()"), ("opt.zero_grad()  # the bug seeded", "pass")


def checked(code: str) -> list[Simulation]:
    """The entries of ``code`` as ``check`` simulates them (the largest A's whole groups, its budget)."""
    return simulate(ModuleFunctions(cst.parse_module(code)), "train.py", judged_only=True)


def seeded(template: str, resets: tuple[str, str]) -> str:
    """``template`` with the reset of its group ``{before}`` or ``{after}`` the update."""
    before, after = resets
    return textwrap.dedent(template).replace("{before}", before).replace("{after}", after)


def line_of(code: str, mark: str) -> int:
    return next(n for n, text in enumerate(code.splitlines(), 1) if mark in text)


# --- a pass restarted where `next(it, None)` gives its end ----------------------------------------

#: the resets of GOOD and BAD on the trainer's own optimizer
MEMBER_GOOD, MEMBER_BAD = (tuple(r.replace("opt.", "self.opt.") for r in resets) for resets in (GOOD, BAD))

#: a trainer that takes each microbatch with `next(it, None)` and makes a new pass where it gets None,
#: in a loop of A passes per optimizer update; its update steps run until the run's data ends
RESTARTED = """
    import torch
    from torch.utils.data import DataLoader


    class State:
        pass


    class Trainer:
        def __init__(self, cfg):
            self.cfg = cfg
            self.net = torch.nn.Linear(8, 1)
            self.opt = torch.optim.AdamW(self.net.parameters())
            self.loader = DataLoader(torch.randn(64, 8), batch_size=4)
            self.epoch = 0

        def fetch(self, state):
            batch = next(self.batches, None)
            if batch is None:
                self.epoch += 1
                self.batches = iter(self.loader)
                batch = next(self.batches)
            state.x = batch.float()
            state.noise = torch.randn_like(state.x)
            state.t = torch.rand(state.x.shape[0])
            state.mixed = state.x * (1 - state.t[:, None]) + state.noise * state.t[:, None]
            state.scale = state.t.mean()
            return state

        def update(self, state):
            for _ in range(self.cfg.accum):
                state = self.fetch(state)
                loss = (self.net(state.mixed) - state.noise).pow(2).mean() / self.cfg.accum
                loss.backward()
            {before}
            self.opt.step()
            {after}
            return state

        def train(self):
            self.batches = iter(self.loader)
            for step in range(1, self.cfg.steps + 1):
                state = State()
                state.step = step
                self.update(state)
"""


def test_microbatches_taken_with_a_default_are_counted_one_by_one() -> None:
    # before: `batch is None` was a condition on data taking its restart branch on every microbatch, the
    # restarted pass a second one whose items counted as no microbatch: one microbatch index per update,
    # updates on every index, and the run went on drawing past its epochs
    (result,) = checked(seeded(RESTARTED, MEMBER_GOOD))
    assert result.decided, result.reasons()
    (whole,) = (t for t in result.traces if t.configuration == Configuration(4, 8))
    assert whole.updates_at() == [(0, 3), (0, 7), (1, 3), (1, 7)]
    # with a tail, the pass restarted inside a group carries the group into the next epoch
    (tail,) = (t for t in result.traces if t.configuration == Configuration(4, 9))
    assert tail.updates_at() == [(0, 3), (0, 7), (1, 2), (1, 6)]


def test_a_reset_before_the_update_under_a_restarted_pass_is_reported() -> None:
    code = seeded(RESTARTED, MEMBER_BAD)
    assert lint(code) == [("ACC003", line_of(code, "the bug seeded"))]
    assert lint_codes(seeded(RESTARTED, MEMBER_GOOD)) == []


# --- the file's budget for check: what it leaves open is counted only where it could form a group ----

#: an accumulating loop, written once per entry name
_FIT = """
def {name}(net, opt, loader, accum):
    for i, x in enumerate(loader):
        (net(x).mean() / accum).backward()
        if (i + 1) % accum == 0:
            opt.step()
            opt.zero_grad()
"""
#: two accumulating entries around a gradient check that writes no update
SEVERAL_ENTRIES = "import torch\n" + _FIT.format(name="fit") + """
def gradients_match(net, chunks, k):
    for _ in range(k):
        for chunk in chunks:
            net(chunk).sum().backward()
""" + _FIT.format(name="fit_again")


def test_entries_past_the_file_budget_are_counted_only_where_they_update(monkeypatch: pytest.MonkeyPatch) -> None:
    # the first entry spends the whole budget; the gradient check after it writes no update anywhere
    monkeypatch.setattr(simulation, "JUDGED_FILE_STATEMENTS", 0)
    results = checked(textwrap.dedent(SEVERAL_ENTRIES))
    by_name = {r.entry.name: r for r in results}
    assert by_name["gradients_match"].undecided == [simulation.NO_UPDATE]
    budget = "the file's simulation budget for check (0 statements) ran out"
    assert sorted(by_name[name].reasons() for name in ("fit", "fit_again")) == [[], [budget]]
    assert sorted(accumulation_loops(results)) == [(), (budget,)]
