"""A counted micro-loop spelled through ``enumerate`` is the same micro-loop (issue 30: any
spelling of the loop evaluates to the microbatches it runs).

``for k in range(A)`` counts one microbatch per pass; ``for k, _ in enumerate(range(A))`` counted
none, and an ``enumerate`` over a range of unknown length never learned its loop's body, so each
pass of a loop that cuts a batch into slices by offset (``for k, start in enumerate(range(0,
batch_size, micro))``) was taken for a part of one microbatch: the groups came out one outer
iteration long, the first one before any microbatch.
"""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from accumlint.model.module_functions import ModuleFunctions
from accumlint.model.simulation import simulate
from tests.support import lint

SLICED = """
import torch


def train(model, optimizer, samples, args):
    accum = args.accum
    micro = args.batch_size // accum
    for offset in range(0, args.num_samples, args.batch_size):
        batch = samples[offset:offset + args.batch_size]
        for k, start in {passes}:
            part = batch[start:start + micro]
            loss = model(part).mean() / accum
            loss.backward()
            {clip}
            if (k + 1) % accum == 0:
                optimizer.step()
                optimizer.zero_grad()
"""

COUNTED = """
import torch


def train(model, optimizer, make_batch, max_updates, accum):
    for update in range(max_updates):
        for {target} in {passes}:
            x, y = make_batch()
            {reset}loss = model(x, y) / accum
            loss.backward()
        optimizer.step()
        optimizer.zero_grad()
"""


def _updates(source: str) -> set[tuple[tuple[int, int], ...]]:
    module = cst.parse_module(textwrap.dedent(source))
    (result,) = simulate(ModuleFunctions(module), "train.py", judged_only=True)
    assert list(result.reasons()) == []
    return {tuple(t.updates_at()) for t in result.traces}


def test_slices_of_a_batch_by_offset_are_the_groups_microbatches() -> None:
    source = SLICED.format(passes="enumerate(range(0, args.batch_size, micro))", clip="")
    assert _updates(source) == {((0, 3), (0, 7), (1, 3), (1, 7))}


def test_a_clip_on_every_slice_is_found_where_it_is() -> None:
    clip = "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)"
    source = SLICED.format(passes="enumerate(range(0, args.batch_size, micro))", clip=clip)
    assert lint(source) == [("ACC301", 14)]


@pytest.mark.parametrize(("target", "passes"), [
    ("micro_step", "range(accum)"),
    ("micro_step, _", "enumerate(range(accum))"),
    ("micro_step, _", "enumerate(range(0, accum))"),
])
def test_a_micro_loop_counts_one_microbatch_a_pass_however_spelled(target: str, passes: str) -> None:
    assert _updates(COUNTED.format(target=target, passes=passes, reset="")) == {((0, 3), (0, 7), (1, 3), (1, 7))}
    reset = "optimizer.zero_grad()\n            "
    assert [code for code, _ in lint(COUNTED.format(target=target, passes=passes, reset=reset))] == ["ACC001"]
