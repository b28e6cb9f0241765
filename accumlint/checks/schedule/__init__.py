"""The LR scheduler follows its unit: once per optimizer update (P8).

The family's own analyses live beside the rules: :mod:`.schedules` (what a scheduler's horizon is
counted in, which counters advance per microbatch) and :mod:`.owned_schedulers` (the schedulers a
framework steps by itself).
"""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from accumlint import frameworks as fw
from accumlint.checks.base import Hit, Rule
from accumlint.checks.gate import LOOP_MARKERS, RuleGate, runs_loop
from accumlint.checks.schedule.owned_schedulers import (
    automatic_lightning_schedulers,
    lightning_configured_schedulers,
    owned_schedulers,
    stepped_by_engine,
)
from accumlint.checks.schedule.schedules import (
    STEP_COUNTER_NAME,
    HorizonUnit,
    counted_loader,
    factory_sized_in_microbatches,
    horizon_multiplied_by_accumulation,
    iterated_loader,
    microbatch_counters,
    microbatch_lr_writes,
    schedule_horizons,
    step_axis_uses,
    update_counted_horizons,
    update_counter_lr_writes,
)
from accumlint.checks.shared.counts import counter_units
from accumlint.model import Cadence, EventKind, FileModel, LoopStyle, Role
from accumlint.model.boundary import index_offset
from accumlint.model.conventions import ITERATION_WRAPPERS
from accumlint.model.events import SCHEDULER_STEP_METHODS
from accumlint.model.names import code_of, dotted, keyword, last_segment, method_name, names_in, positional, walk
from accumlint.model.owned_loops import lightning_accumulates
from accumlint.model.roles import constructor_role


class SchedulerPerMicrobatch(Rule):
    """ACC304: a scheduler stepped every microbatch while the optimizer updates once per group."""

    code = "ACC304"

    def check(self, model: FileModel) -> Iterator[Hit]:
        for group in model.loops:
            if group.accumulates is not True or group.style is LoopStyle.DEEPSPEED:
                continue
            if not any(group.cadence(u) in (Cadence.UPDATE, Cadence.FRAMEWORK_GATED)
                       for u in group.of_kind(EventKind.UPDATE)):
                continue
            counters = microbatch_counters(group)
            for write in microbatch_lr_writes(group):
                yield Hit(
                    write.computed,
                    f"the learning rate is written on every microbatch from the microbatch counter `{write.position}` "
                    f"while the schedule's `{dotted(write.horizon)}` counts optimizer updates: warmup and decay run A "
                    "times faster than planned",
                    "compute the learning rate from the number of optimizer updates (or write it once per "
                    "update, under the boundary test)",
                )
            for step in group.of_kind(EventKind.SCHEDULER_STEP):
                if group.cadence(step) is not Cadence.MICROBATCH or step.role.owner is not None:
                    continue
                if _beside_an_update_every_microbatch(group, step):
                    continue  # on its path the optimizer updates every microbatch too (a mode without groups)
                if _told_its_position(step, counters):
                    continue  # `sched.step(cur_epoch=e, cur_step=i)`: a setter of the absolute position
                if horizon_multiplied_by_accumulation(step.role.origin, model.is_accumulation_name):
                    continue  # sized `steps * A` on purpose: consistent with per-microbatch stepping
                if _sized_by_the_loops_count(model, group, step.role.origin):
                    continue  # its warmup a fraction of the loop's own count of microbatches
                if step.role.origin is None and (
                        _stops_on_microbatch_budget(group, counters)
                        or _module_schedules_in_microbatches(model, group)
                        or factory_sized_in_microbatches(model, dotted(step.target) or "", step.site,
                                                         counted_loader(group, model))):
                    continue  # the schedule's sizing is not in view, and what is in view counts microbatches
                name = dotted(step.target) or "the scheduler"
                unprepared = " (it was not passed to `accelerator.prepare`, so Accelerate does not gate it)" if (
                    group.style is LoopStyle.ACCELERATE and step.role.prepared is False) else ""
                yield Hit(
                    step.node,
                    f"`{name}` advances on every microbatch while the optimizer updates once per group of A"
                    f"{unprepared}: warmup and decay run A times faster than planned",
                )




