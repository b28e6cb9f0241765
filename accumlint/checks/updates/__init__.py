"""The optimizer update: gated once per group, on the right microbatch (P1).

The family's own analysis lives beside the rules: :mod:`.update_counters` (gates on a counter of
optimizer updates on a per-microbatch path).
"""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from accumlint import frameworks as fw
from accumlint.checks.base import Hit, Rule
from accumlint.checks.gate import LOOP, RuleGate, runs_loop
from accumlint.checks.gradient_ops import accumulating_groups
from accumlint.checks.group_traces import trace_hits, with_traces
from accumlint.checks.updates.update_counters import plain_update_counter_gates, update_counter_gates
from accumlint.model import Cadence, EventKind, FileModel, LoopStyle, Role
from accumlint.model.boundary import first_value, index_offset
from accumlint.model.events import GRADIENT_OP_NAMES
from accumlint.model.grad_ops import op_cadence, reads_weights, report_node
from accumlint.model.names import children, code_of, dotted, int_value, walk
from accumlint.model.owned_loops import lightning_backward_hooks
from accumlint.model.scopes import FrameKind

#: the last name of the HF Trainer's update counter (``self.state.global_step``)
_UPDATE_COUNTER = fw.transformers.UPDATE_COUNTER.rsplit(".", 1)[-1]


class StepEveryMicrobatch(Rule):
    """ACC004: the loss is scaled for accumulation but the optimizer updates every microbatch."""

    code = "ACC004"

    def check(self, model: FileModel) -> Iterator[Hit]:
        for group in model.loops:
            if group.style is LoopStyle.GATED:
                for update in _ungated_beside_gate(model, group):
                    yield Hit(
                        update.node,
                        "this optimizer updates on every microbatch while the loop gates its other updates "
                        "once per group and divides the loss by A: on this path the parameters change inside "
                        "what should be one group, and the division only shrinks the learning rate",
                        "gate this update (and its reset) by the same boundary test as the others",
                    )
                continue
            if group.style is not LoopStyle.UNGATED or not _accumulation_evidence(model, group):
                continue
            for update in group.of_kind(EventKind.UPDATE):
                if update.role.owner is not None or not (update.role.role in (Role.OPTIMIZER, Role.SCALER)
                                                         or _wrapper_accumulates(model, update)):
                    continue
                if model.decides_inside(update):
                    continue  # a project wrapper's `step()` that gates its own updates
                if group.cadence(update) is Cadence.MICROBATCH and not model.gated_in_the_runs(group, update):
                    yield Hit(
                        update.node,
                        "the optimizer update runs on every microbatch although the loop is written for "
                        "accumulation: parameters change inside what should be one group, and a loss divided "
                        "by A only shrinks the learning rate",
                    )


def _ungated_beside_gate(model: FileModel, group) -> list:
    """In a gated loop, the optimizer updates that run every microbatch on a path where their
    optimizer is never gated (another optimizer of the loop, or the other candidate of
    ``step_fn = gated if flag else plain``), when every backward on that path divides its loss
    by A or by the gate's divisor (a GAN's discriminator with an undivided loss stays silent)."""
    gate = group.gate.test if group.gate is not None else None
    divisor = dotted(gate.divisor) if gate is not None and gate.kind == "modulo" else None

    def is_a(node: cst.BaseExpression) -> bool:
        return model.is_accumulation_name(node) or (divisor is not None and dotted(node) == divisor)

    updates = group.of_kind(EventKind.UPDATE)
    backwards = [b for b in group.of_kind(EventKind.BACKWARD) if group.cadence(b) is Cadence.MICROBATCH]
    found = []
    for update in updates:
        if (group.cadence(update) is not Cadence.MICROBATCH or update.role.role is not Role.OPTIMIZER
                or update.role.owner is not None or model.decides_inside(update)):
            continue
        target = dotted(update.target)
        if target is None or any(dotted(other.target) == target and group.cadence(other) in (
                Cadence.UPDATE, Cadence.FRAMEWORK_GATED) and not update.site.excludes(other.site)
                for other in updates):
            continue
        on_path = [b for b in backwards if not update.site.excludes(b.site)]
        if on_path and all(model.divisions_by(b, is_a) for b in on_path):
            found.append(update)
    return found


def _wrapper_accumulates(model: FileModel, update) -> bool:
    """An mmengine wrapper's ``step()`` (which always steps: only ``update_params`` counts the
    microbatches) on a wrapper configured with ``accumulative_counts`` other than 1."""
    if update.role.role is not Role.OPTIM_WRAPPER:
        return False
    configured = model.frameworks.mmengine_accumulation(update.role)
    return configured is not None and configured is not False and int_value(configured) != 1


