"""A condition on the microbatch's data whose one branch trains and whose other runs no training
event: the other skips the microbatch's backward, the exceptional path (issue 30, the design's
"the branch that skips is an exceptional path").

A language-model trainer checks its reduced loss with a helper of its own (``if not
has_inf_or_nan(loss): backward, update ... else: print("skipping")``): no NaN/inf guard the model
knows by name, no ``continue``. The loop was undecided ("the condition ... on the microbatch's data
decides an event"); its main path is the branch that trains. A speech trainer's loop over the
slices of a batch leaves a slice with ``continue`` when its forward returns nothing: only that
forward ran in the pass, so the slice is skipped, as one left before any event is.
"""

from __future__ import annotations

import textwrap

import libcst as cst

from accumlint.model.module_functions import ModuleFunctions
from accumlint.model.simulation import simulate
from tests.support import lint

GUARDED = """
import torch


def has_bad_values(t):
    total = float(t.float().sum())
    return total != total or total in (float("inf"), -float("inf"))


def train(model, loader, accum):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for i, (x, y) in enumerate(loader):
        loss = model(x, y) / accum
        if not has_bad_values(loss):
            {before}loss.backward()
            if (i + 1) % accum == 0:
                optimizer.step()
                optimizer.zero_grad()
        else:
            {other}
"""


def _result(source: str):
    module = cst.parse_module(textwrap.dedent(source))
    (result,) = simulate(ModuleFunctions(module), "train.py", judged_only=True)
    return result


def test_the_branch_that_trains_is_the_main_path() -> None:
    result = _result(GUARDED.format(before="", other='print("skipping a bad microbatch")'))
    assert list(result.reasons()) == []
    assert {tuple(t.updates_at()) for t in result.traces} == {((0, 3), (0, 7), (1, 3), (1, 7))}


def test_a_reset_before_each_backward_of_the_main_path_is_found() -> None:
    code = GUARDED.format(before="optimizer.zero_grad()\n            ", other='print("skipping a bad microbatch")')
    assert [c for c, _ in lint(code)] == ["ACC001"]


def test_a_condition_whose_both_branches_train_stays_open() -> None:
    # the other branch backpropagates too (a down-weighted loss): which the data takes decides the
    # group's events, and the code leaves it open
    result = _result(GUARDED.format(before="", other="(loss * 0.1).backward()"))
    (reason,) = result.reasons()
    assert reason.startswith("the condition `not has_bad_values(loss)` on the microbatch's data decides an event")


SLICED = """
import torch


def train(model, loader, accum):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for batch in loader:
        for j in range(accum):
            part = batch[j::accum]
            out = model(part)
            if out is None:
                continue
            {before}(out["loss"] / accum).backward()
        optimizer.step()
        optimizer.zero_grad()
"""


def test_a_slice_skipped_after_its_forward_is_the_exceptional_path() -> None:
    # `continue` after the slice's forward (nothing but a forward ran in that pass): a skipped
    # microbatch, as a `continue` before any event is
    result = _result(SLICED.format(before=""))
    assert list(result.reasons()) == []


def test_a_reset_in_the_slice_loop_is_found() -> None:
    code = SLICED.format(before="optimizer.zero_grad()\n            ")
    assert [c for c, _ in lint(code)] == ["ACC001"]


TRIMMED = """
import torch


class Trainer:
    def __init__(self, model, opt, accum, half):
        self.model = model
        self.opt = opt
        self.accum = accum
        self.half = half
        self.n_iter = 0

    def trim(self, x, lengths):
        if not self.half or len(lengths) < 8:
            return x
        keep = 8 * (len(lengths) // 8)
        return x[:keep]

    def step(self, x, lengths):
        x = self.trim(x, lengths)
        loss = self.model(x).mean() / self.accum
        loss.backward()
        self.n_iter += 1
        if self.n_iter {gate}:
            self.opt.step()
            self.opt.zero_grad()
"""


def test_a_return_in_a_helper_of_a_microbatch_body_leaves_the_helper() -> None:
    """A helper of a body that a caller runs once per microbatch returns early on a data condition
    (a batch too small to trim): it leaves the helper, not the microbatch, and decides no event."""
    result = _result(TRIMMED.format(gate="% self.accum == 0"))
    assert list(result.reasons()) == []
    assert {tuple(t.updates_at()) for t in result.traces} == {((0, 3), (0, 7), (1, 3), (1, 7))}


def test_the_trimmed_body_is_silent_and_its_shifted_gate_shifts_the_groups() -> None:
    assert lint(TRIMMED.format(gate="% self.accum == 0"), "ALL") == []
    shifted = _result(TRIMMED.format(gate="% self.accum == 1"))
    assert {tuple(t.updates_at()) for t in shifted.traces} == {((0, 0), (0, 4), (1, 0), (1, 4))}