def _beside_an_update_every_microbatch(group, step) -> bool:
    """Whether ``step`` runs only on paths where the optimizer updates on every microbatch: an update of
    that cadence shares its path and every gated update is on another (``if not cfg.accumulate:
    optimizer.step(); scheduler.step()`` beside the gated arm): once per update there."""
    updates = group.of_kind(EventKind.UPDATE)
    return any(group.cadence(u) is Cadence.MICROBATCH and not step.site.excludes(u.site) for u in updates) \
        and all(step.site.excludes(u.site) for u in updates if group.cadence(u) is not Cadence.MICROBATCH)


def _sized_by_the_loops_count(model: FileModel, group, constructor: cst.Call | None) -> bool:
    """Whether the scheduler built by ``constructor`` is sized from the count of microbatches the
    loop runs itself (``for rnd in range(cfg.rounds)``, a warmup of ``frac * cfg.rounds``), in its
    arguments or in what a module function handed as one reads (a ``LambdaLR``'s ``lr_lambda``), one
    module-level assignment deep, and never divided by A: its schedule is counted in microbatches,
    as it is stepped (the spec's exemption for a horizon counted in microbatches)."""
    loop = group.loop
    iterated = loop.iter if isinstance(loop, cst.For) else None
    while isinstance(iterated, cst.Call) and last_segment(dotted(iterated.func) or "") in ITERATION_WRAPPERS \
            and iterated.args:
        iterated = iterated.args[0].value  # `tqdm(range(n))`, `enumerate(range(n))`
    if constructor is None or not isinstance(iterated, cst.Call) or dotted(iterated.func) != "range":
        return False
    bounds = [arg.value for arg in iterated.args if arg.keyword is None and not arg.star]
    budget = dotted(bounds[1] if len(bounds) > 1 else bounds[0]) if bounds else None
    if budget is None:
        return False
    functions = model.functions
    sizing: list[cst.CSTNode] = []
    for arg in constructor.args:
        handed = functions.functions.get(arg.value.value) if isinstance(arg.value, cst.Name) else None
        sizing.append(handed.body if handed is not None else arg.value)
    read = {n.value for node in sizing for n in walk(node) if isinstance(n, cst.Name)}
    scope = group.scope.node if isinstance(group.scope.node, cst.FunctionDef) else None
    for name in sorted(read):
        module_value = functions.module_value(name)
        sizing.extend([module_value] if module_value is not None else functions.values_assigned(scope, name))
    nodes = [n for node in sizing for n in walk(node)]
    divided = any(isinstance(n, cst.BinaryOperation) and isinstance(n.operator, (cst.Divide, cst.FloorDivide))
                  and model.is_accumulation_name(n.right) for n in nodes)
    return not divided and any(isinstance(n, (cst.Name, cst.Attribute)) and dotted(n) == budget for n in nodes)


def _stops_on_microbatch_budget(group, counters: dict) -> bool:
    """Whether the loop ends the run when a microbatch counter reaches a budget
    (``if train_step == args.max_step: break``): the program counts its run in microbatches, so
    a scheduler built elsewhere (LoRA's NLG example sizes it with the same ``max_step``) may be
    sized in them too, and stepping it every microbatch is then on plan."""
    stack: list[cst.CSTNode] = [group.loop.body]
    while stack:
        node = stack.pop()
        if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda, cst.For, cst.While)):
            continue
        if isinstance(node, cst.If) and _is_budget_test(node.test, counters) and any(
                isinstance(small, (cst.Break, cst.Return)) for line in node.body.body
                if isinstance(line, cst.SimpleStatementLine) for small in line.body):
            return True
        stack.extend(node.children)
    return False


