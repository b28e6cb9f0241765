"""Field trial 54 (27 public repositories), reduced in our own words:

- a class named ``Accelerator`` imported from another library than HF Accelerate (an audio
  toolkit's, whose ``step(optimizer)`` steps the optimizer it is handed, as a gradient scaler
  does) is neither HF's accelerator nor, from its ``backward(loss)``, a DeepSpeed engine;
- a training step rebound through a tracker's decorators (``step = log(...)(track(...)(step))``)
  keeps running the step.
"""

from __future__ import annotations

import libcst as cst
import pytest

from accumlint.model.module_functions import ModuleFunctions
from accumlint.model.simulation import simulate
from tests.support import lint

_TOOLKIT = """
import torch
from audiokit import ml

accel = ml.Accelerator()
net = accel.prepare_model(torch.nn.Linear(8, 1))
opt = torch.optim.AdamW(net.parameters(), lr=1e-4)


def train(loader, accum):
    for i, x in enumerate(loader):
        loss = net(x).pow(2).mean() / accum
        accel.backward(loss){reset}
        if (i + 1) % accum == 0:
            accel.step(opt)
            accel.update()
            opt.zero_grad()
"""


def _toolkit(reset: bool = False) -> str:
    return _TOOLKIT.replace("{reset}", "\n        opt.zero_grad()" if reset else "")


def test_another_librarys_accelerator_steps_the_optimizer_it_is_handed() -> None:
    (result,) = [r for r in simulate(ModuleFunctions(cst.parse_module(_toolkit())), "train.py")
                 if r.entry.name == "train"]
    assert result.decided, result.reasons()
    roles = {fact.label: (fact.role.value, fact.evidence) for fact in result.roles}
    assert roles["accel"] == ("gradient scaler", "use: its .step() is handed an optimizer, which it steps")
    assert lint(_toolkit()) == []


def test_a_reset_every_microbatch_beside_another_librarys_accelerator_is_found() -> None:
    assert lint(_toolkit(reset=True)) == [("ACC001", 14)]


_TRACKED = """
import torch
from tracking import Tracker

net = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(net.parameters(), lr=0.1)


def micro_step(x, accum, last):
    (net(x).pow(2).mean() / accum).backward(){reset}
    if last:
        opt.step()
        opt.zero_grad()


def train(loader, accum):
    tracker = Tracker()
    global micro_step
    micro_step = tracker.log("train")(tracker.track("train")(micro_step))
    for i, x in enumerate(loader):
        micro_step(x, accum, (i + 1) % accum == 0)
"""


@pytest.mark.parametrize(("reset", "expected"), [(False, []), (True, [("ACC001", 11)])])
def test_a_step_rebound_through_a_trackers_decorators_keeps_running(reset: bool, expected: list) -> None:
    source = _TRACKED.replace("{reset}", "\n    opt.zero_grad()" if reset else "")
    (result,) = [r for r in simulate(ModuleFunctions(cst.parse_module(source)), "train.py")
                 if r.entry.name == "train"]
    assert result.decided, result.reasons()
    assert result.symbols == ("accum",)
    assert lint(source) == expected


_FAST_FORWARD = """
import torch
from accelerate import Accelerator


def fit(accum=4, epochs=3, skip=0):
    acc = Accelerator(gradient_accumulation_steps=accum)
    net = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    data = torch.utils.data.DataLoader(torch.randn(64, 8), batch_size=4)
    net, opt, data = acc.prepare(net, opt, data)
    for epoch in range(epochs):
        for k, x in enumerate(data):
            if epoch == 0 and k < skip:
                continue
            with acc.accumulate(net):
                acc.backward(net(x).pow(2).mean())
                opt.step()
                opt.zero_grad()


fit(skip=1)
"""


def test_a_fast_forward_that_shortens_the_epochs_last_group_is_no_irregular_gate() -> None:
    """A run that skips the epoch's first microbatches (a resume's fast-forward) leaves its last
    group short at the prepared loader's end: the epoch's tail (ACC005's, exempt under
    Accelerate's end-of-loader sync), not an update on the wrong microbatch."""
    assert lint(_FAST_FORWARD) == []


def test_a_zero_based_gate_beside_a_fast_forward_is_still_found() -> None:
    """The first group after the skipped microbatches is the short one here: the gate's."""
    source = """
import torch


def fit(accum=4, epochs=3, skip=0):
    net = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    data = torch.utils.data.DataLoader(torch.randn(64, 8), batch_size=4)
    for epoch in range(epochs):
        for k, x in enumerate(data):
            if epoch == 0 and k < skip:
                continue
            (net(x).pow(2).mean() / accum).backward()
            if k % accum == 0:
                opt.step()
                opt.zero_grad()


fit(skip=2)
"""
    assert lint(source) == [("ACC006", 14)]
