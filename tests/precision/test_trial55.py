"""Shapes from the 55th field trial, reduced and written anew.

- A loop over ``meter.log_every(range(n), k)`` (torchvision's reference ``MetricLogger``, copied into
  many codebases; here a logger passed in) passes over ``range(n)``: the loop is decided, and a
  scheduler handed the loop's position (``sched.step(cur_epoch=e, cur_step=k)``) is no ACC304,
  while one stepped without it on every microbatch is.
"""

from __future__ import annotations

import textwrap

import libcst as cst

from accumlint.model.module_functions import ModuleFunctions
from accumlint.model.simulation import accumulation_loops, simulate
from tests.support import lint

#: one epoch over a logging wrapper of ``range(n)``, the microbatches drawn with ``next()``
LOGGED_RANGE = """
import torch


def run_epoch(net, batches, opt, sched, epoch, n_iters, meter, accum=1):
    it = iter(batches)
    for k in meter.log_every(range(n_iters), 20):
        x = next(it)
        STEP
        loss = net(x).mean() / accum
        loss.backward()
        if (k + 1) % accum == 0:
            opt.step()
            opt.zero_grad()


class Runner:
    def epoch(self, epoch, net, batches, opt, sched, meter, accum=1):
        return run_epoch(net, batches, opt, sched, epoch, len(batches), meter, accum=accum)
"""


def _source(step: str) -> str:
    return textwrap.dedent(LOGGED_RANGE).replace("STEP", step)


def test_a_loop_over_a_logging_wrapper_of_a_range_is_decided() -> None:
    source = _source("sched.step(cur_epoch=epoch, cur_step=k)")
    assert accumulation_loops(simulate(ModuleFunctions(cst.parse_module(source)), "runner.py", judged_only=True)) \
        == [()]


def test_a_scheduler_told_the_position_of_a_logged_range_is_no_acc304() -> None:
    assert lint(_source("sched.step(cur_epoch=epoch, cur_step=k)")) == []


def test_a_scheduler_stepped_blind_on_every_microbatch_of_a_logged_range_is_acc304() -> None:
    assert lint(_source("sched.step()")) == [("ACC304", 9)]