def _module_schedules_in_microbatches(model: FileModel, group) -> bool:
    """Whether the module builds schedulers and sizes every one of them in microbatches of the
    loader the loop iterates (``max_step = epochs * len(loader)`` in a ``build()`` that returns
    the scheduler the loop is handed): the one stepped here, built out of view, may be one of them."""
    loader = iterated_loader(group, model)
    if loader is None:
        return False
    units = []
    for scope in model.scopes:
        for site in scope.sites:
            if site.call is None or site.in_helper:
                continue
            if constructor_role(model.roles.qualify_call(site.call), True) is not Role.SCHEDULER:
                continue
            horizons = schedule_horizons(model, site.call, loader)
            if not horizons:
                return False
            units.extend(horizon.unit for horizon in horizons)
    return bool(units) and all(unit is HorizonUnit.MICROBATCHES for unit in units)


def _is_budget_test(test: cst.BaseExpression, counters: dict) -> bool:
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return False
    target = test.comparisons[0]
    if not isinstance(target.operator, (cst.Equal, cst.GreaterThanEqual, cst.GreaterThan)):
        return False
    budget = dotted(target.comparator)
    return dotted(test.left) in counters and budget is not None and budget not in counters


def _told_its_position(step, counters: dict) -> bool:
    """Whether a scheduler step is handed the loop's microbatch position (``sched.step(cur_step=i)``,
    litgpt/LAVIS style): the learning rate is then a function of that position, not of the
    number of calls, so calling it every microbatch does not run the schedule faster (whether
    the position's unit matches the schedule's is not visible here)."""
    call = step.site.call
    if call is None:
        return False
    if method_name(call) == fw.timm.SCHEDULER_STEP_METHOD and (
            positional(call, 0) is not None or keyword(call, fw.timm.SCHEDULER_POSITION_PARAMETER) is not None):
        return True  # timm's `step_update(num_updates)` sets the rate from the position it is given
    return any((split := index_offset(arg.value)) is not None and split[0] in counters for arg in call.args)


