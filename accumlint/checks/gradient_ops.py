"""Gradient operations once per group: clipping and the gradient scaler (P6, P7)."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from accumlint import frameworks as fw
from accumlint.checks.base import Hit, Rule
from accumlint.checks.gate import RuleGate, defines_lightning_hook, runs_loop
from accumlint.checks.group_traces import FRAMEWORK_CLIPPERS, with_traces
from accumlint.checks.shared.ledger import gradient_rescales
from accumlint.model import Cadence, Event, EventKind, FileModel, Group, LoopStyle, Role
from accumlint.model.dataflow import reaching_assignment, value_history
from accumlint.model.events import CLIP_CALLS, measures_only
from accumlint.model.kinds import Evidence
from accumlint.model.names import calls_in, code_of, dotted, last_segment, method_name, names_in
from accumlint.model.owned_loops import catalyst_batch_hooks, lightning_backward_hooks, lightning_clips_before_closure
from accumlint.model.scopes import FrameKind
from accumlint.model.sync import scope_name

_ONCE_PER_GROUP = (Cadence.UPDATE, Cadence.FRAMEWORK_GATED)
#: a clip by name, or the two halves of one written by hand (a norm, then an in-place rescale)
_CLIP_MARKERS = tuple(sorted({name.encode() for name in CLIP_CALLS} | {b"norm", b"vector_norm"}))
_BY_HAND = (frozenset({"norm", "vector_norm"}), frozenset({"mul_", "div_"}))
#: ACC301's site part in a Lightning hook that runs around every microbatch's backward
_LIGHTNING_CLIP = ("let Lightning clip (`Trainer(gradient_clip_val=...)`), or clip in `configure_gradient_clipping` / "
                   "`on_before_optimizer_step`")


def accumulating_groups(model: FileModel) -> Iterator[Group]:
    """Loops whose optimizer update runs once per group of A > 1 microbatches, with no
    optimizer updating on every microbatch next to it (a GAN's discriminator may own the
    per-microbatch gradient operations) and no gradient reset on every microbatch (then each
    microbatch's gradient is handled alone, e.g. DP-SGD's per-example clipping; ACC001 speaks
    when that is a bug)."""
    for group in model.loops:
        if group.accumulates is not True or group.style is LoopStyle.DEEPSPEED:
            continue
        updates = group.of_kind(EventKind.UPDATE)
        grouped = {dotted(u.target) for u in updates if group.cadence(u) in _ONCE_PER_GROUP}
        every_microbatch = {dotted(u.target) for u in updates if group.cadence(u) is Cadence.MICROBATCH}
        if not grouped or every_microbatch - grouped:
            continue
        if any(group.cadence(r) is Cadence.MICROBATCH for r in group.of_kind(EventKind.RESET)):
            continue
        yield group


def _measures_only(clip: Event) -> bool:
    return measures_only(clip.site.call)


def _callee(event: Event) -> str:
    call = event.site.call
    return (dotted(call.func) if call is not None else None) or event.method


def _scaler_site(scaler: str) -> str:
    """The site part of a GradScaler rule's help: the scaler's name where the spec's ``scaler`` is not it."""
    return "" if scaler == "scaler" else f"the scaler is `{scaler}`"


