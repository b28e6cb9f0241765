"""Shapes from the 66th field trial (first half), reduced and written anew (no fetched code).

False positives, asserting silence, with twins the tool gets right (all three silent since the
trial: a micro-loop over the parts of one drawn microbatch that nothing cuts for a group is no
group; a clip after a plain backward carries no loss scale; ``backward(loss=...)`` is followed):

- a LightningModule under manual optimization whose ``training_step`` splits one objective over
  several crops or views (``manual_backward`` once per overlapping pair, then one ``opt.step()``),
  with no accumulation setting anywhere: the per-view loop is read as an accumulation group and
  ACC105 says the A backwards add up to A times the mean (twins: the same module that divides each
  piece is silent; a module that gates its update on ``(batch_idx + 1) % every`` without dividing
  is ACC105);
- a script whose pre-training memory probe runs an unscaled ``loss.backward()``, a clip and a step,
  while the epoch function (called later, with a ``GradScaler`` built after the probe) backpropagates
  ``scaler.scale(loss)`` and never clips: ACC302 is reported at the probe's clip (twin: the probe
  that backpropagates ``scaler.scale(loss)`` and clips without ``unscale_`` is ACC302);
- an accumulation loop that divides the loss by A and backpropagates it through a booster's
  ``backward(loss=loss, optimizer=optimizer)`` given as keywords: the loss is not followed through
  the keyword, its factor is unknown, and ACC103 says it reaches backward undivided (twins: the
  positional ``backward(loss, optimizer)`` is silent; the keyword form without the division is
  ACC103; that finding is right only by accident: the loss is not followed through either form).

Misses, strict xfails asserting the finding while it is missed, with twins:

- (found since the trial: an owner's ``backward(loss, optimizer)`` is followed) the same booster
  loop with the loss left undivided and given by position,
  ``backward(loss, optimizer)``: the backpropagated tensor is not followed, its factor stays
  unknown and ACC103 is silent (ColossalChat's PPO and GRPO trainers, where two boosted models
  each backpropagate an undivided loss, are silent for the same reason; twin: ``loss.backward()``
  on the undivided loss is ACC103);
- (found since the trial) a weight EMA written with ``torch._foreach_mul_`` /
  ``torch._foreach_add_(..., alpha=1 - d)``
  over an EMA-named list, run on every microbatch of an accumulation loop: the average decays A
  times too fast, ACC007 is not reported (twin: the same EMA as a loop over
  ``zip(ema_params, model.parameters())`` with ``ema_p.mul_(d).add_(p, alpha=1 - d)`` is ACC007);
- (found since trial 67: a counter advanced by an unknown amount counts copies of it) a task
  object's ``train_step`` whose update gate reads ``self.seen // self.per_replica`` while
  ``self.seen`` advances by ``self.per_replica`` per call (a sample counter turned back into a call
  counter) and which resets the gradients on every call: the gate is left undecided ("counts from a
  start the code does not fix") and ACC001 is not reported (twin: the counter advanced by one and
  read as is is ACC001).
"""

from __future__ import annotations

from tests.support import line_of, lint

# --- ACC105: one objective split over views inside a manual-optimization step --------------------

_VIEWS = """
import pytorch_lightning as pl
import torch


class PairwiseViews(pl.LightningModule):
    def __init__(self, encoder, criterion):
        super().__init__()
        self.encoder = encoder
        self.criterion = criterion
        self.automatic_optimization = False

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        opt.zero_grad()
        crops = batch["crops"]
        running = 0.0
        for j in range(len(crops) - 1):
            emb = self.encoder(crops[j : j + 2])
            piece = self.criterion(emb){divide}
            self.manual_backward(piece)
            running += piece.detach()
        self.log("train_loss", running / (len(crops) - 1))
        opt.step()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)
"""


def test_views_backpropagated_one_by_one_in_a_manual_step_are_silent() -> None:
    assert lint(_VIEWS.format(divide=""), "ALL") == []


def test_views_read_under_a_configured_key_through_a_base_class_are_silent() -> None:
    """The module derives from the project's own Lightning base, and reads the views under a key
    it keeps (``batch[self.views_key]``): still parts of the one batch ``training_step`` is handed."""
    source = _VIEWS.format(divide="").replace("class PairwiseViews(pl.LightningModule):",
                                              "class ViewsBase(pl.LightningModule):\n    pass\n\n\n"
                                              "class PairwiseViews(ViewsBase):").replace(
        'crops = batch["crops"]', "crops = batch[self.views_key]")
    assert "batch[self.views_key]" in source and "(ViewsBase)" in source
    assert lint(source, "ALL") == []


