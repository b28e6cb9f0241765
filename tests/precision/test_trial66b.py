"""Shapes from the 66th field trial (second half), reduced and written anew (no fetched code).

False positives, each asserting silence, with a twin the tool gets right (all three silent since
the trial: a scheduler step on a path whose update runs every microbatch is once per update; the
runs' cadence of an update overrules the reading's; a DDP hook of the module's own may rescale):

- a loop with a mode flag: ``if not cfg.accumulate:`` runs the update, the scheduler step and the
  reset on every microbatch (no accumulation at all in that arm), ``else:`` runs the same three
  under ``(it + 1) % A == 0``; in each arm the scheduler steps exactly when the optimizer does, yet
  ACC304 says the scheduler advances per microbatch while the optimizer updates per group (inline
  arms, and the same with the three calls in a closure both arms call) (twin: the scheduler
  stepped after both arms, on every microbatch: a real ACC304);
- a trainer class whose per-microbatch method bumps ``self.pending``, updates and resets it when it
  reaches A: the simulated runs show one update per A microbatches, yet ACC004 says the update runs
  on every microbatch (twin: the same counter as a local of a function loop: silent);
- ``--select ALL``: a DDP model whose communication hook divides each bucket by A before the
  all-reduce, the first A - 1 microbatches under ``no_sync()``: the synchronized gradient is the
  group mean, yet ACC103 says the loss reaches the update undivided (twin: the same loop without
  the hook: a real ACC103).

Misses, each asserting the finding, with a twin the tool found at the trial (all found since trial
67's changes: a counter's computed number is never None, an evaluation is named or switches the
model's mode, a state-dict walk by name blends weights, a setting's arm that updates every
microbatch says nothing of groups, a helper's token mean is read in its own names, a norm clip
written by hand is a clip):

- an evaluation (``model.eval()``, a validation pass, a print, ``model.train()``) tested on the
  update counter, ``(updates + 1) % eval_every == 0``, on the path every microbatch takes: it runs
  A times per update (ACC010; twin: a ``torch.save`` under the same test: found);
- a weight average kept by an object whose ``__call__`` walks ``state_dict()`` with ``mul_`` and
  ``add_``, called on every microbatch beside a gated update (ACC007; twin: the same walk written
  in the loop: found; its message named the call ``None(...)``, fixed since: the call's text);
- the mode-flag loop above with an off-by-one gate (the index bumped once before ``(i + 1) % A``):
  the accumulating arm's first group is short, yet the flag hides ACC006 (twin: the same loop
  without the flag: found);
- a token mean through an in-module helper, ``masked_mean(x, micro["mask"])``, divided by A in a
  gated loop (ACC102; twin: the same mean written in the loop over a bound mask: found);
- the same token mean written in the loop over the subscript itself, ``(x * micro["mask"]).sum() /
  micro["mask"].sum()``: ACC101, ACC102 and ACC107 crashed (a name built from the subscript text),
  so nothing was reported and the file was not fully checked (fixed since: found, no crash; twin:
  the bound mask);
- an optimizer built by a helper that starts from ``optimizer = None`` and builds it only when a
  planned step count is given (the caller passes one on its training path): the update is not seen,
  so the tail of a ``(step + 1) % A`` loop over a shuffled loader leaks silently (ACC005; twin: the
  helper builds the optimizer unconditionally: found);
- a hand-written norm clip in a small class (``cap.step(params)`` scales every ``.grad`` in place
  when the norm is over the cap) called on every microbatch of a gated loop (ACC301; twin:
  ``torch.nn.utils.clip_grad_norm_`` at the same place: found).
"""

from __future__ import annotations

from tests.support import check, line_of, lint, lint_codes

# --- ACC304: a mode flag whose arms each step the scheduler with the optimizer ----------------

_FLAG_ARMS = """
def run(model, loader, optimizer, scheduler, cfg):
    for it, (x, y) in enumerate(loader):
        loss = model(x, y)
        loss.backward()
        if not cfg.accumulate:
            optimizer.step()
{arm_sched}            optimizer.zero_grad()
        else:
            if (it + 1) % cfg.accum_steps == 0:
                optimizer.step()
{gated_sched}                optimizer.zero_grad()
{after}"""

