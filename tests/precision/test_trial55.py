"""Shapes from the 55th field trial, reduced and written anew.

- A loop over ``meter.log_every(range(n), k)`` (torchvision's reference ``MetricLogger``, copied into
  many codebases; here a logger passed in) passes over ``range(n)``: the loop is decided, and a
  scheduler handed the loop's position (``sched.step(cur_epoch=e, cur_step=k)``) is no ACC304,
  while one stepped without it on every microbatch is.
- A loop over a configured ``range`` that draws with ``next()`` from an iterator made anew in each
  epoch counts that epoch's microbatches: its count is N, so the tail that joins the next epoch's
  first group is ACC005, and a tail flushed at the range's end is silent.
- A miss and a false alarm, as strict xfails: a step count bumped on every microbatch and again at
  each sync (ACC902); the views of one microbatch backpropagated one by one read as a group
  (ACC103, opt-in).
"""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

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


# --- misses, left for the values (issue 31) and the epoch lengths a config names ---------------

#: an epoch of `settings["iters"]` microbatches drawn with `next()` from an iterator made anew in each epoch;
#: `{flush}` the update's condition beside the cadence
_RANGE_EPOCHS = """
    import torch


    def fit(settings, net, data):
        opt = torch.optim.AdamW(net.parameters())
        k = settings["accumulate"]
        for epoch in range(settings["epochs"]):
            stream = iter(data)
            for j in range(settings["iters"]):
                inputs, labels = next(stream)
                (torch.nn.functional.mse_loss(net(inputs), labels) / k).backward()
                if (j + 1) % k == 0{flush}:
                    opt.step()
                    opt.zero_grad()
    """


def test_a_tail_left_by_a_range_over_a_configured_length_is_acc005() -> None:
    assert lint(textwrap.dedent(_RANGE_EPOCHS.replace("{flush}", ""))) == [("ACC005", 13)]


def test_a_tail_flushed_at_the_end_of_a_configured_range_is_silent() -> None:
    source = _RANGE_EPOCHS.replace("{flush}", ' or j + 1 == settings["iters"]')
    assert lint(textwrap.dedent(source), "ALL") == []


def test_a_range_over_the_whole_run_is_no_epoch() -> None:
    # one iterator for the whole run, made before its only loop: the range counts every microbatch of the
    # run, and its last partial group is no epoch's tail
    source = """
    import torch


    def fit(settings, net, data):
        opt = torch.optim.AdamW(net.parameters())
        k = settings["accumulate"]
        stream = iter(data)
        for j in range(settings["iters"]):
            inputs, labels = next(stream)
            (torch.nn.functional.mse_loss(net(inputs), labels) / k).backward()
            if (j + 1) % k == 0:
                opt.step()
                opt.zero_grad()
    """
    assert lint(textwrap.dedent(source), "ALL") == []


@pytest.mark.xfail(strict=True, reason="ACC902 reads a counter's unit from one increment; a count bumped on every "
                   "microbatch and again at each sync mixes microbatches and updates (the values issue's units)")
def test_a_step_count_bumped_per_microbatch_and_again_per_sync_is_acc902() -> None:
    source = """
    import torch
    from accelerate import Accelerator


    def fit(cfg, net, data):
        accelerator = Accelerator(gradient_accumulation_steps=cfg.accum)
        opt = torch.optim.AdamW(net.parameters())
        net, opt, data = accelerator.prepare(net, opt, data)
        seen = 0
        for epoch in range(cfg.epochs):
            for batch in data:
                with accelerator.accumulate(net):
                    out = net(**batch)
                    accelerator.backward(out.loss)
                    opt.step()
                    opt.zero_grad()
                    seen += 1
                if accelerator.sync_gradients:
                    seen += 1
                    accelerator.log({"loss": out.loss.item()}, step=seen)
                if seen >= cfg.max_updates:
                    break
    """
    assert "ACC902" in [code for code, _ in lint(textwrap.dedent(source), select="ALL")]


def test_terms_of_the_views_of_one_microbatch_backpropagated_one_by_one_are_no_acc103() -> None:
    source = """
    import torch


    def fit(net, loader, opt):
        for crops in loader:
            opt.zero_grad()
            for k, crop in enumerate(crops):
                rest = [c for j, c in enumerate(crops) if j != k]
                net(crop, rest).backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
            opt.step()
    """
    assert lint(textwrap.dedent(source), select="ALL") == []