class SchedulerHorizonUnitMismatch(Rule):
    """ACC305: a scheduler stepped once per optimizer update whose horizon or warmup counts
    microbatches (``len(loader) * epochs`` without dividing by A) or is multiplied by A.

    Only horizons whose arithmetic reaches ``len()`` of the loader the accumulating loop
    iterates (or an explicit ``* A``) are judged; anything else stays silent."""

    code = "ACC305"
    #: a loop, or a LightningModule's ``configure_optimizers`` (Lightning steps what it returns)
    gate = RuleGate(markers=(*LOOP_MARKERS, fw.lightning.CONFIGURE_OPTIMIZERS.encode()),
                    facts=lambda facts: runs_loop(facts) or facts.defines((fw.lightning.CONFIGURE_OPTIMIZERS,)))

    def check(self, model: FileModel) -> Iterator[Hit]:
        reported: set[int] = set()
        for group in model.loops:
            if group.accumulates is not True or group.style is LoopStyle.DEEPSPEED:
                continue
            steps_by_scheduler: dict[int, list] = {}
            for step in group.of_kind(EventKind.SCHEDULER_STEP):
                if step.role.origin is not None and step.role.owner is None:
                    steps_by_scheduler.setdefault(id(step.role.origin), []).append(step)
            for steps in steps_by_scheduler.values():
                cadences = {group.cadence(step) for step in steps}
                if not cadences <= {Cadence.UPDATE, Cadence.FRAMEWORK_GATED}:
                    continue  # stepped per microbatch (ACC304) or undecided
                name = dotted(steps[0].target) or "the scheduler"
                gated = Cadence.FRAMEWORK_GATED in cadences
                for horizon in schedule_horizons(model, steps[0].role.origin, iterated_loader(group, model)):
                    if id(horizon.node) in reported or horizon.unit is HorizonUnit.UPDATES:
                        continue
                    reported.add(id(horizon.node))
                    yield self._hit(horizon.parameter, horizon.node, horizon.unit, name, gated)
            updates = {counter for counter, unit in counter_units(model).items() if unit == "update"}
            for write in update_counter_lr_writes(model, group, updates) if updates else ():
                yield Hit(
                    write.report,
                    f"the learning rate is computed from `{write.counter}`, a count of optimizer updates, over "
                    f"`{write.horizon}`, a count of microbatches: warmup lasts A times longer than planned",
                    f"count `{write.horizon}` in optimizer updates (divide it by A), or compare it with a "
                    "counter of microbatches",
                )
        yield from self._lightning(model, reported)

    def _lightning(self, model: FileModel, reported: set[int]) -> Iterator[Hit]:
        """The schedulers a LightningModule under automatic optimization returns with ``"interval":
        "step"``: Lightning steps them once per optimizer update, so a horizon in microbatches (the
        Trainer's ``num_training_batches``, when a Trainer in view may set A > 1) or an update count
        divided by A again (``trainer.max_steps // trainer.accumulate_grad_batches``) is off by A."""
        for scheduler, name in automatic_lightning_schedulers(model, fw.lightning.SCHEDULER_UPDATE_INTERVAL):
            for horizon in schedule_horizons(model, scheduler.constructor, None):  # type: ignore[arg-type]
                if id(horizon.node) in reported or horizon.unit is HorizonUnit.UPDATES or (
                        horizon.unit is not HorizonUnit.UPDATES_OVER_A and not lightning_accumulates(model)):
                    continue
                reported.add(id(horizon.node))
                yield self._hit(horizon.parameter, horizon.node, horizon.unit, name, False, horizon.evidence)

    @staticmethod
    def _hit(parameter: str, node: cst.CSTNode, unit: HorizonUnit, name: str, gated: bool,
             evidence: cst.CSTNode | None = None) -> Hit:
        if unit is HorizonUnit.UPDATES_OVER_A:
            counted = f"`{code_of(evidence)}`" if evidence is not None else "its count"
            return Hit(
                node,
                f"`{parameter}` of `{name}` divides {counted}, already a count of optimizer updates, by the "
                "accumulation steps A: the scheduler is stepped once per optimizer update, so the schedule ends "
                "after 1/A of the run, with warmup and decay A-fold too short",
                f"drop the division by A: {counted} already counts optimizer updates",
            )
        if unit is HorizonUnit.MICROBATCHES:
            fold = "A-fold (A / num_processes-fold for a prepared Accelerate scheduler)" if gated else "A-fold"
            return Hit(
                node,
                f"`{parameter}` of `{name}` counts microbatches (it is computed from the loader's length) but the "
                f"scheduler is stepped once per optimizer update: the run ends after 1/A of the schedule, "
                f"with warmup and decay stretched {fold}",
                "times `accelerator.num_processes` for a prepared scheduler" if gated else "",
            )
        return Hit(
            node,
            f"`{parameter}` of `{name}` is multiplied by the accumulation steps A but the scheduler is stepped "
            f"once per optimizer update: the schedule is stretched A-fold (warmup lasts A times longer and the "
            f"decay never completes)",
            "drop the `* A` factor: a scheduler stepped once per optimizer update counts updates",
        )