_FLAG_CLOSURE = """
def run(model, loader, optimizer, scheduler, cfg):
    for it, (x, y) in enumerate(loader):
        loss = model(x, y)
        loss.backward()

        def apply_update():
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()

        if not cfg.accumulate:
            apply_update()
        else:
            if (it + 1) % cfg.accum_steps == 0:
                apply_update()
"""


def test_a_scheduler_stepped_with_the_update_in_each_flag_arm_is_silent() -> None:
    source = _FLAG_ARMS.format(arm_sched="            scheduler.step()\n",
                               gated_sched="                scheduler.step()\n", after="")
    assert "ACC304" not in lint_codes(source)


def test_a_closure_update_called_from_each_flag_arm_is_silent() -> None:
    assert "ACC304" not in lint_codes(_FLAG_CLOSURE)


def test_a_scheduler_stepped_after_both_flag_arms_is_acc304() -> None:
    """The twin: the scheduler outside both arms steps on every microbatch of the accumulating arm."""
    source = _FLAG_ARMS.format(arm_sched="", gated_sched="", after="        scheduler.step()\n")
    assert ("ACC304", line_of(source, "        scheduler.step()")) in lint(source)


# --- ACC004: a per-call counter kept on the trainer object --------------------------------------

_COUNTING_TRAINER = """
class Runner:
    def __init__(self, model, optimizer, accum):
        self.model = model
        self.optimizer = optimizer
        self.accum = accum
        self.pending = 0

    def micro_step(self, x, y):
        loss = self.model(x, y) / self.accum
        loss.backward()
        self.pending += 1
        if self.pending == self.accum:
            self.optimizer.step()
            self.optimizer.zero_grad()
            self.pending = 0
        return loss


def train(model, optimizer, loader, accum):
    runner = Runner(model, optimizer, accum)
    for x, y in loader:
        runner.micro_step(x, y)
"""

_COUNTING_LOOP = """
def train(model, optimizer, loader, accum):
    pending = 0
    for x, y in loader:
        loss = model(x, y) / accum
        loss.backward()
        pending += 1
        if pending == accum:
            optimizer.step()
            optimizer.zero_grad()
            pending = 0
"""


def test_an_update_gated_by_a_counter_on_the_trainer_object_is_silent() -> None:
    """The runs make one update per A microbatches: the reading's every-microbatch cadence yields."""
    assert lint(_COUNTING_TRAINER, "ALL") == []


def test_the_trainer_object_updating_on_every_call_is_acc004() -> None:
    """The twin the runs confirm: the counter tested against 1, so every call updates."""
    source = _COUNTING_TRAINER.replace("if self.pending == self.accum:", "if self.pending >= 1:")
    assert lint(source, "ALL") == [("ACC004", line_of(source, "self.optimizer.step()"))]


def test_the_same_counter_as_a_local_of_the_loop_is_silent() -> None:
    assert lint(_COUNTING_LOOP, "ALL") == []


# --- ACC103 (ALL): the division by A done in a DDP communication hook ----------------------------

_HOOKED_DDP = """
import contextlib

from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel as DDP


def train(net, loader, optimizer, accum, rank):
    model = DDP(net, device_ids=[rank])

    def averaged(state, bucket):
        bucket.set_buffer(bucket.buffer().div_(accum))
        return allreduce_hook(state, bucket)

{register}    for i, (x, y) in enumerate(loader):
        boundary = (i + 1) % accum == 0
        with contextlib.nullcontext() if boundary else model.no_sync():
            loss = model(x, y)
            loss.backward()
        if boundary:
            optimizer.step()
            optimizer.zero_grad()
"""


def test_a_comm_hook_dividing_by_a_is_not_acc103() -> None:
    source = _HOOKED_DDP.format(register="    model.register_comm_hook(None, averaged)\n")
    assert "ACC103" not in lint_codes(source)


def test_the_same_loop_with_a_stock_hook_is_acc103() -> None:
    """torch's ``allreduce_hook`` averages by the world size only: the missing 1/A stays."""
    source = _HOOKED_DDP.format(register="    model.register_comm_hook(None, allreduce_hook)\n")
    assert ("ACC103", line_of(source, "loss.backward()")) in lint(source, "ALL")