def _accumulation_evidence(model: FileModel, group) -> bool:
    """The loop divides its loss by an A-like value, tests a boundary on one, or steps an
    mmengine wrapper configured to accumulate."""
    if any(_wrapper_accumulates(model, update) for update in group.of_kind(EventKind.UPDATE)):
        return True
    for backward in group.of_kind(EventKind.BACKWARD):
        if backward.role.role is Role.ACCELERATOR and (
                group.accumulate_contexts or model.frameworks.accelerate_accumulation(backward.role) is not False):
            return False  # Accelerate's own contract: ACC501 speaks for it
        # an Accelerator built without gradient_accumulation_steps, no accumulate(): its backward
        # divides nothing and its prepared optimizer steps on every call (a plain loop)
        if model.divisions_by(backward, model.is_accumulation_name):
            return True
    for site in group.loop_sites:
        for frame in site.frames_inside(group.loop):
            test = frame.test if frame.kind in (FrameKind.IF, FrameKind.GUARD) else None
            if test is not None and _modulo_by_accumulation(model, test) and not _resets_clear_gradients(
                    model, group, frame.node) and not _periodic_backward(group, frame.node):
                return True
    return False


def _periodic_backward(group, statement: cst.CSTNode) -> bool:
    """Whether ``statement`` gates a backward of its own and no update: a periodic extra pass (a
    natural-gradient optimizer's curvature probe every n-th update, its reset before it), not the
    boundary of a group."""
    gated = [e.kind for e in group.events if any(f.node is statement for f in e.site.frames)]
    return EventKind.BACKWARD in gated and EventKind.UPDATE not in gated


def _resets_clear_gradients(model: FileModel, group, statement: cst.CSTNode) -> bool:
    """Whether the gradient events under ``statement`` are resets only, and the runs decide the
    loop with no value deciding its updates (or nothing in its code decides them): a periodic probe
    followed by ``net.zero_grad()`` after the update and its reset (the gradients are already
    clear), no group of A."""
    gated = [e for e in group.events if e.kind in (EventKind.UPDATE, EventKind.RESET, EventKind.CLIP)
             and any(f.node is statement for f in e.site.frames)]
    return bool(gated) and all(e.kind is EventKind.RESET for e in gated) and any(
        simulation.covers(group.loop) and (simulation.decided and not simulation.binds_a or simulation.ungated)
        for simulation in model.simulations)


def _boundaries_hold(model: FileModel, statement: cst.CSTNode) -> bool:
    """Whether the runs of a decided entry with A bound execute ``statement`` and show each event it
    gates at a group's boundary: with A > 1, none while a group holds some of its backwards but not
    all of them (after the update, or before the group's first backward, or an update after the A-th)."""
    inside = {id(node) for node in walk(statement)}
    shown = False
    for simulation in model.simulations:
        if not simulation.decided or not simulation.binds_a or not simulation.covers(statement):
            continue
        for trace in simulation.traces:
            a, pending = trace.configuration.accumulation, 0
            for event in trace.events if a > 1 else ():
                if event.kind is EventKind.BACKWARD:
                    pending += 1
                if event.node is not None and id(event.node) in inside:
                    shown = True
                    if pending % a:
                        return False
                if event.kind is EventKind.UPDATE:
                    pending = 0
    return shown


def _modulo_by_accumulation(model: FileModel, test: cst.BaseExpression) -> bool:
    stack: list[cst.CSTNode] = [test]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Modulo):
            if model.is_accumulation_name(node.right):
                return True
        stack.extend(children(node))
    return False


