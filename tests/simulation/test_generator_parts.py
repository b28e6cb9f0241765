"""A project generator called with a microbatch's data (issue 30: the microbatches a loop trains
on, however its helpers spell them). A known miss, kept as a strict xfail.

``for part in chunks(*batch, size=k): model(*part).backward()``: the call's ``*batch`` (data the
run cannot spread) is dropped, so the generator is taken for a stream of microbatches
(``cycle(loader)``-style), or, called with data it sees, run as code whose result the loop cannot
iterate: the loop's backwards are lost. Letting such a ``*value`` reach the callee and yielding
the drawn microbatch's parts decides this loop, but makes library calls on the spread value data
and costs a field trial's decided loop (an RL trainer's runs then spent check's statement budget):
left for the interpreter's cost per statement to come down first.
"""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from accumlint.model.module_functions import ModuleFunctions
from accumlint.model.simulation import simulate
from tests.support import lint

CHUNKED = """
import torch


def chunks(*tensors, size=None):
    for part in zip(*[t.split(size) for t in tensors]):
        yield part


def train(model, loader, accum):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for i, batch in enumerate(loader):
        for part in chunks(*batch, size=2):
            {reset}(model(*part) / accum).backward()
        if (i + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
"""


@pytest.mark.xfail(strict=True, reason="a `*value` of data is dropped at the call; a generator called with data "
                                       "is run as code (see the module's docstring)")
def test_the_parts_of_each_microbatch_are_backpropagated_in_its_group() -> None:
    module = cst.parse_module(textwrap.dedent(CHUNKED.format(reset="")))
    (result,) = simulate(ModuleFunctions(module), "train.py", judged_only=True)
    assert list(result.reasons()) == []
    (trace,) = result.traces
    assert trace.updates_at() == [(0, 3), (0, 7), (1, 3), (1, 7)]  # A = 4, eight microbatches per epoch
    backwards = [e.microbatch for e in trace.events if e.kind.name == "BACKWARD" and e.epoch == 0]
    assert backwards == [m for m in range(8) for _ in range(2)]  # two parts per microbatch
    assert lint(CHUNKED.format(reset="")) == []


def test_a_reset_before_each_part_is_found() -> None:
    code = CHUNKED.format(reset="optimizer.zero_grad()\n            ")
    assert [c for c, _ in lint(code)] == ["ACC001"]
