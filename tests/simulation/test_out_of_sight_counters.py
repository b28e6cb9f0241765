"""Counters kept on an object the entry receives (a state mapping or an object passed in, built where
the run cannot see): ``state["iter_num"] += 1`` once per microbatch, the update gated on it. The
counter is assumed to start at 0 where the code does not show its start, from its first read on,
so the whole run counts (a test read before the first increment was a run-level choice for the
first iteration and a count for the others: an A = 1 run whose first microbatch did not update).
A store into such a mapping is kept for the run's later reads."""

from __future__ import annotations

import pytest

from tests.simulation.test_simulation import only, run, updates
from tests.support import lint

#: a pre-training loop of the lit-gpt shape: A a module constant, a counter in a state mapping
#: the caller builds, the gate a flag computed before the backward; `{key}` how the counter is read
_PRETRAIN = """
import torch

gradient_accumulation_steps = 4
max_iters = 1000


def train(fabric, state, loader):
    model, optimizer = state["model"], state["optimizer"]
    for batch in loader:
        if {key} >= max_iters:
            break
        is_accumulating = ({key} + {offset}) % gradient_accumulation_steps != 0
        with fabric.no_backward_sync(model, enabled=is_accumulating):
            loss = model(batch).mean()
            fabric.backward(loss / gradient_accumulation_steps)
        if not is_accumulating:
            optimizer.step()
            optimizer.zero_grad()
        {key} += 1
"""

KEYS = ['state["iter_num"]', "state.iter_num"]


def _source(key: str, offset: int) -> str:
    return _PRETRAIN.replace("{key}", key).replace("{offset}", str(offset))


@pytest.mark.parametrize("key", KEYS)
def test_a_counter_read_before_its_increment_counts_from_0_in_every_iteration(key: str) -> None:
    result = only(_source(key, 1))
    assert result.decided, result.reasons()
    assert updates(run(result, 1, 2)) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert updates(run(result, 4, 8)) == [(0, 3), (0, 7), (1, 3), (1, 7)]
    label = key.replace('"', "'")
    assert any(f"`{label}` is assumed to start at 0" in note for t in result.traces for note in t.notes)


@pytest.mark.parametrize("key", KEYS)
def test_the_correct_gate_is_silent(key: str) -> None:
    assert lint(_source(key, 1), "ALL") == []


@pytest.mark.parametrize("key", KEYS)
def test_a_zero_based_gate_on_the_state_counter_is_acc006(key: str) -> None:
    assert lint(_source(key, 0)) == [("ACC006", 17)]


def test_a_gradient_summed_by_hand_is_no_counter() -> None:
    # `self.head.grad += noise` counts nothing up: the gradient is read as what the backwards left
    result = only("""
    class Trainer:
        def fit(self, loader, accum):
            for i, x in enumerate(loader):
                self.model(x).mean().backward()
                if self.head.grad is not None:
                    self.head.grad += self.noise
                if (i + 1) % accum == 0:
                    self.opt.step()
                    self.opt.zero_grad()
    """)
    assert not any("is assumed to start at 0" in note for t in result.traces for note in t.notes)


#: a counter of samples, advanced by a batch size the run does not know (a parameter) and divided
#: back by it for the gate: `{advance}` / `{index}` spell it
_SAMPLES = """
def train(model, optimizer, loader, per_batch, accum):
    seen = 0
    for batch in loader:
        model(batch).mean().backward()
        {advance}
        if ({index}) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
"""


@pytest.mark.parametrize(("advance", "index"), [
    ("seen += per_batch", "seen // per_batch"),
    ("seen += loader.batch_size", "seen // loader.batch_size"),  # read twice, by the same name
    ("seen = seen + per_batch", "seen // per_batch"),
    ("seen = per_batch + seen", "seen // per_batch"),
])
def test_a_counter_in_units_of_an_unknown_batch_counts_microbatches(advance: str, index: str) -> None:
    result = only(_SAMPLES.format(advance=advance, index=index))
    assert result.decided, result.reasons()
    assert updates(run(result, 2, 4)) == [(0, 1), (0, 3), (1, 1), (1, 3)]


def test_a_counter_in_units_of_another_value_stays_unknown() -> None:
    """Divided by something else than what advances it, the count is not a whole number of calls."""
    result = only(_SAMPLES.format(advance="seen += per_batch", index="seen // 3"))
    assert not result.decided


def test_a_computed_number_is_never_none() -> None:
    """``total is not None`` of a number the code computed holds in every run: the optimizer built
    under it exists, so no run is left without updates."""
    source = """
def main(args, model, dataset, loader, make):
    total = len(dataset) // args.batch_size
    optimizer = None
    if total is not None:
        optimizer = make(model)
    for step, x in enumerate(loader):
        model(x).backward()
        if (step + 1) % args.accum == 0:
            optimizer.step()
            optimizer.zero_grad()
"""
    result = only(source)
    assert result.decided, result.reasons()
    full = [t for t in result.traces if t.configuration.microbatches >= 2 * t.configuration.accumulation]
    assert full and all(updates(trace) for trace in full)