class IrregularUpdateBoundary(Rule):
    """ACC006: a boundary test that does not fire on the last microbatch of every group of A."""

    code = "ACC006"
    #: a loop, or the definition of an HF ``training_step`` override (a per-microbatch hook that
    #: may gate on the update counter without calling backward itself) in a module that imports
    #: transformers or trl, names a Trainer class and reads the update counter
    #: (:func:`~accumlint.checks.updates.update_counters.update_counter_gates`)
    gate = RuleGate(markers=tuple(sorted({*LOOP.markers, fw.transformers.TRAINING_STEP.encode()})),
                facts=lambda facts: runs_loop(facts) or (
                    facts.defines((fw.transformers.TRAINING_STEP,))
                    and facts.mentions(fw.transformers.TRAINER_CLASS_NAMES)
                    and facts.mentions(("transformers", "trl")) and facts.mentions((_UPDATE_COUNTER,))))

    @with_traces
    def check(self, model: FileModel) -> Iterator[Hit]:
        for modulo in update_counter_gates(model):
            yield Hit(
                modulo,
                "`self.state.global_step` counts optimizer updates and is constant inside a group, so this "
                "test is true on all A microbatches of every A-th group instead of on the last microbatch of each",
                "in `training_step` test a microbatch count of your own, or move once-per-update code to a "
                "callback's `on_optimizer_step` / `on_step_end`",
            )
        for modulo, counter, statement in plain_update_counter_gates(model):
            if _boundaries_hold(model, statement):
                continue  # (the counter moves where the reading took it not to: `if accelerator.sync_gradients`
                # outside `accumulate()` is true on every microbatch)
            yield Hit(
                modulo,
                f"`{counter}` counts optimizer updates (it advances only under the update gate) and is constant "
                "inside a group, but this test runs on every microbatch: it is true on all A microbatches of "
                "every A-th group instead of on the last microbatch of each",
                "test the microbatch index (`(i + 1) % A == 0`), or move the code under the update gate and "
                f"test `{counter}` there",
            )
        for group in model.loops:
            gate = group.gate
            if group.style is not LoopStyle.GATED or gate is None or gate.test is None or group.accumulates is False:
                continue  # (no group: the simulated runs show a training ratio, not a boundary)
            test = gate.test
            if test.kind != "modulo" or test.extra or test.report is None or index_offset(test.dividend) is None:
                continue  # `(i // 2) % 2` alternates groups: not a count of microbatches
            updates = [u for u in group.of_kind(EventKind.UPDATE) if group.cadence(u) is Cadence.UPDATE]
            backwards = [b for b in group.of_kind(EventKind.BACKWARD) if group.in_loop(b)]
            if not updates or not backwards or min(u.order for u in updates) < min(b.order for b in backwards):
                continue  # update at the top of the loop body: it applies the previous microbatches
            fires_on_residue = test.polarity == (gate.update_branch == "body")
            divisor = dotted(test.divisor)
            counter = index_offset(test.dividend)[0]  # type: ignore[index]
            if divisor is not None and group.varies(divisor) and not group.redrawn_at_update(divisor, counter):
                yield Hit(test.report, f"the accumulation steps `{divisor}` are reassigned inside the loop, so "
                          "group sizes change from one update to the next",
                          "compute A once, before the loop")
                continue
            if not fires_on_residue:
                yield Hit(
                    test.report,
                    "the update runs when the remainder is non-zero, i.e. on A−1 of every A microbatches "
                    "(and never when A = 1): accumulation is inverted",
                )
                continue
            test_order = group.scope.statement_orders.get(id(gate.frame_node), updates[0].order)
            first = first_value(test.dividend, group.loop, group.scope.sites, test_order)
            wanted = 1 if test.residue == 0 else 0
            if first is None or first == wanted:
                continue
            if first == wanted - 1:
                message = ("the boundary test fires on the first microbatch, so the first group holds a single "
                           "microbatch and every later group is shifted")
                if not test.tail:
                    message += "; the tail of the epoch is left in `.grad`"
            else:
                message = (f"the boundary test is off by {first - wanted}: the first group holds a different number "
                           "of microbatches than A, later groups are shifted")
            yield Hit(test.report, message,
                      "alternatively, increment the counter before testing it")


