"""Reduced shapes from field trial 44 (helper B): vision, detection, speech, GAN and video
diffusion training loops, rewritten as small synthetic snippets (no fetched code).

- a microbatch counter tested before its increment: the first group holds A + 1 microbatches
  (ACC006, found);
- a project-local copy of the clipping function that rescales ``.grad`` in place, called on every
  microbatch (missed: ACC301 knows only torch's clipping and helpers that call it);
- A chosen per epoch by a conditional expression (``A if epoch >= start else 1``): a run-level
  phase on the epoch index, each side its own run, so A is bound (fixed in this stop);
- A read with ``getattr(cfg, "name", 1)``: decided like ``cfg.name`` (fixed in this stop);
- a backward-and-update helper passed to the epoch function as an argument (the "loss scaler"
  shape): the loop is undecided with a reason that blames a caller the project does show, and a
  tail leaking into the next epoch is missed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli_helpers import cli
from tests.support import findings, one, tree


def loop_statistics(root: Path, files: dict[str, str]) -> list[str]:
    """The ``--statistics`` lines of ``check`` over ``files`` written under ``root``."""
    paths = tree(root, files)
    result = cli("check", "--no-cache", "--statistics", "--select", "ALL", *paths)
    return [line for line in result.stdout.splitlines() if line.startswith("Accumulation loops:")]


# --- ACC006: the counter is tested before it advances -----------------------------------------


def test_a_counter_tested_before_its_increment_makes_a_first_group_of_a_plus_one(tmp_path: Path) -> None:
    # `seen` is 0 on the first microbatch and the test also asks `seen > 0`: the first update
    # comes after microbatch A (the A + 1-th), then every A
    source = """
    def fit(net, opt, loader, epochs, every):
        seen = 0
        for epoch in range(epochs):
            for batch in loader:
                loss = net(batch) / every
                loss.backward()
                if seen % every == 0 and seen > 0:
                    opt.step()
                    opt.zero_grad()
                seen += 1
    """
    assert ("ACC006", 8) in one(tmp_path, source)


# --- ACC301: a local copy of the clipping function ----------------------------------------------

LOCAL_CLIP = """
import torch


def rescale_grads_(params, ceiling):
    grads = [p.grad for p in params if p.grad is not None]
    norm = torch.norm(torch.stack([torch.norm(g.detach(), 2.0) for g in grads]), 2.0)
    factor = torch.clamp(ceiling / (norm + 1e-6), max=1.0)
    for g in grads:
        g.detach().mul_(factor)
    return norm
"""

CLIP_EVERY_MICROBATCH = """
{import_line}


def fit(net, opt, loader, epochs, every, ceiling):
    for epoch in range(epochs):
        opt.zero_grad()
        for k, (inp, tgt) in enumerate(loader):
            loss = net(inp, tgt) / every
            loss.backward()
            {clip}(net.parameters(), ceiling)
            if (k + 1) % every == 0:
                opt.step()
                opt.zero_grad()
"""


def test_torchs_clip_on_every_microbatch_is_found(tmp_path: Path) -> None:
    source = CLIP_EVERY_MICROBATCH.format(import_line="import torch", clip="torch.nn.utils.clip_grad_norm_")
    assert findings(tmp_path, {"train.py": source}) == [("train.py", "ACC301", 11)]


@pytest.mark.xfail(strict=True, reason="ACC301 does not recognise a project function that computes the "
                                       "gradient norm and rescales every .grad in place as clipping")
def test_a_local_clip_copy_on_every_microbatch_is_found(tmp_path: Path) -> None:
    # the helper clips the partial sum of the group's gradient on every microbatch, exactly as
    # torch's function would
    source = CLIP_EVERY_MICROBATCH.format(import_line="from gradtools import rescale_grads_",
                                          clip="rescale_grads_")
    got = findings(tmp_path, {"gradtools.py": LOCAL_CLIP, "train.py": source})
    assert [code for path, code, _ in got if path == "train.py"] == ["ACC301"]


# --- A chosen per epoch, or read with getattr ---------------------------------------------------

A_PER_EPOCH = """
def fit(net, opt, loader, epochs, cfg):
    for epoch in range(epochs):
        every = {every}
        opt.zero_grad()
        for k, (inp, tgt) in enumerate(loader):
            loss = net(inp, tgt) / every
            loss.backward()
            if (k + 1) % every == 0:
                opt.step()
                opt.zero_grad()
