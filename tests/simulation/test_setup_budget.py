"""Set-up before the training loop must not spend ``check``'s statement budget on a loop that never
ends: a look at one batch (``next(iter(loader))``) or at the model's device
(``next(model.parameters())``) is no microbatch, and the ``for`` loop after it is the training pass,
not a second pass that only the budget ends (field trial 51: the most frequent undecided reason)."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from accumlint.model.module_functions import ModuleFunctions
from accumlint.model.simulation import JUDGED_ENTRY_STATEMENTS, simulate
from accumlint.model.trace import Configuration
from accumlint.spec.vocabulary import EventKind
from tests.support import lint

#: a script whose set-up goes through a chain of helpers that build the model and look at the data
#: before the loop; the group's reset comes ``{before}`` or ``{after}`` its update, ``{look}`` is the set-up's look
_SCRIPT = """
import argparse

import torch
from torch.utils.data import DataLoader


def options():
    parser = argparse.ArgumentParser()
    parser.add_argument("--accum", type=int, default=4)
    parser.add_argument("--width", type=int, default=16)
    return parser.parse_args()


def layers(width):
    return torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU())


def build(args):
    net = layers(args.width)
    device = next(net.parameters()).device
    return net.to(device)


def inspect(loader):
    {look}


def main():
    args = options()
    net = build(args)
    loader = DataLoader(torch.randn(64, args.width), batch_size=4)
    inspect(loader)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for i, x in enumerate(loader):
        loss = net(x).pow(2).mean() / args.accum
        loss.backward()
        if (i + 1) % args.accum == 0:
            {before}
            opt.step()
            {after}


main()
"""

#: the reset after the update; the bug seeded: the reset before it (the update applies zeros)
_GOOD, _BAD = ("pass", "opt.zero_grad()"), ("opt.zero_grad()  # the bug seeded", "pass")
_LOOKS = {
    "a batch": "first = next(iter(loader))\n    print(first.shape)",
    "the parameters only": "pass",
}


def _script(resets: tuple[str, str], look: str) -> str:
    before, after = resets
    return textwrap.dedent(_SCRIPT).replace("{before}", before).replace("{after}", after).replace("{look}", look)


@pytest.mark.parametrize("look", sorted(_LOOKS))
def test_a_loop_behind_a_look_at_the_data_is_decided_within_checks_budget(look: str) -> None:
    code = _script(_GOOD, _LOOKS[look])
    (result,) = simulate(ModuleFunctions(cst.parse_module(code)), "train.py", judged_only=True)
    assert result.decided, result.reasons()
    (trace,) = [t for t in result.traces if t.configuration == Configuration(4, 8)]
    assert trace.updates_at() == [(0, 3), (0, 7)]  # (one epoch: the script runs one pass)
    # the look drew no microbatch: the loop's first backward is microbatch 0 of epoch 0
    first = next(e for e in trace.events if e.kind is EventKind.BACKWARD)
    assert (first.epoch, first.microbatch) == (0, 0)
    assert sum(e.kind is EventKind.BACKWARD for e in trace.events) == 8


@pytest.mark.parametrize("look", sorted(_LOOKS))
def test_a_reset_before_the_update_behind_the_set_up_is_reported(look: str) -> None:
    code = _script(_BAD, _LOOKS[look])
    line = next(n for n, text in enumerate(code.splitlines(), 1) if "the bug seeded" in text)
    assert lint(code) == [("ACC003", line)]


@pytest.mark.parametrize("look", sorted(_LOOKS))
def test_the_reset_once_per_update_behind_the_set_up_is_silent(look: str) -> None:
    assert lint(_script(_GOOD, _LOOKS[look])) == []


def test_a_look_after_a_backward_stays_a_second_pass() -> None:
    # a pass started after the training pass backpropagated (an evaluation loader driving a second
    # training loop) is no look: its loop is left to the budget as before, never taken for the epoch
    code = textwrap.dedent("""
        import torch
        first = next(iter(loader))
        net(first).sum().backward()
        for i, x in enumerate(other):
            (net(x).sum() / accum).backward()
            if (i + 1) % accum == 0:
                opt.step()
                opt.zero_grad()
    """)
    (result,) = simulate(ModuleFunctions(cst.parse_module(code)), "train.py", judged_only=True)
    assert not result.decided
    assert f"the statement budget of an entry point ({JUDGED_ENTRY_STATEMENTS}) ran out" in result.reasons()


def test_the_models_device_read_in_each_epoch_is_no_draw() -> None:
    # `next(net.parameters())` inside the epoch loop is no look before training (a loop is running):
    # it is a parameter of the model, not a pass over data that would turn the loop into a second one
    code = textwrap.dedent("""
        import torch
        for epoch in range(epochs):
            device = next(net.parameters()).device
            for i, x in enumerate(loader):
                (net(x.to(device)).sum() / accum).backward()
                if (i + 1) % accum == 0:
                    opt.step()
                    opt.zero_grad()
    """)
    (result,) = simulate(ModuleFunctions(cst.parse_module(code)), "train.py", judged_only=True)
    assert result.decided, result.reasons()
    (trace,) = [t for t in result.traces if t.configuration == Configuration(4, 8)]
    assert trace.updates_at() == [(0, 3), (0, 7), (1, 3), (1, 7)]