def test_the_same_loop_without_the_hook_is_acc103() -> None:
    source = _HOOKED_DDP.format(register="")
    assert ("ACC103", line_of(source, "loss.backward()")) in lint(source, "ALL")


# --- ACC010: an evaluation keyed on the update counter, outside the gate ------------------------

_KEYED_ACTION = """
import torch


def measure(model, batches):
    with torch.no_grad():
        return sum(float(model(x, y)) for x, y in batches)


def run(model, loader, val_batches, optimizer, args):
    updates = 0
    for epoch in range(args.epochs):
        for step, (x, y) in enumerate(loader):
            loss = model(x, y) / args.accum
            loss.backward()
            if (step + 1) % args.accum == 0:
                optimizer.step()
                optimizer.zero_grad()
                updates += 1
            if (updates + 1) % args.eval_every == 0:
{action}
"""

_EVALUATION = """\
                model.eval()
                print(measure(model, val_batches))
                model.train()"""


def test_an_evaluation_keyed_on_the_update_counter_is_acc010() -> None:
    assert "ACC010" in lint_codes(_KEYED_ACTION.format(action=_EVALUATION))


def test_an_evaluation_under_the_update_gate_is_silent() -> None:
    action = "\n".join("    " + line for line in _EVALUATION.splitlines())
    source = _KEYED_ACTION.format(action=action).replace(
        "            if (updates + 1) % args.eval_every == 0:", "                if updates % args.eval_every == 0:")
    assert "                if updates %" in source
    assert lint_codes(source) == ["ACC005"]  # (the tail left at each epoch's end, nothing else)


def test_a_mode_switch_on_every_microbatch_is_no_acc010() -> None:
    """``model.eval()`` run for every microbatch (a frozen normalisation) is no action keyed on updates."""
    source = _KEYED_ACTION.format(action=_EVALUATION).replace(
        "            if (updates + 1) % args.eval_every == 0:", "            if args.eval_every:")
    assert "ACC010" not in lint_codes(source)


def test_a_save_keyed_on_the_update_counter_is_acc010() -> None:
    source = _KEYED_ACTION.format(action='                torch.save(model.state_dict(), "last.pt")')
    assert ("ACC010", line_of(source, "torch.save(")) in lint(source, "ALL")


# --- ACC007: a weight average kept by a callable object ------------------------------------------

_SHADOW_OBJECT = """
import torch


class Shadow:
    def __init__(self, decay, copy):
        self.decay = decay
        self.copy = copy

    def __call__(self, model):
        own = self.copy.state_dict()
        with torch.no_grad():
            for name, value in model.state_dict().items():
                own[name].mul_(self.decay)
                own[name].add_((1.0 - self.decay) * value)


def train(model, copy, loader, optimizer, accum):
    shadow = Shadow(0.999, copy)
    for i, (x, y) in enumerate(loader):
        loss = model(x, y) / accum
        loss.backward()
        if (i + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
        shadow(model)
"""

_SHADOW_INLINE = """
import torch


def train(model, copy, loader, optimizer, accum):
    for i, (x, y) in enumerate(loader):
        loss = model(x, y) / accum
        loss.backward()
        if (i + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
        with torch.no_grad():
            for e, p in zip(copy.parameters(), model.parameters()):
                e.mul_(0.999).add_(p, alpha=0.001)
"""


def test_a_callable_average_object_called_every_microbatch_is_acc007() -> None:
    assert ("ACC007", line_of(_SHADOW_OBJECT, "shadow(model)")) in lint(_SHADOW_OBJECT, "ALL")


def test_the_callable_average_called_after_each_update_is_silent() -> None:
    source = _SHADOW_OBJECT.replace("            optimizer.zero_grad()\n        shadow(model)",
                                    "            optimizer.zero_grad()\n            shadow(model)")
    assert "            shadow(model)" in source
    assert "ACC007" not in lint_codes(source)