"""


def test_a_read_from_the_config_is_an_accumulation_loop(tmp_path: Path) -> None:
    source = A_PER_EPOCH.format(every="cfg.accum")
    assert loop_statistics(tmp_path, {"train.py": source}) == ["Accumulation loops: 1 decided, 0 undecided"]


def test_a_switched_on_after_some_epochs_is_still_an_accumulation_loop(tmp_path: Path) -> None:
    source = A_PER_EPOCH.format(every="cfg.accum if epoch >= cfg.accum_from else 1")
    lines = loop_statistics(tmp_path, {"train.py": source})
    assert len(lines) == 1
    decided, undecided = (int(word) for word in lines[0].replace(",", "").split() if word.isdigit())
    assert decided + undecided == 1


def test_a_read_with_getattr_and_a_default_decides_like_the_attribute(tmp_path: Path) -> None:
    source = A_PER_EPOCH.format(every='getattr(cfg, "accum", 1)')
    assert loop_statistics(tmp_path, {"train.py": source}) == ["Accumulation loops: 1 decided, 0 undecided"]


# --- a backward-and-update helper passed as an argument -----------------------------------------

STEPPER = """
import torch


class ScaledStepper:
    def __init__(self):
        self._scaler = torch.cuda.amp.GradScaler()

    def __call__(self, loss, opt, apply=True):
        self._scaler.scale(loss).backward()
        if apply:
            self._scaler.step(opt)
            self._scaler.update()
"""

EPOCH = """
def run_epoch(net, loader, opt, stepper, every):
    {reset}
    for k, (inp, tgt) in enumerate(loader):
        loss = net(inp, tgt) / every
        stepper(loss, opt, apply=(k + 1) % every == 0)
        if (k + 1) % every == 0:
            opt.zero_grad()
"""

MAIN = """
from epoch import run_epoch
from stepper import ScaledStepper


def main(net, loader, opt, cfg):
    stepper = ScaledStepper()
    for _ in range(cfg.epochs):
        run_epoch(net, loader, opt, stepper, cfg.update_freq)
"""


def test_a_stepper_argument_with_a_reset_per_epoch_stays_silent(tmp_path: Path) -> None:
    # the grads are reset at the start of every epoch: the tail is dropped on purpose
    files = {"stepper.py": STEPPER, "epoch.py": EPOCH.format(reset="opt.zero_grad()"), "main.py": MAIN}
    assert findings(tmp_path, files) == []


@pytest.mark.xfail(strict=True, reason="a backward-and-update callable passed as an argument is not followed: "
                                       "the loop is undecided, blaming a caller that main.py does show")
def test_a_stepper_argument_without_a_reset_leaks_the_tail(tmp_path: Path) -> None:
    # nothing resets between epochs: the last len(loader) % A microbatches join the next epoch's
    # first group
    files = {"stepper.py": STEPPER, "epoch.py": EPOCH.format(reset="pass"), "main.py": MAIN}
    assert [code for _, code, _ in findings(tmp_path, files)] == ["ACC005"]


# --- ACC303: the loss scale changed on a periodic gate that is not the group's boundary ----------


@pytest.mark.xfail(strict=True, reason="ACC303 looks for scaler calls on every microbatch; a scaler.update(new_scale) "
                                       "on a periodic gate that fires inside a group is not reported, though the "
                                       "trace shows it between two backwards of one group")
def test_a_new_loss_scale_set_inside_a_group_is_found(tmp_path: Path) -> None:
    # on microbatch 0 (and every 100th) the scale doubles after that microbatch's backward: the
    # group's earlier contributions carry the old scale, and unscale_ divides them by the new one
    source = """
    def fit(net, opt, scaler, loader, epochs, every):
        for epoch in range(epochs):
            opt.zero_grad()
            for k, (inp, tgt) in enumerate(loader):
                loss = net(inp, tgt) / every
                scaler.scale(loss).backward()
                if (k + 1) % every == 0:
                    scaler.step(opt)
                    scaler.update()
                    opt.zero_grad()
                if k % 100 == 0:
                    scaler.update(scaler.get_scale() * 2.0)
    """
    assert one(tmp_path, source) == [("ACC303", 13)]


# --- a scan for out-of-memory batches before training ------------------------------------------


def test_a_scan_of_the_largest_batches_before_training_is_no_group(tmp_path: Path) -> None:
    # each probe batch runs a backward and resets right away, and no probe updates: those
    # backwards accumulate into no group, so their resets are no ACC001
    source = """
    def probe_memory(net, opt, biggest):
        for name, batch in biggest.items():
            net(batch).mean().backward()
            opt.zero_grad()

    def fit(net, opt, loader, biggest, cfg):
        probe_memory(net, opt, biggest)
        for epoch in range(cfg.epochs):
            for k, batch in enumerate(loader):
                (net(batch).mean() / cfg.accum).backward()
                if (k + 1) % cfg.accum == 0:
                    opt.step()
                    opt.zero_grad()
    """
    assert [code for _, code, _ in findings(tmp_path, {"train.py": source})] == []