class SchedulerSteppedTwice(Rule):
    """ACC306: a scheduler the framework already steps is stepped again by hand: the scheduler
    handed to ``deepspeed.initialize`` (``lr_scheduler=`` or the config's ``"scheduler"``), or
    one returned by a LightningModule's ``configure_optimizers`` under automatic optimization
    and stepped in a training hook."""

    code = "ACC306"
    #: ``deepspeed.initialize`` or ``configure_optimizers``, and a scheduler step: the call this rule flags
    gate = RuleGate(markers=(b"initialize", fw.lightning.CONFIGURE_OPTIMIZERS.encode()),
                facts=lambda facts: facts.calls(SCHEDULER_STEP_METHODS))

    def check(self, model: FileModel) -> Iterator[Hit]:
        reported: set[int] = set()
        for event, hit in (*self._deepspeed(model), *self._lightning(model)):
            if id(event.node) not in reported:
                reported.add(id(event.node))
                yield hit

    @staticmethod
    def _deepspeed(model: FileModel) -> Iterator[tuple]:
        handoffs = owned_schedulers(model)
        events = model.all_events()
        if not handoffs or not any(e.kind is EventKind.UPDATE and e.role.role is Role.ENGINE for e in events):
            return
        for event in events:
            if event.kind is not EventKind.SCHEDULER_STEP or stepped_by_engine(model, event, handoffs) is None:
                continue
            name = dotted(event.target) or "the scheduler"
            yield event, Hit(
                event.node,
                f"`{name}` was handed to `deepspeed.initialize`, whose `engine.step()` already steps it at every "
                f"accumulation boundary: this call steps it a second time, so the schedule runs ahead",
                "DeepSpeed steps it; alternatively, do not pass the scheduler to `deepspeed.initialize`",
            )

    @staticmethod
    def _lightning(model: FileModel) -> Iterator[tuple]:
        for scope in model.scopes:
            class_def = scope.class_def
            if class_def is None or scope.name not in fw.lightning.TRAINING_HOOKS:
                continue
            if not model.frameworks.lightning_automatic(class_def):
                continue
            configured = lightning_configured_schedulers(model, class_def)
            if configured is None:
                continue
            for event in model.events[scope]:
                if event.kind is not EventKind.SCHEDULER_STEP:
                    continue
                name = dotted(event.target)
                origin = dotted(event.role.origin) if event.role.origin is not None else None
                if name not in configured and origin not in configured:
                    continue
                yield event, Hit(
                    event.node,
                    f"`{name}` steps a scheduler returned by `configure_optimizers`, which Lightning already steps "
                    f"under automatic optimization (per optimizer update with `interval=\"step\"`, else per epoch): "
                    f"this call in `{scope.name}` steps it a second time, so the schedule runs ahead",
                    "Lightning steps it; set `interval`/`frequency` in `configure_optimizers` to change when, or "
                    "switch to manual optimization (`self.automatic_optimization = False`)",
                )


class AmbiguousStepUnit(Rule):
    """ACC902: a counter named like a training step (``step``, ``global_step``) advances every
    microbatch of an accumulating loop and is used as a logging x-axis or a scheduler argument."""

    code = "ACC902"

    def check(self, model: FileModel) -> Iterator[Hit]:
        for group in model.loops:
            if group.accumulates is not True:
                continue
            for name in microbatch_counters(group):
                if not STEP_COUNTER_NAME.match(last_segment(name)):
                    continue
                for site, use in step_axis_uses(group, name):
                    yield Hit(
                        site.report,  # a logging helper's call in the loop, where the counter is passed
                        f"`{name}` advances on every microbatch (A times per optimizer update) but is used as "
                        f"{use}: readers take it for a count of optimizer updates",
                        f"`{name}` counts microbatches: log and schedule by `{name} // A` or by a counter of optimizer "
                        "updates, or name it after microbatches",
                    )


class ManualSchedulerNeverStepped(Rule):
    """ACC309: a LightningModule under manual optimization returns schedulers from
    ``configure_optimizers`` and never steps them: Lightning steps none under manual optimization.

    Silent where a step may happen out of sight: any scheduler step or ``step()`` on an object
    that is not an optimizer in the class's methods, ``self.lr_schedulers()`` fetched (where it
    goes is open), a returned scheduler's name used outside ``configure_optimizers``, ``self``
    handed to a function the walk does not follow, a class without its own ``training_step``
    (a subclass may step), or an ``lr_scheduler_step`` override.
    """

    code = "ACC309"
    gate = RuleGate(markers=(fw.lightning.CONFIGURE_OPTIMIZERS.encode(),),
                    facts=lambda facts: facts.defines((fw.lightning.CONFIGURE_OPTIMIZERS,)))

    def check(self, model: FileModel) -> Iterator[Hit]:
        classes = {id(s.class_def): s.class_def for s in model.scopes if s.class_def is not None}
        for class_def in classes.values():
            if not model.frameworks.lightning_manual(class_def):
                continue
            scopes = [s for s in model.scopes if s.class_def is class_def]
            names = {s.name for s in scopes}
            if "training_step" not in names or fw.lightning.CONFIGURE_OPTIMIZERS not in names:
                continue
            configured = lightning_configured_schedulers(model, class_def)
            if configured is None or _may_step_schedulers(model, scopes, configured):
                continue
            configure = next(s for s in scopes if s.name == fw.lightning.CONFIGURE_OPTIMIZERS)
            returned = next((s for s in configure.sites if s.is_return and not s.in_helper), None)
            if returned is None:
                continue
            yield Hit(
                returned.node,
                "this LightningModule turns automatic optimization off and returns LR schedulers from "
                "`configure_optimizers`, but no method steps them: under manual optimization Lightning steps "
                "no scheduler, so the learning rate stays at its initial value (no warmup, no decay)",
            )


