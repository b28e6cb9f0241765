"""Reduced shapes from field trial 50 (ten repositories: Lightning modules with manual and
automatic optimization, a BERT/BART/Transformer-XL examples collection, a multimodal trainer,
an optimizer's example scripts), rewritten as small synthetic snippets (no fetched code).

- a LightningModule whose ``training_step`` divides by A while its own ``optimizer_step``
  accumulates by hand was ACC101 (fixed: the hand gate owns the division); that fix's first
  form also silenced modules whose Trainers in view leave ``accumulate_grad_batches`` at 1,
  which missed A set later on the trainer and a ``LightningCLI`` beside a debug Trainer (the
  controls below keep them flagged);
- a manual-optimization gate on ``batch_idx`` was undecided, Lightning's batch index taken for
  a value no caller in view computes (fixed: Lightning passes the batch's 0-based index in the
  epoch; the gate's off-by-one is ACC006 in ``rules/ACC006-*/cases.toml``);
- ``configure_optimizers`` that rebinds the scheduler's name to its config dict crashed ACC308
  (fixed, ``rules/ACC308-*/cases.toml``); a weight EMA helper with a neutral name run every
  microbatch was missed by ACC007 (fixed, ``rules/ACC007-*/cases.toml``); a throughput whose
  count is handed to a logging helper as an expression was missed by ACC903 (fixed,
  ``rules/ACC903-*/cases.toml``);
- found since: Lightning's ``trainer.max_steps`` (already updates) divided by A for a horizon
  (ACC305); a rate written inside an f-string (ACC903); a horizon read from
  ``self.hparams["..."]`` (ACC308);
- misses left (a strict xfail): a divisor equal to the Trainer's A by value only (ACC101).
"""

from __future__ import annotations

import pytest

from tests.support import lint

# --- ACC101: what still counts as Lightning dividing ---------------------------------------------

#: a LightningModule under automatic optimization that divides its loss by ``ACCUM``; {after}
#: is what the file does with its Trainer
DIVIDING_MODULE = """
import lightning.pytorch as pl
import torch.nn.functional as F

ACCUM = 8


class Head(pl.LightningModule):
    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.l1_loss(self(x), y) / ACCUM


{after}
"""


def test_a_trainer_given_a_later_on_its_attribute_still_divides() -> None:
    after = """def run(loader):
    trainer = pl.Trainer(max_epochs=3)
    trainer.accumulate_grad_batches = ACCUM
    trainer.fit(Head(), loader)
"""
    assert lint(DIVIDING_MODULE.format(after=after)) == [("ACC101", 11)]


def test_a_cli_built_trainer_beside_a_debug_trainer_still_divides() -> None:
    after = """def smoke(loader):
    pl.Trainer(fast_dev_run=True).fit(Head(), loader)


def cli():
    LightningCLI(Head)
"""
    source = "from lightning.pytorch.cli import LightningCLI\n" + DIVIDING_MODULE.format(after=after)
    assert lint(source) == [("ACC101", 12)]


@pytest.mark.xfail(strict=True, reason="A by value: `GROUP` equals the Trainer's literal A but is no A by name "
                                       "or use (issue 31, values)")
def test_a_divisor_equal_to_the_trainers_a_by_value() -> None:
    after = """def run(loader):
    pl.Trainer(accumulate_grad_batches=8).fit(Head(), loader)
"""
    source = DIVIDING_MODULE.format(after=after).replace("ACCUM", "GROUP")
    assert lint(source) == [("ACC101", 11)]


# --- misses left ----------------------------------------------------------------------------------

def test_a_rate_formatted_inside_an_f_string() -> None:
    source = """
import time


def train(net, batches, optimizer, accum):
    started = time.time()
    for i, x in enumerate(batches):
        size = len(x)
        (net(x).sum() / accum).backward()
        if (i + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
            print(f"{size / (time.time() - started):.0f} samples/s")
            started = time.time()
"""
    assert lint(source) == [("ACC903", 13)]


def test_lightning_max_steps_divided_by_a_for_a_horizon() -> None:
    source = """
import lightning.pytorch as pl
import torch


class Seq(pl.LightningModule):
    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters())
        horizon = self.trainer.max_steps // self.trainer.accumulate_grad_batches
        sched = torch.optim.lr_scheduler.LinearLR(opt, 1.0, 0.0, total_iters=horizon)
        return [opt], [{"scheduler": sched, "interval": "step"}]
"""
    assert [code for code, _ in lint(source)] == ["ACC305"]


def test_a_horizon_read_from_hparams_by_subscript() -> None:
    source = """
import lightning.pytorch as pl
import torch


class Tuned(pl.LightningModule):
    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters())
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=self.hparams["num_steps"])
        return [opt], [sched]
"""
    assert [code for code, _ in lint(source)] == ["ACC308"]
