"""A computed from named constants: ``accum = global_batch // micro_batch`` (in a script's
settings, or in the training function), the gate reading ``accum``. A number computed only from
named constants and literals is fixed for the run, as its parts are (:class:`Derived`), so the
name it is assigned to is a named constant of its own, the symbol the configurations bind to A —
not one of the sizes it was computed from (binding the micro-batch size left A = global // A), and
not a counter's number (a plain integer the run computed). Where one part is unknown (the device
count), the name is still what the configurations bind.

A counter that starts at a literal written in the code (``state = {"iter": 0}``, then
``state["iter"] += 1``) is a counter all the same: its increments make numbers that vary."""

from __future__ import annotations

import pytest

from accumlint.model.values import Derived, LabeledInt, varies
from tests.simulation.test_simulation import only, run, updates
from tests.support import lint

#: a pre-training script's settings: A derived from the global and the micro-batch sizes
_SETTINGS = """
import torch

devices = {devices}
global_batch_size = 512
micro_batch_size = 8
batch_size = global_batch_size // devices
gradient_accumulation_steps = batch_size // micro_batch_size
"""

_LOOP = """

def train(model, optimizer, loader):
    state = {"iter_num": 0}
    for batch in loader:
        is_accumulating = (state["iter_num"] + 1) % gradient_accumulation_steps != 0
        loss = model(batch).mean()
        {loss}.backward()
        if not is_accumulating:
            optimizer.step()
            optimizer.zero_grad()
        state["iter_num"] += 1
"""

DEVICES = ["1", "torch.cuda.device_count()", "torch.cuda.device_count() or 1"]


def _script(devices: str, divided: bool = True) -> str:
    loop = _LOOP.replace("{loss}", "(loss / gradient_accumulation_steps)" if divided else "loss")
    return _SETTINGS.replace("{devices}", devices) + loop


@pytest.mark.parametrize("devices", DEVICES)
def test_the_name_a_is_computed_into_is_the_symbol_the_configurations_bind(devices: str) -> None:
    result = only(_script(devices))
    assert result.decided, result.reasons()
    assert result.symbols == ("gradient_accumulation_steps",)
    assert updates(run(result, 2, 4)) == [(0, 1), (0, 3), (1, 1), (1, 3)]
    assert updates(run(result, 4, 8)) == [(0, 3), (0, 7), (1, 3), (1, 7)]


@pytest.mark.parametrize("devices", DEVICES)
def test_a_loss_left_undivided_under_the_derived_a_is_acc103(devices: str) -> None:
    assert [code for code, _ in lint(_script(devices, divided=False), "ALL")] == ["ACC103"]
    assert lint(_script(devices), "ALL") == []


def test_a_derived_a_inside_the_training_function_is_bound_too() -> None:
    source = """
import torch


def train(model, optimizer, loader, global_batch=64, micro_batch=16):
    accum = global_batch // micro_batch
    for k, batch in enumerate(loader):
        loss = model(batch).mean()
        loss.backward()
        if k % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
"""
    result = only(source)
    assert result.symbols == ("accum",)
    # `k % accum == 0` updates after the first microbatch of each epoch: a group of one, then of A
    assert updates(run(result, 2, 4)) == [(0, 0), (0, 2), (1, 0), (1, 2)]
    assert [code for code, _ in lint(source)] == ["ACC006"]


def test_arithmetic_on_constants_is_fixed_and_a_counter_from_a_literal_varies() -> None:
    assert not varies(Derived(8))
    assert isinstance(LabeledInt(512, "global") // LabeledInt(8, "micro"), int)
    source = """
import torch

ACCUM = 2 * 2


def train(model, optimizer, loader):
    counts = {"seen": 0}
    for batch in loader:
        model(batch).mean().backward()
        counts["seen"] += 1
        if counts["seen"] % ACCUM == 0:
            optimizer.step()
            optimizer.zero_grad()
"""
    result = only(source)
    assert result.symbols == ("ACCUM",)
    assert updates(run(result, 2, 4)) == [(0, 1), (0, 3), (1, 1), (1, 3)]


def test_a_counter_started_from_a_named_constant_plus_one_still_counts() -> None:
    source = """
import torch

START = 0


def train(model, optimizer, loader, accum):
    step = START + 1
    for batch in loader:
        model(batch).mean().backward()
        if step % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
        step += 1
"""
    result = only(source)
    assert result.decided, result.reasons()
    assert result.symbols == ("accum",)
    # the first test is a count's, not a run-level choice: one run, every microbatch counted
    assert [dict(t.choices) for t in result.traces if t.configuration.accumulation == 2] == [{}] * 4
    assert updates(run(result, 2, 4)) == [(0, 1), (0, 3), (1, 1), (1, 3)]