def _may_step_schedulers(model: FileModel, scopes: list, configured: set[str]) -> bool:
    """Whether a method of the class (or a helper it calls) may step a scheduler (see
    :class:`ManualSchedulerNeverStepped`)."""
    for scope in scopes:
        if scope.name == fw.lightning.CONFIGURE_OPTIMIZERS:
            continue
        if any(e.kind is EventKind.SCHEDULER_STEP for e in model.events[scope]):
            return True
        for site in scope.sites:
            call = site.call
            if call is None:
                if any(name in configured for name in site.targets if name) or (
                        site.value is not None and any(n in configured for n in names_in(site.value))):
                    return True
                continue
            method = method_name(call)
            if method == _LR_SCHEDULERS:
                return True
            if method in SCHEDULER_STEP_METHODS and model.roles.of(call.func.value, site).role is not Role.OPTIMIZER:  # type: ignore[union-attr]
                return True
            if not site.followed and any(isinstance(a.value, cst.Name) and a.value.value == "self" for a in call.args):
                return True
            if any(n in configured for a in call.args for n in names_in(a.value)):
                return True
    return False


#: ``LightningModule.lr_schedulers()``: the accessor of the schedulers ``configure_optimizers`` returned
_LR_SCHEDULERS = next(last_segment(accessor).removesuffix("()") for accessor, role in fw.lightning.ACCESSORS.items()
                      if role is Role.SCHEDULER)


class SchedulerIntervalDefaultsToEpoch(Rule):
    """ACC308: a LightningModule under automatic optimization returns from ``configure_optimizers``
    a scheduler whose horizon or warmup counts optimizer updates
    (:func:`~accumlint.checks.schedule.schedules.update_counted_horizons`) at the epoch interval, Lightning's
    default (:data:`accumlint.frameworks.lightning.SCHEDULER_DEFAULT_INTERVAL`): it is stepped once
    per epoch, so the warmup and decay planned over updates barely start.

    Silent for ``"interval": "step"``, an interval the code does not fix, a horizon whose unit is
    unknown or counts epochs, a scheduler built out of view, manual optimization (ACC309's), an
    ``lr_scheduler_step`` override (the user steps them) and a class with a base besides
    ``LightningModule`` (which may do either)."""

    code = "ACC308"
    gate = RuleGate(markers=(fw.lightning.CONFIGURE_OPTIMIZERS.encode(),),
                    facts=lambda facts: facts.defines((fw.lightning.CONFIGURE_OPTIMIZERS,)))

    def check(self, model: FileModel) -> Iterator[Hit]:
        for scheduler, name in automatic_lightning_schedulers(model, fw.lightning.SCHEDULER_DEFAULT_INTERVAL):
            horizons = update_counted_horizons(model, scheduler.constructor)  # type: ignore[arg-type]
            if horizons:
                horizon = horizons[0]
                said = f'`"interval": "{scheduler.interval}"`' if scheduler.explicit else \
                    f'no `"interval"` (Lightning\'s default is "{fw.lightning.SCHEDULER_DEFAULT_INTERVAL}")'
                yield Hit(
                    scheduler.node,
                    f"`{name}` is sized in optimizer updates (its `{horizon.parameter}` reads "
                    f"`{code_of(horizon.evidence)}`) but is returned with {said}: Lightning steps it once per epoch, "
                    "so its warmup and decay advance one position per epoch instead of one per update",
                )
