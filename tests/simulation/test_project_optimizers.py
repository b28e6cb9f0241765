"""An optimizer the project defines by subclassing a library optimizer (a BERT-style Adam with
its own warm-up, a Lion written out) is stepped by the loop: its ``step()`` is the optimizer
update, not code to run statement by statement (running it recorded no update at all, so the
loop was "decided" with no group). A subclass whose ``step()`` hands the call on to another
optimizer's (a wrapper that decides when) is still run. Field trial 54 (a video-text retrieval
trainer): the tail that leaks into the next epoch was missed."""

from __future__ import annotations

import libcst as cst

from accumlint.model.kinds import EventKind
from accumlint.model.module_functions import ModuleFunctions
from accumlint.model.simulation import simulate
from tests.support import lint

_OPTIMIZER = """
import math

import torch
from torch.optim import Optimizer


class PlainSGD(Optimizer):
    def __init__(self, params, lr=0.1):
        super().__init__(params, dict(lr=lr))

    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.data.add_(p.grad, alpha=-group["lr"])
"""

#: ``{flush}``: what the epoch does after its loop
_LOOP = """

accum, epochs = 4, 3
net = torch.nn.Linear(8, 1)
loader = torch.utils.data.DataLoader(torch.randn(72, 8), batch_size=4)
updates = math.ceil(len(loader) / accum) * epochs
opt = PlainSGD(net.parameters())
for epoch in range(epochs):
    for i, x in enumerate(loader):
        (net(x).pow(2).mean() / accum).backward()
        if (i + 1) % accum == 0:
            opt.step()
            opt.zero_grad(){flush}
"""


def _script(flush: str = "") -> str:
    return _OPTIMIZER + _LOOP.replace("{flush}", flush)


def test_the_subclass_step_is_the_update() -> None:
    (result,) = simulate(ModuleFunctions(cst.parse_module(_script())), "train.py")
    assert result.decided, result.reasons()
    trace = next(t for t in result.traces if t.configuration.accumulation == 2 and t.configuration.microbatches == 4
                 and t.configuration.replicas == 1)
    assert [(e.epoch, e.microbatch) for e in trace.events if e.kind is EventKind.UPDATE] == \
        [(0, 1), (0, 3), (1, 1), (1, 3)]


def test_the_leaking_tail_is_found_through_the_subclass() -> None:
    assert lint(_script()) == [("ACC005", 27)]


def test_a_tail_dropped_at_the_epoch_end_stays_silent() -> None:
    """A reset after the epoch's loop drops the tail on purpose (rules-spec ACC005, must not flag)."""
    assert lint(_script("\n    opt.zero_grad()")) == []


def test_a_subclass_that_decides_when_to_step_another_optimizer_is_run() -> None:
    """``step()`` is called every microbatch, and the wrapper steps its inner optimizer once in A
    calls: one update per group, no update on every microbatch."""
    source = """
import torch
from torch.optim import Optimizer


class EveryK(Optimizer):
    def __init__(self, inner, k):
        self.inner, self.k, self.calls = inner, k, 0

    def step(self, closure=None):
        self.calls += 1
        if self.calls % self.k == 0:
            self.inner.step()
            self.inner.zero_grad()


def train(net, loader, accum):
    opt = EveryK(torch.optim.SGD(net.parameters(), lr=0.1), accum)
    for x in loader:
        (net(x).pow(2).mean() / accum).backward()
        opt.step()
"""
    (result,) = [r for r in simulate(ModuleFunctions(cst.parse_module(source)), "train.py")
                 if r.entry.name == "train"]
    trace = next(t for t in result.traces if t.configuration.accumulation == 2 and t.configuration.microbatches == 4
                 and t.configuration.replicas == 1)
    assert [(e.epoch, e.microbatch) for e in trace.events if e.kind is EventKind.UPDATE] == \
        [(0, 1), (0, 3), (1, 1), (1, 3)]
    assert lint(source) == []