class ClipInsideGroup(Rule):
    """ACC301: gradients clipped on a path that runs every microbatch of a group.

    Flags ``clip_grad_norm_``/``clip_grad_value_`` (torch, Accelerate, Fabric, Lightning's
    ``self.clip_gradients``) whose cadence is "every microbatch" in a loop that updates once
    per group of A > 1, and any clip in the ``training_step`` of a LightningModule under
    automatic optimization (it runs before that microbatch's backward). Exempt: clips under the
    update gate or ``if accelerator.sync_gradients:``; clips with an infinite threshold (norm
    measurement); loops that reset or update every microbatch; DeepSpeed and mmengine, which
    clip at their own boundary; Accelerate built with ``deepspeed_plugin=`` (its clip is a no-op).
    """

    code = "ACC301"
    #: a clip, and a group or a LightningModule (its hooks) to clip in
    gate = RuleGate(markers=_CLIP_MARKERS, facts=lambda facts: (
        facts.calls(CLIP_CALLS) or all(facts.calls(names) for names in _BY_HAND)) and (
        runs_loop(facts) or defines_lightning_hook(facts) or facts.mentions(fw.lightning.MODULE_BASES)))

    @with_traces
    def check(self, model: FileModel) -> Iterator[Hit]:
        reported: set[int] = set()
        for group in accumulating_groups(model):
            for clip in group.of_kind(EventKind.CLIP):
                if (group.cadence(clip) is not Cadence.MICROBATCH or id(clip.node) in reported
                        or clip.role.role in FRAMEWORK_CLIPPERS or _measures_only(clip)):
                    continue
                if model.frameworks.accelerate_deepspeed(clip.role):
                    continue
                reported.add(id(clip.node))
                callee = _callee(clip)
                if clip.role.role is Role.ACCELERATOR and group.accumulate_contexts:
                    yield Hit(
                        clip.node,
                        f"`{callee}` is not gated by `accumulate()`: it runs on every microbatch and clips partial "
                        "sums of the group's gradient (under fp16 it also unscales each time, and the second "
                        "unscale before the update raises)",
                        "guard the clip with `if accelerator.sync_gradients:` inside the `accumulate()` block",
                    )
                    continue
                yield Hit(
                    clip.node,
                    f"`{callee}` runs on every microbatch, so it clips partial sums of the group's gradient "
                    "(early contributions are clipped several times) instead of the accumulated gradient the "
                    "optimizer update applies",
                )
        for scope in model.frameworks.lightning_automatic_hooks():
            for clip in model.events[scope]:
                if clip.kind is not EventKind.CLIP or id(clip.node) in reported or _measures_only(clip):
                    continue
                reported.add(id(clip.node))
                yield Hit(
                    clip.node,
                    f"Lightning runs this microbatch's backward after `training_step` returns, so `{_callee(clip)}` "
                    "acts on earlier microbatches' gradients (a partial sum under `accumulate_grad_batches` > 1, "
                    "otherwise gradients already applied) and never on the gradient the update uses",
                    _LIGHTNING_CLIP,
                )
        for scope in catalyst_batch_hooks(model):
            for clip in model.events[scope]:
                if (clip.kind is not EventKind.CLIP or id(clip.node) in reported or _measures_only(clip)
                        or any(f.kind in (FrameKind.IF, FrameKind.GUARD) for f in clip.site.frames)):
                    continue  # a clip under a test of the user's: its cadence is not known here
                reported.add(id(clip.node))
                yield Hit(
                    clip.node,
                    f"`{scope.name}` runs on every batch while `OptimizerCallback(accumulation_steps=...)` updates "
                    f"once per group, so `{_callee(clip)}` clips partial sums of the group's gradient",
                    "pass `grad_clip_fn=` to catalyst's backward/optimizer callback, or clip under the same count "
                    "test as the update",
                )
        for clip in lightning_clips_before_closure(model):
            if id(clip.node) in reported or _measures_only(clip):
                continue
            reported.add(id(clip.node))
            yield Hit(
                clip.node,
                f"`{_callee(clip)}` runs before this `optimizer_step` hands on `optimizer_closure`, which runs the "
                "update's last `training_step` and backward: the clip never sees the gradient the update applies",
                "clip after the closure has run (in `on_before_optimizer_step` or `configure_gradient_clipping`), "
                "or let Lightning clip with `Trainer(gradient_clip_val=...)`",
            )
        for scope in lightning_backward_hooks(model):
            for clip in model.events[scope]:
                if clip.kind is not EventKind.CLIP or id(clip.node) in reported or _measures_only(clip):
                    continue
                reported.add(id(clip.node))
                yield Hit(
                    clip.node,
                    f"Lightning calls `{scope.name}` around every microbatch's backward, so with "
                    f"`accumulate_grad_batches` > 1 `{_callee(clip)}` clips partial sums of the group's gradient "
                    "instead of the accumulated gradient the update applies",
                    _LIGHTNING_CLIP,
                )


