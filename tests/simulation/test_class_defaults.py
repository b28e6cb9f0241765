"""An instance reads its class's attribute until it writes its own (issue 30: a counter kept on an
object, "cannot decide" only where the code leaves the start open).

A trainer keeps its counter in a state object, ``state.step``, a dataclass field whose default is
0; a ``load_state_dict`` method, which only a checkpoint library calls, restores it. The counter
was read as a method (``step`` is an optimizer's event name) and its start as open: the loop was
undecided ("counts from a start the code does not fix"). The field's default is what the run's
instance holds, as its ``__init__`` would set it; a method the run never calls writes nothing.
"""

from __future__ import annotations

import textwrap

import libcst as cst

from accumlint.model.module_functions import ModuleFunctions
from accumlint.model.simulation import simulate
from tests.support import lint

TRAINER = """
import dataclasses

import torch


@dataclasses.dataclass
class TrainState:
    step: int = {start}
    seen: int = 0

    def load_state_dict(self, saved):
        self.step = saved["step"]


class Trainer:
    def __init__(self, model, loader, accum):
        self.model = model
        self.loader = loader
        self.accum = accum
        self.state = TrainState()
        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def train(self):
        state = self.state
        for x, y in self.loader:
            state.step += 1
            loss = self.model(x, y) / self.accum
            loss.backward()
            if state.step % self.accum == 0:
                self.optimizer.step()
                {reset}
"""


def _simulated(source: str):
    module = cst.parse_module(textwrap.dedent(source))
    (result,) = [r for r in simulate(ModuleFunctions(module), "train.py", judged_only=True) if r.traces]
    return result


def test_a_dataclass_field_default_starts_the_counter() -> None:
    result = _simulated(TRAINER.format(start=0, reset="self.optimizer.zero_grad()"))
    assert result.decided, result.reasons()
    # check's configuration: A = 4, eight microbatches per epoch, two epochs
    assert {(t.configuration.accumulation, t.configuration.microbatches) for t in result.traces} == {(4, 8)}
    assert {tuple(t.updates_at()) for t in result.traces} == {((0, 3), (0, 7), (1, 3), (1, 7))}
    assert lint(TRAINER.format(start=0, reset="self.optimizer.zero_grad()")) == []


def test_the_counter_read_from_its_default_finds_a_missing_reset() -> None:
    code = TRAINER.format(start=0, reset="pass")
    assert [c for c, _ in lint(code)] == ["ACC002"]


def test_a_default_that_is_no_multiple_of_a_shifts_the_groups() -> None:
    # the start is the field's default, 1: with A = 4 the first update comes after the third
    # microbatch, a group of three (ACC006's short first group), then every fourth
    result = _simulated(TRAINER.format(start=1, reset="self.optimizer.zero_grad()"))
    assert result.decided, result.reasons()
    assert {tuple(t.updates_at())[:2] for t in result.traces} == {((0, 2), (0, 6))}
