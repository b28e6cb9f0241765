"""Reduced shapes from field trial 51 (eight repositories: detection, LLM pre-training, RLHF,
diffusion with Accelerate and DeepSpeed, Lightning modules, speech recognition and synthesis,
video diffusion), rewritten as small synthetic snippets (no fetched code).

- found since, with cases in the rule folders: a reset before the backward inside
  ``accumulate()`` where the optimizer was prepared through a helper (ACC501); an undivided
  loss under AdamW is no longer ACC103 (it still is with a gradient clip); a dozen-arm ``elif``
  choosing the optimizer no longer times out (``tests/model/test_control_flow.py``);
- misses left (strict xfails, below): a prepared copy of the loader thrown away while the
  original is iterated (ACC403), a learning rate set by hand from a microbatch counter against
  horizons counted in updates (ACC305); a weight average moved in Lightning's per-batch hook
  while the Trainer accumulates (ACC007) is found since;
- no rule yet: a gradient clip after the optimizer step and reset (it clips nothing).
"""

from __future__ import annotations

import pytest

from tests.support import lint


@pytest.mark.xfail(strict=True, reason="ACC403 reads the loader the loop iterates, not a copy handed to prepare()")
def test_a_prepared_copy_of_the_loader_thrown_away() -> None:
    source = """
import copy
from accelerate import Accelerator
from torch.utils.data import DataLoader


def run(net, opt, data, accum):
    acc = Accelerator(gradient_accumulation_steps=accum)
    batches = DataLoader(data, batch_size=8, shuffle=True)
    net, opt, _ = acc.prepare(net, opt, copy.copy(batches))
    for x in batches:
        with acc.accumulate(net):
            acc.backward(net(x).mean())
            opt.step()
            opt.zero_grad()
"""
    assert [code for code, _ in lint(source, "ACC403")] == ["ACC403"]


@pytest.mark.xfail(strict=True, reason="a learning rate written by hand from a microbatch counter is read only "
                                       "against horizons sized from the loader (issue 31, units)")
def test_a_warmup_in_updates_read_from_a_microbatch_counter() -> None:
    source = """
def fit(net, opt, batches, cfg, epochs):
    for epoch in range(epochs):
        for i, x in enumerate(batches):
            seen = epoch * len(batches) + i
            net(x).mean().backward()
            if seen % cfg["accumulation"] == 0:
                scale = min(1.0, seen / cfg["warmup_updates"])
                for group in opt.param_groups:
                    group["lr"] = cfg["lr"] * scale
                opt.step()
                opt.zero_grad()
"""
    assert "ACC305" in [code for code, _ in lint(source, "ALL")]


def test_a_weight_average_moved_in_lightnings_per_batch_hook() -> None:
    source = """
import copy
import lightning.pytorch as pl
import torch


class Denoiser(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Linear(4, 4)
        self.shadow = copy.deepcopy(self.body).requires_grad_(False)

    def training_step(self, batch, batch_idx):
        return self.body(batch).pow(2).mean()

    def on_train_batch_end(self, outputs, batch, batch_idx):
        with torch.no_grad():
            for s, p in zip(self.shadow.parameters(), self.body.parameters()):
                s.mul_(0.99).add_(p, alpha=0.01)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters())


def main(loader):
    pl.Trainer(accumulate_grad_batches=4).fit(Denoiser(), loader)
"""
    assert "ACC007" in [code for code, _ in lint(source)]