def test_views_divided_by_their_count_are_silent() -> None:
    assert lint(_VIEWS.format(divide=" / (len(crops) - 1)"), "ALL") == []


def test_a_manual_gate_on_the_batch_index_without_division_is_acc105() -> None:
    """The twin the tool finds: real manual accumulation, the loss left undivided."""
    source = """
import pytorch_lightning as pl
import torch


class Gated(pl.LightningModule):
    def __init__(self, net, every):
        super().__init__()
        self.net = net
        self.every = every
        self.automatic_optimization = False

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        loss = self.net(batch).mean()
        self.manual_backward(loss)
        if (batch_idx + 1) % self.every == 0:
            opt.step()
            opt.zero_grad()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)
"""
    assert lint(source, "ALL") == [("ACC105", line_of(source, "self.manual_backward(loss)"))]


# --- ACC302: an unscaled memory probe beside a scaled training function ---------------------------

_PROBE_SCRIPT = """
import torch
from torch.nn.utils import clip_grad_norm_


def memory_probe(model, optimizer, heavy_batches, scaler=None):
    for batch in heavy_batches:
        optimizer.zero_grad()
        loss = model(batch).sum()
        {probe_backward}
        clip_grad_norm_(model.parameters(), 5.0)
        optimizer.step()


def train_epoch(model, optimizer, scaler, loader, use_amp):
    for batch in loader:
        with torch.autocast("cuda", enabled=use_amp):
            loss = model(batch).sum()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()


def run(model, loader, heavy_batches, cfg):
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    memory_probe(model, optimizer, heavy_batches)
    scaler = torch.cuda.amp.GradScaler(enabled=cfg.use_amp)
    for epoch in range(cfg.epochs):
        train_epoch(model, optimizer, scaler, loader, cfg.use_amp)
"""


def test_a_clip_after_an_unscaled_backward_beside_a_scaled_loop_is_silent() -> None:
    """The last backward before the probe's clip is plain: the gradients it clips carry no scale."""
    assert lint(_PROBE_SCRIPT.format(probe_backward="loss.backward()"), "ALL") == []


def test_a_clip_after_arms_of_which_one_scales_is_acc302() -> None:
    """Of the backwards that may precede the clip, one scales: on that path the clip sees scaled
    gradients (the plain arm beside it does not make the clip a probe's)."""
    source = """
import torch


def optimize(model, optimizer, scaler, batch, use_amp):
    loss = model(batch).sum()
    if use_amp:
        scaler.scale(loss).backward()
    else:
        loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    if use_amp:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
"""
    assert lint(source, "ALL") == [("ACC302", line_of(source, "clip_grad_norm_"))]


def test_a_clip_after_a_scaled_backward_without_unscale_is_acc302() -> None:
    source = _PROBE_SCRIPT.format(probe_backward="scaler.scale(loss).backward()")
    assert lint(source, "ALL") == [("ACC302", line_of(source, "clip_grad_norm_(model.parameters(), 5.0)"))]


# --- ACC103: a divided loss handed to a booster's backward by keyword ------------------------------

_BOOSTED = """
import torch


def train(model, optimizer, booster, loader, args):
    for epoch in range(args.epochs):
        for step, batch in enumerate(loader):
            out = model(**batch)
            loss = out.loss{divide}
            {backward}
            if (step + 1) % args.accum_steps == 0:
                optimizer.step()
                optimizer.zero_grad()
        optimizer.step()
        optimizer.zero_grad()
"""

_KEYWORDS = "booster.backward(loss=loss, optimizer=optimizer)"
_POSITIONAL = "booster.backward(loss, optimizer)"
_DIVIDED = " / args.accum_steps"


def test_a_divided_loss_given_to_backward_by_keyword_is_not_acc103() -> None:
    """The loss is read off the ``loss=`` keyword (a tensor's own backward takes none)."""
    source = _BOOSTED.format(divide=_DIVIDED, backward=_KEYWORDS)
    assert "ACC103" not in [code for code, _ in lint(source, "ALL")]


def test_a_divided_loss_given_to_backward_by_position_leaves_only_the_flushed_tails_weight() -> None:
    """Followed now, the 1/A is seen: no ACC103; the epoch's flush applies its r < A microbatches
    each still divided by A (ACC005, the tail's weight), which an unknown factor hid before."""
    source = _BOOSTED.format(divide=_DIVIDED, backward=_POSITIONAL)
    flush = source.split("\n").index("        optimizer.step()") + 1
    assert lint(source, "ALL") == [("ACC005", flush)]


def test_an_undivided_loss_given_to_backward_by_keyword_is_acc103() -> None:
    source = _BOOSTED.format(divide="", backward=_KEYWORDS)
    assert ("ACC103", line_of(source, _KEYWORDS)) in lint(source, "ALL")