def test_a_walk_that_copies_the_weights_by_name_is_no_average() -> None:
    """Copying each tensor by name on every microbatch leaves the copy equal to the weights: harmless."""
    source = _SHADOW_OBJECT.replace("own[name].mul_(self.decay)", "pass").replace(
        "own[name].add_((1.0 - self.decay) * value)", "own[name].copy_(value)")
    assert "own[name].copy_(value)" in source
    assert "ACC007" not in lint_codes(source)


def test_the_same_average_written_in_the_loop_is_acc007() -> None:
    line = line_of(_SHADOW_INLINE, "e.mul_(0.999)")
    assert ("ACC007", line) in lint(_SHADOW_INLINE, "ALL")


def test_the_in_loop_average_message_names_no_none() -> None:
    (finding,) = [f for f in check(_SHADOW_INLINE, "ALL").findings if f.code == "ACC007"]
    assert "None(" not in finding.message


# --- ACC006: an off-by-one gate in the accumulating arm of a mode flag -----------------------------

_SHIFTED_GATE = """
def run(model, loader, optimizer, cfg, start_iter):
    for iteration, (x, y) in enumerate(loader, start_iter):
        iteration = iteration + 1
        loss = model(x, y)
        loss.backward()
{body}"""

_FLAGGED = """\
        if not cfg.accumulate:
            optimizer.step()
            optimizer.zero_grad()
        else:
            if (iteration + 1) % cfg.accum_steps == 0:
                optimizer.step()
                optimizer.zero_grad()
"""

_UNFLAGGED = """\
        if (iteration + 1) % cfg.accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
"""


def test_an_off_by_one_gate_under_a_mode_flag_is_acc006() -> None:
    source = _SHIFTED_GATE.format(body=_FLAGGED)
    assert "ACC006" in lint_codes(source)


def test_an_aligned_gate_under_the_mode_flag_is_silent() -> None:
    source = _SHIFTED_GATE.format(body=_FLAGGED.replace("(iteration + 1) %", "iteration %"))
    assert "ACC006" not in lint_codes(source)


def test_the_same_gate_without_the_flag_is_acc006() -> None:
    source = _SHIFTED_GATE.format(body=_UNFLAGGED)
    assert ("ACC006", line_of(source, "if (iteration + 1) %")) in lint(source)


# --- ACC102: a token mean through a helper, and over a subscript mask -------------------------------

_HELPER_MEAN = """
def masked_mean(values, mask):
    return (values * mask).sum() / mask.sum()


def update(policy, optimizer, loader, accum):
    for idx, micro in enumerate(loader):
        per_token = policy(micro["tokens"]) * micro["adv"]
        loss = masked_mean(per_token, micro["mask"])
        (loss / accum).backward()
        if (idx + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
"""

_INLINE_MEAN = """
def update(policy, optimizer, loader, accum):
    for idx, micro in enumerate(loader):
{bind}        per_token = policy(micro["tokens"]) * micro["adv"]
        loss = (per_token * {mask}).sum() / {mask}.sum()
        (loss / accum).backward()
        if (idx + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
"""


def test_a_token_mean_through_a_helper_divided_by_a_is_acc102() -> None:
    assert ("ACC102", line_of(_HELPER_MEAN, "(loss / accum).backward()")) in lint(_HELPER_MEAN, "ALL")


def test_a_mean_through_the_helper_over_a_computed_mask_is_silent() -> None:
    """A mask the code computes (a fixed count per microbatch) makes the helper's mean a plain mean."""
    source = _HELPER_MEAN.replace('masked_mean(per_token, micro["mask"])',
                                  "masked_mean(per_token, keep_all(per_token))")
    assert "keep_all(" in source
    assert "ACC102" not in lint_codes(source)


def test_a_token_mean_over_a_subscript_mask_is_acc102_without_a_crash() -> None:
    source = _INLINE_MEAN.format(bind="", mask='micro["mask"]')
    result = check(source, "ALL")
    assert result.internal_errors == []
    line = line_of(source, "(loss / accum).backward()")
    assert ("ACC102", line) in [(f.code, f.line) for f in result.findings]


