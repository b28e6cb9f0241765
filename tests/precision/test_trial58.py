"""Shapes from the 58th field trial, reduced and written anew (no fetched code).

False positives, now silent, each with a twin that keeps its verdict:

- a run-wide microbatch counter (``pos + 1 + len(loader) * epoch``) in a helper that receives the
  epoch number from a progress object whose ``epoch`` is set through a generic ``update(**kw)``
  (``setattr``): the groups stay A long across epochs, yet the run held ``epoch`` at its
  constructor value and reported a short first group made of two epochs' tails (ACC005);
- the loss of a microbatch built as ``sum((1 / A) * parts[k] * coeffs[k] for k in parts)``: the
  factor inside the generator was not seen, so the loss was said to reach backward undivided (ACC103).

The third family of the trial, a library's training loop reported again at each example script
that runs it, is tested in ``tests/project/test_reported_where_it_loops.py``.

Gradients clipped every microbatch through a project helper that computes the total norm and
calls ``clip_grads_with_norm_`` (ACC301): found since that clip is one of torch's (a miss at the
time). Still a miss, a strict xfail: a scheduler whose horizon is the loop's bound counted in
microbatches while it is stepped once per update (ACC305).
"""

from __future__ import annotations

import pytest

from tests.support import lint

# --- a run-wide microbatch counter fed with the epoch from a progress object ---------------------

_RUN_WIDE_COUNTER = """
import torch


class Progress:
    def __init__(self, epoch=None):
        self.epoch = epoch

    def update(self, **values):
        for key, value in values.items():
            setattr(self, key, value)


class Runner:
    def __init__(self, net, loader):
        self.net = net
        self.loader = loader
        self.opt = torch.optim.SGD(net.parameters(), lr=0.1)

    def train(self, settings):
        self.accum = settings.accum
        progress = Progress(epoch=settings.start)
        for epoch in range(settings.epochs):
            progress.update(epoch=epoch)
            self.run_epoch(progress)

    def run_epoch(self, progress):
        for pos, (x, y) in enumerate(self.loader):
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            self.apply(loss, progress.epoch, pos)

    def apply(self, loss, ep, pos):
        loss.backward()
        seen = pos + 1 + len(self.loader) * ep
        if seen % self.accum == 0:
            self.opt.step()
            self.opt.zero_grad()
"""


def test_a_run_wide_counter_with_the_epoch_from_a_progress_object_is_silent() -> None:
    assert lint(_RUN_WIDE_COUNTER) == []


def test_a_per_epoch_counter_in_the_same_shape_keeps_acc005() -> None:
    # the twin counts microbatches within the epoch only: the tail really joins the next group
    per_epoch = _RUN_WIDE_COUNTER.replace("seen = pos + 1 + len(self.loader) * ep", "seen = pos + 1")
    assert [code for code, _ in lint(per_epoch)] == ["ACC005"]


# --- a loss weighted and divided inside a generator ---------------------------------------------

_WEIGHTED_SUM = """
import torch
from torch.cuda.amp import GradScaler


def run_epoch(net, criterion, loader, opt, cfg):
    scaler = GradScaler(enabled=cfg.amp)
    opt.zero_grad()
    for images, targets in loader:
        for part in range(cfg.accum_steps):
            out = net(images)
            parts = criterion(out, targets)
            coeffs = criterion.coeffs
            total = sum({factor}parts[k] * coeffs[k] for k in parts if k in coeffs)
            scaler.scale(total).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
"""


def test_a_loss_divided_inside_a_weighted_generator_sum_is_silent() -> None:
    assert lint(_WEIGHTED_SUM.format(factor="(1 / cfg.accum_steps) * "), "ALL") == []


def test_the_same_weighted_sum_without_the_factor_keeps_acc103() -> None:
    assert lint(_WEIGHTED_SUM.format(factor=""), "ALL") == [("ACC103", 15)]


# --- misses: a clip helper every microbatch, a horizon counted in microbatches ------------------

_MICROBATCH_BOUND = """
import torch

net = torch.nn.Linear(4, 1)
opt = torch.optim.AdamW(net.parameters())
accum = 4
total_steps = 1000
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: max(0.0, 1 - s / total_steps))


def clip_by_total_norm(params, limit):
    grads = [p.grad for p in params if p.grad is not None]
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    torch.nn.utils.clip_grads_with_norm_(params, limit, norm)
    return norm


step = 0
while step < total_steps:
    x = torch.randn(8, 4)
    step += 1
    loss = net(x).pow(2).mean() / accum
    loss.backward()
    {clip}
    if step % accum == 0:
        opt.step()
        sched.step()
        opt.zero_grad()
"""


def test_a_clip_helper_called_every_microbatch_is_acc301() -> None:
    found = lint(_MICROBATCH_BOUND.format(clip="clip_by_total_norm(list(net.parameters()), 1.0)"))
    assert ("ACC301", 24) in found


def test_torch_clip_called_every_microbatch_is_acc301() -> None:
    found = lint(_MICROBATCH_BOUND.format(clip="torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)"))
    assert ("ACC301", 24) in found


@pytest.mark.xfail(
    strict=True,
    reason="the loop bound counts microbatches and is the scheduler's horizon, stepped per update (ACC305)",
)
def test_a_horizon_equal_to_a_microbatch_bound_is_acc305() -> None:
    found = lint(_MICROBATCH_BOUND.format(clip="pass"), "ALL")
    assert "ACC305" in [code for code, _ in found]