def test_an_undivided_loss_given_to_backward_by_position_is_acc103() -> None:
    """``booster.backward(loss, optimizer)``: an owner handed the loss and an optimizer."""
    source = _BOOSTED.format(divide="", backward=_POSITIONAL)
    assert ("ACC103", line_of(source, _POSITIONAL)) in lint(source, "ALL")


_HANDED_THE_COUNT = """
def train(model, optimizer, booster, policy_loss, loader, args):
    for step, batch in enumerate(loader):
        tokens = batch["mask"].sum() * args.accum_steps
        loss = policy_loss(model(**batch), batch["mask"]{count})
        booster.backward(loss, optimizer)
        if (step + 1) % args.accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
"""


def test_a_loss_function_handed_the_groups_token_count_is_not_acc103() -> None:
    """Followed through the owner's backward, the loss comes from a function given the group's
    denominator by name (``total_effective_tokens_in_batch=``): it may normalize, out of sight
    (a reduction of a trial finding that appeared once the positional loss was followed)."""
    source = _HANDED_THE_COUNT.format(count=", total_effective_tokens_in_batch=tokens")
    assert "ACC103" not in [code for code, _ in lint(source, "ALL")]


def test_the_same_loss_function_without_the_count_is_acc103() -> None:
    source = _HANDED_THE_COUNT.format(count="")
    assert ("ACC103", line_of(source, "booster.backward(loss, optimizer)")) in lint(source, "ALL")


def test_an_undivided_loss_backpropagated_directly_is_acc103() -> None:
    source = _BOOSTED.format(divide="", backward="loss.backward()")
    assert ("ACC103", line_of(source, "loss.backward()")) in lint(source, "ALL")


# --- ACC007: a foreach weight EMA on every microbatch ---------------------------------------------

_EMA_LOOP = """
import torch


def train(model, optimizer, loader, ema_params, decay, accum):
    for i, batch in enumerate(loader):
        loss = model(batch).mean() / accum
        loss.backward()
        if (i + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
        with torch.no_grad():
{ema}
"""

_FOREACH = """\
            torch._foreach_mul_(ema_params, decay)
            torch._foreach_add_(ema_params, list(model.parameters()), alpha=1 - decay)"""

_ZIPPED = """\
            for ema_p, p in zip(ema_params, model.parameters()):
                ema_p.mul_(decay).add_(p, alpha=1 - decay)"""


def test_a_foreach_ema_on_every_microbatch_is_acc007() -> None:
    """One finding for the average, at its first kernel (an EMA-named list)."""
    source = _EMA_LOOP.format(ema=_FOREACH)
    assert lint(source, "ALL") == [("ACC007", line_of(source, "torch._foreach_mul_("))]


def test_a_zipped_ema_on_every_microbatch_is_acc007() -> None:
    source = _EMA_LOOP.format(ema=_ZIPPED)
    assert lint(source, "ALL") == [("ACC007", line_of(source, "ema_p.mul_(decay)"))]


# --- ACC001: a gate on a sample counter divided back into calls -----------------------------------

_TASK = """
import torch


class Task:
    def __init__(self, model, optimizer, period, per_replica):
        self.model = model
        self.optimizer = optimizer
        self.period = period
        self.per_replica = per_replica
        self.seen = 0

    def train_step(self, batch):
        idx = {index}
        loss = self.model(batch).mean()
        loss.backward()
        if idx % self.period == self.period - 1:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.optimizer.step()
        self.optimizer.zero_grad()
        self.seen += {advance}
"""


def test_a_gate_on_samples_divided_by_the_batch_with_a_reset_every_call_is_acc001() -> None:
    source = _TASK.format(index="self.seen // self.per_replica", advance="self.per_replica")
    assert lint(source, "ALL") == [("ACC001", line_of(source, "        self.optimizer.zero_grad()"))]


def test_a_gate_on_a_call_counter_with_a_reset_every_call_is_acc001() -> None:
    source = _TASK.format(index="self.seen", advance="1")
    assert lint(source, "ALL") == [("ACC001", line_of(source, "        self.optimizer.zero_grad()"))]


def test_a_gate_on_samples_divided_by_the_batch_with_the_reset_under_it_is_clean() -> None:
    """The same counter in units of the batch, the reset moved under the gate: correct accumulation."""
    source = _TASK.format(index="self.seen // self.per_replica", advance="self.per_replica").replace(
        "            self.optimizer.step()\n        self.optimizer.zero_grad()",
        "            self.optimizer.step()\n            self.optimizer.zero_grad()")
    assert "            self.optimizer.zero_grad()" in source
    assert lint(source, "ALL") == []