def test_a_token_mean_over_a_bound_mask_is_acc102() -> None:
    source = _INLINE_MEAN.format(bind='        mask = micro["mask"]\n', mask="mask")
    result = check(source, "ALL")
    assert result.internal_errors == []
    line = line_of(source, "(loss / accum).backward()")
    assert ("ACC102", line) in [(f.code, f.line) for f in result.findings]


# --- ACC005: the optimizer from a helper that may return None ----------------------------------------

_MAYBE_BUILT = """
import torch
from torch.utils.data import DataLoader


def build(model, lr, total_steps):
{build}
    return optimizer


def main(args, model, dataset):
    total_steps = None
    if args.do_train:
        total_steps = len(dataset) // args.batch_size // args.accum * args.epochs
    optimizer = build(model, args.lr, total_steps)
    if args.do_train:
        loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True)
        for epoch in range(args.epochs):
            for step, (x, y) in enumerate(loader):
                loss = model(x, y) / args.accum
                loss.backward()
                if (step + 1) % args.accum == 0:
                    optimizer.step()
                    optimizer.zero_grad()
"""

_BUILT_IF_PLANNED = """\
    optimizer = None
    if total_steps is not None:
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr)"""


def test_an_optimizer_built_only_when_steps_are_planned_still_shows_acc005() -> None:
    source = _MAYBE_BUILT.format(build=_BUILT_IF_PLANNED)
    assert ("ACC005", line_of(source, "if (step + 1) % args.accum == 0:")) in lint(source)


def test_an_optimizer_built_unconditionally_shows_acc005() -> None:
    source = _MAYBE_BUILT.format(build="    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)")
    assert ("ACC005", line_of(source, "if (step + 1) % args.accum == 0:")) in lint(source)


# --- ACC301: a hand-written norm clip called every microbatch -----------------------------------------

_CAPPED = """
import torch


class NormCap:
    def __init__(self, max_norm):
        self.max_norm = max_norm

    def step(self, parameters):
        grads = [p.grad for p in parameters if p.grad is not None]
        total = torch.norm(torch.stack([g.norm() for g in grads]))
        coef = self.max_norm / (float(total) + 1e-6)
        if coef < 1:
            for g in grads:
                g.mul_(coef)


def train(model, loader, optimizer, accum):
    cap = NormCap(1.0)
    for step, (x, y) in enumerate(loader):
        loss = model(x, y) / accum
        loss.backward()
{clip}
        if (step + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
"""


def test_a_hand_written_clip_every_microbatch_is_found() -> None:
    source = _CAPPED.format(clip="        cap.step(model.parameters())")
    line = line_of(source, "cap.step(model.parameters())")
    assert {("ACC301", line), ("ACC307", line)} & set(lint(source))


def test_an_unconditional_rescale_of_the_listed_grads_in_a_method_is_acc307() -> None:
    """The same method without the norm test: every gradient of the list scaled on each microbatch."""
    source = _CAPPED.format(clip="        cap.step(model.parameters())")
    source = source.replace("        if coef < 1:\n", "        if True:\n")
    assert "if True:" in source
    assert ("ACC307", line_of(source, "cap.step(model.parameters())")) in lint(source)


def test_a_rescale_of_grads_listed_in_the_loop_is_acc307() -> None:
    source = """
def train(model, loader, optimizer, accum):
    for step, (x, y) in enumerate(loader):
        (model(x, y) / accum).backward()
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        for g in grads:
            g.mul_(0.5)
        if (step + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
"""
    assert lint(source) == [("ACC307", line_of(source, "g.mul_(0.5)"))]


def test_a_rescale_of_listed_weights_is_no_acc307() -> None:
    """A list of the parameters themselves (a weight decay by hand) holds no gradient."""
    source = """
def train(model, loader, optimizer, accum):
    for step, (x, y) in enumerate(loader):
        (model(x, y) / accum).backward()
        if (step + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
            for w in [p.data for p in model.parameters()]:
                w.mul_(0.999)
"""
    assert "ACC307" not in lint_codes(source)


def test_the_library_clip_every_microbatch_is_acc301() -> None:
    source = _CAPPED.format(clip="        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)")
    assert ("ACC301", line_of(source, "clip_grad_norm_(")) in lint(source)