class ClipBeforeUnscale(Rule):
    """ACC302: gradients clipped while still multiplied by the GradScaler's scale.

    Flags a torch clip (``torch.nn.utils.clip_grad_*``, FSDP's ``clip_grad_norm_``) followed on
    the same path by ``scaler.step(opt)`` with no ``unscale_`` before the clip. A scaler built
    with ``enabled=False`` is exempt; ``enabled=<expression>`` is flagged: the clip is wrong in
    every run where the scaler is on, the runs it exists for. Exempt: Accelerate's and Fabric's
    clips (they unscale), clips whose threshold is multiplied by the scale or infinite, and a
    clip whose function is also called from a place where an unscale precedes it.
    """

    code = "ACC302"
    #: a clip and a ``scaler.step(...)`` (the update it must precede), in a loop or not
    gate = RuleGate(markers=_CLIP_MARKERS, facts=lambda facts: facts.calls(CLIP_CALLS) and facts.calls(("step",)))

    def check(self, model: FileModel) -> Iterator[Hit]:
        verdicts: dict[int, list[tuple[Event, Event] | None]] = {}
        for scope in model.scopes:
            events = model.events[scope]
            for clip in events:
                if clip.kind is not EventKind.CLIP or model.frameworks.clip_unscales(clip) is not False:
                    continue
                if _measures_only(clip) or _threshold_scaled(clip):
                    continue
                step = next((e for e in events if e.kind is EventKind.UPDATE and e.method == "scaler.step"
                             and e.order > clip.order and not clip.site.excludes(e.site)), None)
                if step is None or _after_an_unscaled_backward(events, clip):
                    continue
                unscaled = any(e.kind is EventKind.UNSCALE and e.order < clip.order for e in events)
                # keyed by the clip's own statement: its copies inlined into callers are the same clip
                verdicts.setdefault(id(clip.site.node), []).append(None if unscaled else (clip, step))
        for found in verdicts.values():
            if any(v is None for v in found):
                continue  # in one caller's context the gradients were unscaled first: not decidable
            clip, step = found[0]  # type: ignore[misc]
            if model.frameworks.scaler_enabled(step.role) is False:
                continue
            if step.role.evidence is Evidence.NAME and not model.imports.imports_module("torch"):
                continue
            scaler = dotted(step.site.call.func.value) if step.site.call is not None else None  # type: ignore[union-attr]
            scaler = scaler or "scaler"
            yield Hit(
                clip.node,
                f"`{_callee(clip)}` runs before `{scaler}.unscale_(...)`, so it measures gradients still "
                "multiplied by the loss scale (65536 at first) and nearly every update is clipped to a "
                "gradient norm of the threshold divided by the scale",
                _scaler_site(scaler),
            )


def _after_an_unscaled_backward(events: list[Event], clip: Event) -> bool:
    """Whether every backward that may run before ``clip`` on its path backpropagates a loss that no
    scaler's ``scale(...)`` multiplied (a memory probe's plain ``loss.backward()`` before the scaled
    training runs): the gradients it clips carry no loss scale. One arm that scales (``if amp:
    scaler.scale(loss).backward() else: loss.backward()``) keeps the clip in question."""
    backwards = [e for e in events if e.kind is EventKind.BACKWARD and e.order < clip.order
                 and not clip.site.excludes(e.site)]
    return bool(backwards) and all(_plain(backward) for backward in backwards)


def _plain(backward: Event) -> bool:
    """Whether a backward is a tensor's own on a value no ``scale(...)`` call computed."""
    if backward.method != "backward" or backward.target is None or backward.role.role is not Role.UNKNOWN:
        return False  # (an engine's or an accelerator's backward scales the loss itself)
    return not any(method_name(call) == "scale" for value, _, _ in value_history(backward.target, backward.site)
                   for call in calls_in(value))


def _threshold_scaled(clip: Event) -> bool:
    """Whether the clip's arguments read the scaler's scale (``max_norm * scaler.get_scale()``):
    clipping scaled gradients with a scaled threshold is consistent."""
    call = clip.site.call
    if call is None:
        return False
    for arg in call.args[1:]:
        for name in names_in(arg.value):
            if "scale" in last_segment(name).lower():
                return True
        if any(method_name(node) == "get_scale" for node in calls_in(arg.value)):
            return True
    return False