class UpdateHookPerMicrobatch(Rule):
    """ACC007: an operation defined once per optimizer update run on a path that runs every microbatch.

    Flags, in a loop that updates once per group of A > 1 (the groups ACC301 reads), a weight
    EMA or model average (``ema.update(model)``, ``swa_model.update_parameters(model)``,
    ``update_ema(...)``, a hand-written ``ema_p.mul_(d).add_(p, alpha=1 - d)`` over parameters)
    and AdaLoRA's ``update_and_allocate(step)`` whose cadence is "every microbatch" (also inside
    a same-module helper, reported at the helper's call), and such an average in a LightningModule's
    per-batch hook (``on_train_batch_end``) when a Trainer of the module accumulates. Exempt: the
    call under the update gate,
    after the micro-loop, under ``if accelerator.sync_gradients:``; an EMA-named object that
    smooths a metric (``ema_loss.update(loss)``); a cadence the model cannot decide.
    """

    code = "ACC007"
    #: a hook call (`update(` and `step(` are everywhere: a backward marker too) in a group, or in a
    #: LightningModule's per-batch hook
    gate = RuleGate(
        markers=tuple(sorted(name.encode() for name in GRADIENT_OP_NAMES - {"div_", "divide_", "multiply_"})),
        backward=True, facts=lambda facts: (runs_loop(facts) or facts.defines(fw.lightning.BATCH_HOOKS)
                                            and facts.mentions(fw.lightning.MODULE_BASES))
        and facts.calls(GRADIENT_OP_NAMES))

    def check(self, model: FileModel) -> Iterator[Hit]:
        reported: set[int] = set()
        for group in accumulating_groups(model):
            averaged: set[str] = set()  # the lists a foreach average was reported on (its kernels, one finding)
            for event in group.of_kind(EventKind.UPDATE_HOOK):
                node = report_node(group, event)
                foreach = event.method.startswith("_foreach_") and dotted(event.target)
                # (one finding per statement: `ema_p.mul_(d).add_(p, ...)` is one average, two calls)
                if id(node) in reported or id(event.site.statement) in reported or foreach in averaged:
                    continue
                if not reads_weights(model, group, event):
                    continue  # an average of data statistics (or a smoothed number): a new value each microbatch
                if op_cadence(model, group, event) is not Cadence.MICROBATCH:
                    continue
                reported.update((id(node), id(event.site.statement)))
                if foreach:
                    averaged.add(foreach)
                call = node if isinstance(node, cst.Call) else event.site.call
                what = f"`{_callee_text(call) if call is not None else event.method}(...)`"
                if event.method == fw.peft.UPDATE_HOOK:
                    effect = ("the rank allocator advances its schedule A times per update and scores importance "
                              "on partial sums of the group's gradient")
                elif event.method == fw.pytorch.SWA_UPDATE_HOOK:
                    effect = ("the average takes the same weights A times per optimizer update: an EMA `avg_fn` "
                              "decays A times faster than its decay says, and `n_averaged` counts microbatches")
                else:
                    effect = ("the average moves A times per optimizer update over unchanged weights: it decays "
                              "A times faster than its decay says and its warmup counts microbatches")
                yield Hit(
                    node,
                    f"{what} is meant to run once per optimizer update but runs on every microbatch: {effect}",
                )
        yield from _lightning_batch_hooks(model, reported)


def _callee_text(call: cst.Call) -> str:
    """What a message calls a call: its dotted name, else its text (``e.mul_(0.999).add_``)."""
    return dotted(call.func) or code_of(call.func)


def _lightning_batch_hooks(model: FileModel, reported: set[int]) -> Iterator[Hit]:
    """ACC007 in the per-batch hooks of a LightningModule under automatic optimization
    (:data:`accumlint.frameworks.lightning.BATCH_HOOKS`: ``on_train_batch_end`` runs once per
    microbatch) when a Trainer of the module may accumulate (``accumulate_grad_batches`` > 1)."""
    for scope in lightning_backward_hooks(model, fw.lightning.BATCH_HOOKS):
        for event in model.events[scope]:
            call = event.site.call
            if event.kind is not EventKind.UPDATE_HOOK or event.method in ("mul_", "lerp_") or call is None \
                    or id(call) in reported or not reads_weights(model, None, event):  # type: ignore[arg-type]
                continue  # (a hand-written decay over parameters is read in loops only)
            reported.add(id(call))
            # (a blend in a helper the hook calls, `self.ema(self.net)`: reported at that call)
            outer = next((f.node for f in event.site.frames if f.kind is FrameKind.HELPER), None)
            yield Hit(
                outer if isinstance(outer, cst.Call) else call,
                f"`{_callee_text(call)}(...)` in `{scope.name}` runs on every batch, so on every microbatch under "
                "`accumulate_grad_batches` > 1: the average moves A times per optimizer update over unchanged "
                "weights and decays A times faster than its decay says",
                "move it to `on_before_optimizer_step` or `optimizer_step` (once per update), or divide its "
                "decay's exponent by A",
            )


class GroupRestartsDataIterator(Rule):
    """ACC009: each group restarts the data iterator: every update sees the loader's first microbatches again.

    Read off the simulated runs (:mod:`accumlint.checks.group_traces`): in every run with whole
    groups, each group's backwards learn from items of a new pass over the same loader that
    starts at its first item, while the pass before was left early (``islice(loader, A)``,
    ``next(iter(loader))``, a ``for`` over the loader left after A).
    """

    code = "ACC009"

    def check(self, model: FileModel) -> Iterator[Hit]:
        yield from trace_hits(model, self.code)


class UpdateKeyedActionRepeats(Rule):
    """ACC010: a once-per-update action tested on an update counter on the microbatch path: it runs A times.

    Read off the simulated runs (:mod:`accumlint.checks.group_traces`): in every run with whole
    groups, an action of :mod:`accumlint.model.actions` runs on consecutive microbatches of one
    group and not at all in another group.
    """

    code = "ACC010"

    def check(self, model: FileModel) -> Iterator[Hit]:
        yield from trace_hits(model, self.code)
