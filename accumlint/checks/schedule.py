"""The LR scheduler follows its unit: once per optimizer update (P8)."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from accumlint.checks.base import Hit, Rule
from accumlint.findings import Severity
from accumlint.model import Cadence, EventKind, FileModel, LoopStyle
from accumlint.model.names import children, dotted


class SchedulerPerMicrobatch(Rule):
    """ACC304: a scheduler stepped every microbatch while the optimizer updates once per group."""

    code = "ACC304"
    name = "scheduler-per-microbatch"
    severity = Severity.ERROR
    principle = "P8"
    summary = "LR scheduler stepped every microbatch: the schedule runs A times too fast"

    def check(self, model: FileModel) -> Iterator[Hit]:
        for group in model.loops:
            if group.accumulates is not True or group.style is LoopStyle.DEEPSPEED:
                continue
            if not any(group.cadence(u) in (Cadence.UPDATE, Cadence.FRAMEWORK_GATED)
                       for u in group.of_kind(EventKind.UPDATE)):
                continue
            for step in group.of_kind(EventKind.SCHEDULER_STEP):
                if group.cadence(step) is not Cadence.MICROBATCH or step.role.owner is not None:
                    continue
                if _horizon_in_microbatches(model, step.role.origin):
                    continue  # sized `steps * A` on purpose: consistent with per-microbatch stepping
                name = dotted(step.target) or "the scheduler"
                unprepared = " (it was not passed to `accelerator.prepare`, so Accelerate does not gate it)" if (
                    group.style is LoopStyle.ACCELERATE and step.role.prepared is False) else ""
                yield Hit(
                    step.node,
                    f"`{name}` advances on every microbatch while the optimizer updates once per group of A"
                    f"{unprepared}: warmup and decay run A times faster than planned",
                    "step the scheduler once per optimizer update, right after it "
                    "(under the same boundary test or `if accelerator.sync_gradients:`)",
                )


def _horizon_in_microbatches(model: FileModel, constructor: cst.Call | None) -> bool:
    """Whether a scheduler's constructor sizes its horizon or warmup as a product with A
    (``num_training_steps=max_train_steps * gradient_accumulation_steps``): the schedule is
    then written in microbatches and per-microbatch stepping matches it."""
    if constructor is None:
        return False
    for arg in constructor.args:
        stack: list[cst.CSTNode] = [arg.value]
        while stack:
            node = stack.pop()
            if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply):
                if model.is_accumulation_name(node.left) or model.is_accumulation_name(node.right):
                    return True
            if isinstance(node, (cst.BinaryOperation, cst.UnaryOperation)):
                stack.extend(children(node))
    return False


class SchedulerHorizonUnitMismatch(Rule):
    """ACC305: scheduler horizon counted in microbatches while stepped per update (or the reverse)"""

    code = "ACC305"
    name = "scheduler-horizon-unit-mismatch"
    severity = Severity.WARNING
    principle = "P8"
    summary = "scheduler horizon counted in microbatches while stepped per update (or the reverse)"

    def check(self, model: FileModel) -> Iterator[Hit]:
        return iter(())  # SCAFFOLD: to be written


class SchedulerSteppedTwice(Rule):
    """ACC306: a scheduler the framework already steps is stepped again by hand"""

    code = "ACC306"
    name = "scheduler-stepped-twice"
    severity = Severity.ERROR
    principle = "P8"
    summary = "a scheduler the framework already steps is stepped again by hand"

    def check(self, model: FileModel) -> Iterator[Hit]:
        return iter(())  # SCAFFOLD: to be written


class AmbiguousStepUnit(Rule):
    """ACC902: a counter named step counts microbatches, not optimizer updates"""

    code = "ACC902"
    name = "ambiguous-step-unit"
    severity = Severity.INFO
    principle = "-"
    summary = "a counter named step counts microbatches, not optimizer updates"
    default_enabled = False

    def check(self, model: FileModel) -> Iterator[Hit]:
        return iter(())  # SCAFFOLD: to be written