class ScalerInsideGroup(Rule):
    """ACC303: GradScaler ``unscale_``/``step``/``update`` on a path that runs every microbatch.

    Only in loops that update once per group of A > 1. ``unscale_`` and ``update`` of a scaler
    built with ``enabled=False`` do nothing and are exempt; ``scaler.step`` still updates the
    optimizer and is flagged. A ``scaler.step``/``unscale_`` whose optimizer also updates every
    microbatch is left alone.
    """

    code = "ACC303"

    def check(self, model: FileModel) -> Iterator[Hit]:
        reported: set[int] = set()
        for group in accumulating_groups(model):
            for event in group.events:
                if group.cadence(event) is not Cadence.MICROBATCH or id(event.node) in reported:
                    continue
                if event.role.role is not Role.SCALER:
                    continue
                call = event.site.call
                scaler = dotted(call.func.value) if call is not None else None  # type: ignore[union-attr]
                scaler = scaler or "scaler"
                disabled = model.frameworks.scaler_enabled(event.role) is False
                if event.kind is EventKind.UNSCALE and not disabled:
                    message = (f"`{scaler}.unscale_` runs on every microbatch: the second call before "
                               f"`{scaler}.update()` raises RuntimeError, and a single early call leaves the "
                               "later contributions multiplied by the scale")
                elif event.kind is EventKind.SCALER_UPDATE and not disabled:
                    message = (f"`{scaler}.update()` runs on every microbatch: with no `{scaler}.step()` since the "
                               "last update it raises AssertionError, otherwise it changes the scale inside the "
                               "group and the contributions are summed at different scales")
                elif event.kind is EventKind.UPDATE and event.method == "scaler.step":
                    message = (f"`{scaler}.step(...)` runs on every microbatch: the optimizer updates inside the "
                               f"group (a second step before `{scaler}.update()` raises RuntimeError)")
                else:
                    continue
                reported.add(id(event.node))
                yield Hit(
                    event.node, message,
                    _scaler_site(scaler),
                )


class GradRescaleInsideGroup(Rule):
    """ACC307: the accumulated ``.grad`` tensors rescaled in place on a path that runs every microbatch.

    Flags ``p.grad.div_(n)``/``mul_``, ``p.grad /= n``, ``multiply_grads(c)``, ``scale_grads(model,
    c)`` and ``torch._foreach_mul_(grads, c)`` (also inside a same-module helper, reported at the
    helper's call) whose cadence is "every microbatch" in a loop that updates once per group of
    A > 1: microbatch k of the group is multiplied by the factors of microbatches k..A. Exempt
    (the same groups as ACC301): rescales under the update gate or after the micro-loop, loops
    that reset or update every microbatch, DeepSpeed; a rescale whose cadence the model cannot
    decide.
    """

    code = "ACC307"
    def check(self, model: FileModel) -> Iterator[Hit]:
        reported: set[int] = set()
        for group in accumulating_groups(model):
            for entry in gradient_rescales(model, group):  # the ledger's gradient side
                event, node = entry.source, entry.report or entry.node
                if id(node) in reported or entry.cadence is not Cadence.MICROBATCH or event is None:
                    continue
                reported.add(id(node))
                what = f"`{_callee(event)}`" if event.site.call is not None else "the in-place `.grad` rescale"
                if node is not event.node:
                    what = f"`{dotted(node.func) or 'the helper'}(...)` (through {what})"  # type: ignore[attr-defined]
                yield Hit(
                    node,
                    f"{what} rescales the accumulated gradients on every microbatch: the contribution of "
                    "microbatch k is multiplied again by the factor of every later microbatch, so early "
                    "microbatches shrink (or grow) geometrically and the update is not the group's gradient",
                )


