"""A loop that backpropagates several losses of one forward (each once) iterates losses, not
microbatches: no group of microbatches, so no ACC901 (BatchNorm sees the whole batch) nor
ACC202 (the retained graph is used by the next loss). The loop that runs a forward per pass
stays a microbatch loop. Written for these tests."""

from __future__ import annotations

import pytest

from accumlint.model.groups import LoopStyle
from accumlint.settings import config
from tests.support import lint, model_of

_NET = """
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.norm = nn.Conv2d(3, 6, 3), nn.BatchNorm2d(6)

    def forward(self, x):
        return self.norm(self.conv(x))
"""

ONE_FORWARD = {
    "weights indexed by the loop": """
def update(model, optimizer, images, weights):
    optimizer.zero_grad()
    out = model(images)
    for k in range(len(weights)):
        (out.mean() * weights[k]).backward(retain_graph=True)
    optimizer.step()
""",
    "a tuple of losses returned by the forward, iterated": """
def update(model, optimizer, images):
    optimizer.zero_grad()
    losses = model(images)
    for loss in losses:
        loss.backward(retain_graph=True)
    optimizer.step()
""",
    "per-head slices of one output, bound in the loop": """
def update(model, optimizer, images, heads):
    optimizer.zero_grad()
    out = model(images)
    for h in range(heads):
        part = out[:, h].pow(2).mean()
        part.backward(retain_graph=True)
    optimizer.step()
""",
}

MICROBATCHES = {
    "a forward on each pass": """
def update(model, optimizer, chunks):
    optimizer.zero_grad()
    for chunk in chunks:
        out = model(chunk)
        out.mean().backward()
    optimizer.step()
""",
    "losses of several forwards built before the loop": """
def update(model, optimizer, chunks):
    optimizer.zero_grad()
    losses = [model(chunk).mean() for chunk in chunks]
    for loss in losses:
        loss.backward(retain_graph=True)
    optimizer.step()
""",
    "one forward, but a loss function called on each pass": """
def update(model, optimizer, images, targets, criterion):
    optimizer.zero_grad()
    out = model(images)
    for k in range(len(targets)):
        criterion(out, targets[k]).backward(retain_graph=True)
    optimizer.step()
""",
}

#: every rule, off-by-default ones too
EVERY = ",".join(sorted(config.known_codes()))


def _style(source: str) -> LoopStyle:
    (group,) = model_of(source).loops
    return group.style


@pytest.mark.parametrize("loop", ONE_FORWARD.values(), ids=ONE_FORWARD.keys())
def test_losses_of_one_forward_are_no_microbatches(loop: str) -> None:
    assert _style(_NET + loop) is LoopStyle.UNKNOWN
    assert lint(_NET + loop, EVERY) == []


@pytest.mark.parametrize("loop", MICROBATCHES.values(), ids=MICROBATCHES.keys())
def test_a_forward_per_pass_is_still_a_microbatch_loop(loop: str) -> None:
    assert _style(_NET + loop) is LoopStyle.MICRO_LOOP
    assert ("ACC901", 8) in lint(_NET + loop, EVERY)


def test_slices_of_one_forward_are_undecided_too() -> None:
    # backpropagating A slices of one output undivided would sum A slice means (ACC103's
    # matter), but the model cannot tell slices from per-head losses: it stays silent
    loop = """
def update(model, optimizer, images, accum_steps, mb):
    optimizer.zero_grad()
    out = model(images)
    for i in range(accum_steps):
        out[i * mb:(i + 1) * mb].mean().backward(retain_graph=True)
    optimizer.step()
"""
    assert _style(_NET + loop) is LoopStyle.UNKNOWN
    assert lint(_NET + loop, EVERY) == []