class ScalerUpdateMissingOnSkip(Rule):
    """ACC310: ``scaler.update()`` only on the path that applies the update, after ``unscale_``.

    Flags a ``scaler.update()`` that runs after ``scaler.unscale_(opt)`` (in a loop) only when a
    condition on values computed after the unscale holds (the unscaled norm is finite: ``if not
    torch.isfinite(norm): continue``, ``if torch.isfinite(norm): scaler.step(opt); scaler.update()``),
    while no update of the same scaler runs on the other path. The skip is the exceptional path of
    semantic-core.md section 5 and the rule is about it: when it is taken, the next ``unscale_``
    raises. Silent when the condition is not such a data test (a run-level choice, the boundary
    test), when the scaler is disabled, and where the paths are undecided (a handler, a match case,
    an inner loop between the unscale and the update).
    """

    code = "ACC310"
    gate = RuleGate(markers=(b"unscale_",), facts=lambda facts: facts.calls(("unscale_",)) and facts.calls(("update",)))

    def check(self, model: FileModel) -> Iterator[Hit]:
        reported: set[int] = set()
        for scope in model.scopes:
            events = model.events[scope]
            for unscale in events:
                if (unscale.kind is not EventKind.UNSCALE or unscale.role.role is not Role.SCALER
                        or not any(f.kind is FrameKind.LOOP for f in unscale.site.frames)
                        or model.frameworks.scaler_enabled(unscale.role) is False):
                    continue
                scaler = _receiver_name(unscale)
                updates = [e for e in events if e.kind is EventKind.SCALER_UPDATE and e.order > unscale.order
                           and _receiver_name(e) == scaler and not unscale.site.excludes(e.site)]
                skip = _skip_before_update(scope, unscale, updates)
                if scaler is None or skip is None or id(updates[0].node) in reported:
                    continue
                reported.add(id(updates[0].node))
                test = code_of(skip.test) if skip.test is not None else "the condition"
                yield Hit(
                    updates[0].node,
                    f"`{scaler}.update()` does not run on every path after `{scaler}.unscale_(...)`: where "
                    f"`{test}` skips it (non-finite gradients) the scale is not lowered, and the next "
                    f"`{scaler}.unscale_` raises RuntimeError (\"unscale_() has already been called on this "
                    "optimizer since the last update()\")",
                    _scaler_site(scaler),
                )


#: calls that test a value for NaN or inf (torch, math, numpy: ``torch.isfinite``, ``math.isnan``, ``x.isinf()``)
_NON_FINITE_TESTS = frozenset({"isfinite", "isnan", "isinf"})


def _receiver_name(event: Event) -> str | None:
    """The scaler an event's call is made on, in the names of the code that calls it (``self.scaler``;
    None for a helper's own name)."""
    call = event.site.call
    if call is None or not isinstance(call.func, cst.Attribute):
        return None
    return scope_name(dotted(call.func.value), event.site)


def _skip_before_update(scope, unscale: Event, updates: list[Event]):
    """The frame of the data test that keeps every update in ``updates`` from the path that skips it
    (an ``if`` around them, or an ``if …: continue`` before them), or None: an update runs on every
    path after the unscale, both arms of the test update, or a path is undecided."""
    if not updates:
        return None
    own = {id(frame.node) for frame in unscale.site.frames}
    sides: dict[int, set[str]] = {}
    skip = None
    for update in updates:
        between = [f for f in update.site.frames if id(f.node) not in own]
        if any(f.kind in (FrameKind.HANDLER, FrameKind.MATCH, FrameKind.LOOP) for f in between):
            return None
        tests = [f for f in between if f.kind in (FrameKind.IF, FrameKind.GUARD)]
        if not tests:
            return None  # this update runs whenever the unscale did
        first = tests[0]
        sides.setdefault(id(first.node), set()).add("after" if first.kind is FrameKind.GUARD else first.branch)
        if not _data_test(scope, first, unscale, update):
            return None
        skip = skip or first
    if any(len(found) > 1 for found in sides.values()):
        return None  # `if finite: ...; update() else: update()`: the scaler updates on both paths
    return skip


def _data_test(scope, frame, unscale: Event, update: Event) -> bool:
    """Whether a frame's condition tests per-step data: it calls a NaN/inf test, or reads a name
    last assigned by a call after the unscale (the norm of the unscaled gradients), so the path it
    skips is the exceptional one, taken on some groups only."""
    test = frame.test
    if test is None:
        return False
    if any(last_segment(dotted(call.func) or "") in _NON_FINITE_TESTS for call in calls_in(test)):
        return True
    return any(_computed_after(scope, name, update.order, unscale, update.site.inline) for name in names_in(test))


def _computed_after(scope, name: str, before: int, unscale: Event, inline, depth: int = 0) -> bool:
    """Whether ``name`` (read at ``before``) holds a value computed by a call after the unscale, or
    from such a value (``gn = clip_grad_norm_(...)``, then ``exploded = gn > 1e4``); a boundary flag
    computed there from the counter (``last = (i + 1) % A == 0``) is no data."""
    assigned = reaching_assignment(scope, name, before, inline=inline)
    if assigned is None or assigned.order <= unscale.order or depth > 3:
        return False
    return any(True for _ in calls_in(assigned.node)) or any(
        _computed_after(scope, read, assigned.order, unscale, inline, depth + 1)
        for read in names_in(assigned.node) if read != name)
