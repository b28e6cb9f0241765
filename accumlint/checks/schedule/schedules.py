"""Schedule units: what a scheduler's horizon is counted in and which counters advance once
per microbatch (which schedulers a framework steps by itself: :mod:`accumlint.checks.schedule.owned_schedulers`).

A schedule sized for U scheduler steps must be stepped U times. When the scheduler is
stepped once per optimizer update, its horizon (``num_training_steps``, ``T_max``, warmup …)
must count optimizer updates; a horizon computed from ``len(loader)`` without dividing by
the accumulation steps A counts microbatches and stretches the schedule A-fold.

The horizon's unit is read from its arithmetic, following assignments back through the
constructor's scope: ``len(<the loop's loader>)`` is one microbatch factor, an A-named value
one accumulation factor; products add the factors, divisions subtract them. Anything the
arithmetic cannot place (a division by an unknown value, branches that disagree, an
assignment under a condition) leaves the unit undecided, and rules stay silent.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, NamedTuple

import libcst as cst

from accumlint import frameworks as fw
from accumlint.model import Cadence, EventKind, FrameKind, Group, LoopStyle, Site, conventions
from accumlint.model.boundary import index_offset
from accumlint.model.dataflow import carried, counter_name, home, reaching_assignment
from accumlint.model.names import (
    children,
    dotted,
    last_segment,
    method_name,
    names_in,
    positional,
    string_key,
    walk,
)
from accumlint.model.roles import constructor_role
from accumlint.model.sync import scope_name

if TYPE_CHECKING:
    from accumlint.model import FileModel

#: Counts named in optimizer updates (last segment): ``max_updates``, ``warmup_updates``,
#: ``num_optimizer_steps`` …
UPDATE_COUNT_NAME = re.compile(r"(^|_)(updates|update_steps|optimizer_steps|opt_steps)$")
#: Counters named like a training step (last segment): ``step``, ``steps``, ``global_step`` …
STEP_COUNTER_NAME = re.compile(r"^(global_|train_|cur_|curr_|current_)?steps?$")

_MAX_DEPTH = 8
_PASS_THROUGH = frozenset({"int", "ceil", "floor", "round", "abs"})
_CONDITIONAL = (FrameKind.IF, FrameKind.GUARD, FrameKind.HANDLER, FrameKind.MATCH)


# --- horizons ---------------------------------------------------------------------------------


class HorizonUnit(str, Enum):
    """What one unit of a schedule's horizon stands for."""

    MICROBATCHES = "microbatches"
    UPDATES = "optimizer updates"
    UPDATES_TIMES_A = "a count multiplied by the accumulation steps A"
    UPDATES_OVER_A = "a count of optimizer updates divided by the accumulation steps A again"


@dataclass(frozen=True)
class Horizon:
    """One sizing argument of a scheduler constructor and its unit.

    ``parameter``: the parameter's name (``num_training_steps``); ``node``: the argument's
    value; ``evidence``: the ``len(loader)`` call (microbatches) or the ``* A`` product
    (times A) that decided the unit, None for updates.
    """

    parameter: str
    node: cst.BaseExpression
    unit: HorizonUnit
    evidence: cst.CSTNode | None


class _Unit(NamedTuple):
    """Exponents of the microbatch and accumulation factors of a count; ``opaque``: the value
    comes from a call we cannot read (dimensionless only when no factor meets it)."""

    micro: int
    accum: int
    evidence: cst.CSTNode | None = None
    opaque: bool = False

    @property
    def plain(self) -> bool:
        return self.micro == 0 and self.accum == 0


_PLAIN = _Unit(0, 0)


def horizon_multiplied_by_accumulation(constructor: cst.Call | None,
                                       is_accumulation: Callable[[cst.BaseExpression], bool]) -> bool:
    """Whether any argument of a scheduler constructor is (or contains) a product with an
    A-named value (``num_training_steps=max_train_steps * gradient_accumulation_steps``): the
    schedule is then written in microbatches, and stepping it every microbatch matches it."""
    if constructor is None:
        return False
    for arg in constructor.args:
        stack: list[cst.CSTNode] = [arg.value]
        while stack:
            node = stack.pop()
            if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply):
                if is_accumulation(node.left) or is_accumulation(node.right):
                    return True
            if isinstance(node, (cst.BinaryOperation, cst.UnaryOperation)):
                stack.extend(children(node))
    return False


def schedule_horizons(model: FileModel, constructor: cst.Call, loader: str | None) -> list[Horizon]:
    """The sizing arguments of a scheduler constructor whose unit the arithmetic decides.

    ``loader``: the dotted name of the loader whose ``len()`` counts microbatches (the loader
    the accumulation loop iterates); without it no horizon is read as microbatches. Sizing
    parameters are those of ``frameworks.SCHEDULE_HORIZON_KEYWORDS`` (by keyword) and
    ``SCHEDULE_HORIZON_POSITIONS`` (by position). Undecided arguments are left out.
    """
    site = model.call_sites.get(id(constructor))
    if site is None:
        return []
    arguments: list[tuple[str, cst.BaseExpression]] = [
        (arg.keyword.value, arg.value) for arg in constructor.args
        if arg.keyword is not None and arg.keyword.value in fw.SCHEDULE_HORIZON_KEYWORDS
    ]
    for position, parameter in fw.SCHEDULE_HORIZON_POSITIONS.get(last_segment(dotted(constructor.func)), {}).items():
        value = positional(constructor, position)
        if value is not None:
            arguments.append((parameter, value))
    found: list[Horizon] = []
    for parameter, value in arguments:
        unit = _unit(model, value, site, loader, 0)
        if unit is None or unit.opaque:
            continue
        if (unit.micro, unit.accum) == (1, 0) and unit.evidence is not None:
            found.append(Horizon(parameter, value, HorizonUnit.MICROBATCHES, unit.evidence))
        elif (unit.micro, unit.accum) == (0, 1) and unit.evidence is not None:
            found.append(Horizon(parameter, value, HorizonUnit.UPDATES_TIMES_A, unit.evidence))
        elif unit.accum == -1 and unit.micro in (0, 1):
            found.append(Horizon(parameter, value, HorizonUnit.UPDATES, None))
        elif (unit.micro, unit.accum) == (1, -2) and unit.evidence is not None:
            found.append(Horizon(parameter, value, HorizonUnit.UPDATES_OVER_A, unit.evidence))
    return found


def factory_sized_in_microbatches(model: FileModel, name: str, use: Site, loader: str | None) -> bool:
    """Whether the scheduler ``name`` (read at ``use``) was built by a call that is no known
    scheduler constructor (a project factory: its sizing is out of view) and that call is
    handed the microbatch count of ``loader`` (``len(loader)``, or a product of it) with no
    argument counting optimizer updates or A: what is in view sizes the schedule in
    microbatches. A wrapper that hands the scheduler back (``sched = engine.wrap(sched=sched)``)
    is followed to the binding it was given."""
    if loader is None:
        return False
    seen: set[int] = set()
    while True:
        name, namespace = home(use.scope, name, use.order, use.inline)
        definition = reaching_assignment(use.scope, name, use.order, None, namespace)
        if definition is None or id(definition) in seen or not isinstance(definition.value, cst.Call):
            return False
        seen.add(id(definition))
        call = definition.value
        if any(dotted(arg.value) == name for arg in call.args):
            # the wrapper returns what it was given: look at where that was built
            use = definition
            continue
        if constructor_role(model.roles.qualify_call(call), True) is not None:
            return False  # a known constructor: :func:`schedule_horizons` reads its sizing
        units = [_unit(model, arg.value, definition, loader, 0) for arg in call.args]
        if any(unit is not None and unit.accum != 0 for unit in units):
            return False  # an argument in updates or times A: the factory may size in updates
        return any(unit is not None and (unit.micro, unit.accum) == (1, 0) and unit.evidence is not None
                   for unit in units)


def _unit(model: FileModel, node: cst.BaseExpression, site: Site, loader: str | None, depth: int) -> _Unit | None:
    """The unit of a count expression evaluated at ``site`` (None: undecided)."""
    if depth > _MAX_DEPTH:
        return None
    if isinstance(node, (cst.Integer, cst.Float)):
        # the literal the module uses as A (its gate's `% 4`) counts A; any other is a plain number
        return _Unit(0, 1) if model.is_accumulation_name(node) else _PLAIN
    if isinstance(node, cst.UnaryOperation):
        return _unit(model, node.expression, site, loader, depth + 1)
    if isinstance(node, cst.BinaryOperation):
        left = _unit(model, node.left, site, loader, depth + 1)
        right = _unit(model, node.right, site, loader, depth + 1)
        return _combine(node, node.operator, left, right)
    if isinstance(node, cst.IfExp):
        body = _unit(model, node.body, site, loader, depth + 1)
        orelse = _unit(model, node.orelse, site, loader, depth + 1)
        same = body is not None and orelse is not None and (body.micro, body.accum) == (orelse.micro, orelse.accum)
        return body if same else None
    if isinstance(node, cst.Call):
        return _call_unit(model, node, site, loader, depth)
    name = dotted(node)
    if name is None:
        return None
    counted = _trainer_count(name)
    if counted is not None:  # a Lightning Trainer's own count: its unit is the framework's
        return _Unit(1, -1, node) if counted == "update" else _Unit(1, 0, node)
    if model.is_accumulation_name(node):
        return _Unit(0, 1)
    if conventions.MICRO_BATCH_SIZE_NAME.search(last_segment(name)):
        return _Unit(-1, 0, node)  # samples per microbatch: `samples // micro_batch_size` counts microbatches
    return _name_unit(model, name, site, loader, depth)


def _trainer_count(name: str) -> str | None:
    """The unit (``"update"``, ``"microbatch"``) of a Lightning Trainer's count read as
    ``trainer.<attribute>`` (:data:`accumlint.frameworks.lightning.TRAINER_COUNT_UNITS`), or None."""
    segments = name.split(".")
    if len(segments) > 1 and segments[-2] == "trainer":
        return fw.lightning.TRAINER_COUNT_UNITS.get(segments[-1])
    return None


def _call_unit(model: FileModel, call: cst.Call, site: Site, loader: str | None, depth: int) -> _Unit | None:
    callee = last_segment(dotted(call.func))
    values = [arg.value for arg in call.args if arg.keyword is None and not arg.star]
    if callee == "len" and len(call.args) == 1 and values:
        counted = dotted(values[0])
        same = loader is not None and counted is not None and (
            counted == loader or model.roles.stored_name(counted, site.scope, site.order) == loader)
        return _Unit(1, 0, call) if same else _PLAIN
    if callee in _PASS_THROUGH and values:
        return _unit(model, values[0], site, loader, depth + 1)
    if callee in ("max", "min") and values:
        counted = [v for v in values if not isinstance(v, (cst.Integer, cst.Float))]
        units = [_unit(model, v, site, loader, depth + 1) for v in counted]
        if not units or any(u is None for u in units):
            return None
        first = units[0]
        same = all((u.micro, u.accum) == (first.micro, first.accum) for u in units)  # type: ignore[union-attr]
        return first if same else None
    return _Unit(0, 0, None, True)


def _name_unit(model: FileModel, name: str, site: Site, loader: str | None, depth: int) -> _Unit | None:
    """The unit of ``name`` at ``site``: every definition that may reach it must agree (a value
    on entry, a parameter or a config field, is a plain count), else undecided."""
    definitions, on_entry = model.reaching_definitions(name, site)
    units = [_definition_unit(model, name, definition, loader, depth) for definition in definitions]
    if on_entry:
        units.append(_PLAIN)  # a parameter, a config field, a module constant: a plain count
    if any(unit is None for unit in units):
        return None
    first = units[0]
    assert first is not None
    if any((unit.micro, unit.accum) != (first.micro, first.accum) for unit in units):  # type: ignore[union-attr]
        return None
    evidence = next((unit.evidence for unit in units if unit.evidence is not None), None)  # type: ignore[union-attr]
    return _Unit(first.micro, first.accum, evidence, any(unit.opaque for unit in units))  # type: ignore[union-attr]


def _definition_unit(model: FileModel, name: str, definition: Site, loader: str | None,
                     depth: int) -> _Unit | None:
    """The unit of the value one assignment gives ``name``."""
    if isinstance(definition.node, (cst.For, cst.With)):
        return None
    value = definition.value_of(name)
    if value is None:
        return None
    if definition.augmented is None:
        return _unit(model, value, definition, loader, depth + 1)
    previous = _name_unit(model, name, definition, loader, depth + 1)
    operand = _unit(model, value, definition, loader, depth + 1)
    operator = {cst.MultiplyAssign: cst.Multiply(), cst.DivideAssign: cst.Divide(),
                cst.FloorDivideAssign: cst.FloorDivide(), cst.AddAssign: cst.Add(),
                cst.SubtractAssign: cst.Subtract()}.get(type(definition.augmented))
    return _combine(definition.node, operator, previous, operand) if operator is not None else None


def _combine(node: cst.CSTNode, operator: cst.BaseBinaryOp | None, left: _Unit | None,
             right: _Unit | None) -> _Unit | None:
    if left is None or right is None:
        return None
    evidence = left.evidence or right.evidence
    if isinstance(operator, cst.Multiply):
        if (left.opaque and not right.plain) or (right.opaque and not left.plain):
            return None
        accum = left.accum + right.accum
        if accum == 1 and left.micro + right.micro == 0 and (left.accum == 1) != (right.accum == 1):
            evidence = node  # the `* A` product itself
        return _Unit(left.micro + right.micro, accum, evidence, left.opaque and right.opaque)
    if isinstance(operator, (cst.Divide, cst.FloorDivide)):
        if right.plain:
            return left if left.plain else None  # divided by a count we cannot place (a literal A?)
        return _Unit(left.micro - right.micro, left.accum - right.accum, evidence)
    if isinstance(operator, (cst.Add, cst.Subtract)):
        if left.plain:
            return right
        if right.plain or (left.micro, left.accum) == (right.micro, right.accum):
            return left
        return None
    return left if left.plain and right.plain else None


def conditional_definition(definition: Site, use: Site) -> bool:
    """Whether an assignment sits under a branch that does not also enclose the use."""
    enclosing = {id(frame.node) for frame in use.frames}
    return any(frame.kind in _CONDITIONAL and id(frame.node) not in enclosing for frame in definition.frames)


def iterated_loader(group: Group, model: FileModel | None = None) -> str | None:
    """The dotted name a ``for`` microbatch loop iterates (``Group.iterable``); given ``model``,
    the name a trainer's loader was constructed from (``self.loader`` → ``loader``)."""
    name = dotted(group.iterable)
    if name is None or model is None or not group.loop_sites:
        return name
    site = group.loop_sites[0]
    for _ in range(_MAX_DEPTH):  # `bar = tqdm(loader)` before `for x in bar`: the loop iterates `loader`
        definition = reaching_assignment(site.scope, name, site.order)
        if definition is None or definition.augmented is not None or definition.inside(group.loop):
            break
        value = definition.value_of(name)
        passed = conventions.passed_over(value) if value is not None else None
        if not isinstance(passed, (cst.Name, cst.Attribute)):
            break
        name, site = dotted(passed), definition
    return model.roles.stored_name(name, site.scope, site.order)


def counted_loader(group: Group, model: FileModel) -> str | None:
    """The loader whose microbatches the loop counts: the one it iterates
    (:func:`iterated_loader`), or for ``for _ in range(start, n)`` that draws its batches by
    hand, the ``loader`` of ``n = len(loader)``."""
    name = iterated_loader(group, model)
    iterable = group.loop.iter if isinstance(group.loop, cst.For) else None
    if name is not None or not isinstance(iterable, cst.Call) or dotted(iterable.func) != "range" \
            or not group.loop_sites:
        return name
    bound = [arg.value for arg in iterable.args if arg.keyword is None and not arg.star]
    stop = bound[1] if len(bound) > 1 else bound[0] if bound else None  # (`range(start, stop, step)`)
    site = group.loop_sites[0]
    for _ in range(_MAX_DEPTH):
        if isinstance(stop, cst.Call) and dotted(stop.func) == "len" and len(stop.args) == 1:
            counted = dotted(stop.args[0].value)
            return model.roles.stored_name(counted, site.scope, site.order) if counted is not None else None
        stopped = dotted(stop) if isinstance(stop, (cst.Name, cst.Attribute)) else None
        definition = reaching_assignment(site.scope, stopped, site.order) if stopped is not None else None
        if definition is None or definition.augmented is not None or len(definition.targets) != 1:
            return None
        stop, site = definition.value, definition
    return None


# --- counters -------------------------------------------------------------------------------


#: wrappers a loop passes over the first argument of (not ``enumerate``: its index is the counter)
_PASSING_WRAPPERS = conventions.ITERATION_WRAPPERS - {"enumerate"}


def microbatch_counters(group: Group) -> dict[str, Site]:
    """Names that advance once per microbatch in the loop, with the site that advances them:
    the loop's own index (``for step, batch in enumerate(loader)``, ``for step in range(n)``)
    and counters incremented by a constant on every microbatch (``global_step += 1`` with no
    gate around it, and no other assignment to the name inside the loop)."""
    counters: dict[str, Site] = {}
    if group.style in (LoopStyle.NO_UPDATE, LoopStyle.UNKNOWN) or not group.loop_sites:
        return counters
    binding = group.loop_sites[0]
    if isinstance(group.loop, cst.For) and binding.node is group.loop:
        iterator, target = group.loop.iter, group.loop.target
        while (isinstance(iterator, cst.Call) and last_segment(dotted(iterator.func)) in _PASSING_WRAPPERS
               and positional(iterator, 0) is not None):
            iterator = positional(iterator, 0)  # tqdm(enumerate(loader)), logger.log_every(range(n), 10)
        callee = dotted(iterator.func) if isinstance(iterator, cst.Call) else None
        if callee == "enumerate" and isinstance(target, (cst.Tuple, cst.List)) and target.elements:
            index = dotted(target.elements[0].value)
            if index is not None:
                counters[index] = binding
        elif callee == "range" and isinstance(target, cst.Name):
            counters[target.value] = binding
    for site in group.loop_sites:
        if (len(site.targets) == 1 and site.targets[0] is not None and isinstance(site.value, cst.Integer)
                and group.increment_cadence(site) is Cadence.MICROBATCH):
            name, namespace = counter_name(site)
            if namespace is not None:
                continue  # a helper's own counter
            # the caller's `step = helper(..., step)` hands the helper's increment back: no other write
            handing_back = {id(inline.call) for inline in site.inline.chain()} if site.inline is not None else set()
            others = [s for s in group.loop_sites if s is not site and id(s.value) not in handing_back
                      and (name in s.targets if s.inline is None
                           else any(counter_name(s, t) == (name, None) for t in s.targets if t))]
            if not others:
                counters[name] = site
    return counters


def step_axis_uses(group: Group, name: str) -> list[tuple[Site, str]]:
    """Where the loop's code uses counter ``name`` (or ``name ± k``) as a training position:
    the x-axis of a logged value (``step=``/``global_step=`` keywords, TensorBoard's
    ``global_step`` position, a progress line formatting it) or a scheduler's argument. A
    helper's call is read with its parameters bound to the caller's arguments. Each use comes
    with a few words saying which."""
    uses: list[tuple[Site, str]] = []
    for site in group.loop_sites:
        call = site.call
        if call is None:
            continue
        if site.inline is not None:  # a helper's call: read with its parameters bound to the caller's arguments
            kept = carried(site.scope, site.inline)
            if not (site.inline.reads_outer(call) or set(kept) & set(names_in(call))):
                continue
            call = site.inline.rewrite(call, locals_unknown=True, carried=kept)  # type: ignore[assignment]
        what = _step_use(call, name, group, site)
        if what is not None:
            uses.append((site, what))
    return uses


def _is_counter(value: cst.BaseExpression | None, name: str) -> bool:
    split = index_offset(value)
    return split is not None and split[0] == name


def _is_shifted_counter(value: cst.BaseExpression | None, name: str, group: Group) -> bool:
    """The counter, or the counter plus an offset the loop never assigns (``global_step +
    start_step``, a resumed run's start): the sum still advances with every microbatch."""
    if _is_counter(value, name):
        return True
    if not (isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Add)):
        return False
    assigned = {target for site in group.loop_sites for target in site.targets if target}
    for counter, offset in ((value.left, value.right), (value.right, value.left)):
        label = dotted(offset) if isinstance(offset, (cst.Name, cst.Attribute)) else None
        if dotted(counter) == name and label is not None and label != name and label not in assigned:
            return True
    return False


def _step_use(call: cst.Call, name: str, group: Group, site: Site) -> str | None:
    """What ``call`` (``site``'s call as written, read in the loop's names) uses counter ``name`` as, if any."""
    node = site.call
    callee = last_segment(dotted(call.func)) or (method_name(call) or "")
    for arg in call.args:
        if (arg.keyword is not None and arg.keyword.value in conventions.LOGGING_STEP_KEYWORDS
                and conventions.LOGGING_STEP_CALLEE.match(callee) and _is_shifted_counter(arg.value, name, group)):
            return f"the `{arg.keyword.value}=` of a logged value"
    position = conventions.LOGGING_STEP_POSITIONS.get(callee)
    if position is not None and _is_shifted_counter(positional(call, position), name, group):
        return "the x-axis of a logged value"
    # the call itself, not a helper's call reported for the scheduler step inside it (whose
    # arguments are the helper's, not the scheduler's)
    stepped = next((e for e in group.events if e.site.node is node and e.kind is EventKind.SCHEDULER_STEP), None)
    if stepped is not None and any(_is_counter(arg.value, name) for arg in call.args):
        return "the argument of a scheduler step"
    if callee.lower() in conventions.LOGGING_CALLS and any(_formats(arg.value, name) for arg in call.args) \
            and not (_at_the_update(site, group) and _against_epoch_length(call, group)):
        return "the position in a logged progress line"
    return None


def _at_the_update(site: Site, group: Group) -> bool:
    """Whether ``site`` runs in the update's branch of the group's gate (once per optimizer update)."""
    gate = group.gate
    return gate is not None and any(frame.node is gate.frame_node and frame.branch == gate.update_branch
                                    for frame in site.frames)


def _against_epoch_length(call: cst.Call, group: Group) -> bool:
    """Whether a logged line also shows a length (``len(loader)``, or a name the function binds to
    one): printed at an update, ``batch 7/120`` sets the counter against the epoch's microbatches,
    a position in the epoch in the unit it counts, which no reader takes for a count of optimizer
    updates (on the microbatch path, every ``log_interval`` microbatches, the line's cadence and
    loss are a microbatch's: ACC902, ``shared/cases/041``)."""
    lengths = {target for site in group.scope.sites if site.augmented is None
               for target in site.targets if target and _is_length(site.value_of(target))}
    return any(_is_length(node) or isinstance(node, cst.Name) and node.value in lengths
               for arg in call.args for node in walk(arg.value))


def _is_length(node: cst.CSTNode | None) -> bool:
    return isinstance(node, cst.Call) and dotted(node.func) == "len"


def _formats(value: cst.BaseExpression, name: str) -> bool:
    """Whether a logged argument shows the counter: the counter itself, an f-string field, or
    an argument of ``"...".format(...)`` / ``"..." % (...)``."""
    if _is_counter(value, name):
        return True
    if isinstance(value, cst.FormattedString):
        return any(isinstance(part, cst.FormattedStringExpression) and _is_counter(part.expression, name)
                   for part in value.parts)
    if isinstance(value, cst.Call) and method_name(value) == "format":
        return any(_is_counter(arg.value, name) for arg in value.args)
    if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Modulo) and isinstance(
            value.left, (cst.SimpleString, cst.ConcatenatedString)):
        right = value.right
        items = [e.value for e in right.elements] if isinstance(right, cst.Tuple) else [right]
        return any(_is_counter(item, name) for item in items)
    return False


@dataclass(frozen=True)
class LearningRateWrite:
    """A learning rate written by hand every microbatch (``group["lr"] = get_lr(micro, warmup_updates,
    max_updates)``): ``position`` is the microbatch counter handed to the schedule, ``horizon`` an
    argument named in optimizer updates, ``computed`` the statement that calls the schedule (the
    write, or the assignment of the name it writes)."""

    site: Site
    position: str
    horizon: cst.BaseExpression
    computed: cst.CSTNode


def microbatch_lr_writes(group: Group) -> list[LearningRateWrite]:
    """Learning-rate writes into a param group (``g["lr"] = value``) that run on every microbatch of
    ``group`` with a value computed, in the loop, by a call that takes a microbatch counter of the
    loop and a count named in updates (:data:`UPDATE_COUNT_NAME`). A write in a helper the loop
    calls reads its arguments in the loop's names (``step(micro, max_updates)``)."""
    if group.style in (LoopStyle.NO_UPDATE, LoopStyle.UNKNOWN, LoopStyle.MICRO_LOOP):
        return []
    counters = microbatch_counters(group)
    found: list[LearningRateWrite] = []
    for site in _lr_writes(group, helpers=True):
        if any(f.kind in _CONDITIONAL and id(f.node) not in group.skip_guards for f in site.frames_inside(group.loop)):
            continue  # written only on some microbatches
        value, computed = _written_value(group, site)
        if not isinstance(value, cst.Call):
            continue
        arguments = [arg.value for arg in value.args]
        position = next((outer for arg in arguments if (split := index_offset(arg)) is not None
                         and (outer := scope_name(split[0], site)) in counters), None)
        horizon = next((arg for arg in arguments if UPDATE_COUNT_NAME.search(last_segment(dotted(arg)))), None)
        if position is not None and horizon is not None:
            found.append(LearningRateWrite(site, position, horizon, computed))
    return found


@dataclass(frozen=True)
class WarmupAgainstUpdates:
    """A learning rate written by hand from a counter of optimizer updates divided by a horizon
    counted in microbatches (``g["lr"] = peak * updates / warmup`` with ``warmup = 2 *
    (epoch_size // micro_batch_size)``): ``site`` the write, ``counter`` and ``horizon`` the names."""

    site: Site
    counter: str
    horizon: str
    #: where to report: the warmup test around the write (``if updates <= warmup:``), else the write
    report: cst.CSTNode


def update_counter_lr_writes(model: FileModel, group: Group,
                             update_counters: set[str]) -> list[WarmupAgainstUpdates]:
    """Learning-rate writes into a param group (``g["lr"] = ...``) in ``group``'s loop whose value
    divides an expression of a counter of ``update_counters`` by a name whose unit is microbatches
    (read where the name is defined: in the function, or the module's one top-level assignment)."""
    found: list[WarmupAgainstUpdates] = []
    for site in _lr_writes(group):
        stack: list[cst.CSTNode] = [_written_value(group, site)[0]]
        while stack:
            node = stack.pop()
            if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Divide):
                counter = next((n for n in names_in(node.left) if n in update_counters), None)
                horizon = dotted(node.right)
                if counter is not None and horizon is not None and _counts_microbatches(model, horizon, site):
                    tests = [f.test for f in site.frames if f.kind is FrameKind.IF
                             and isinstance(f.test, cst.Comparison) and {counter, horizon} <= set(names_in(f.test))]
                    found.append(WarmupAgainstUpdates(site, counter, horizon, tests[-1] if tests else site.node))
                    break
            if isinstance(node, (cst.BinaryOperation, cst.UnaryOperation)):
                stack.extend(children(node))
    return found


def _lr_writes(group: Group, helpers: bool = False) -> Iterator[Site]:
    """The loop's own assignments of a param group's learning rate (``g["lr"] = value``); with
    ``helpers``, those of the helpers it calls too."""
    for site in group.loop_sites:
        statement = site.statement
        if ((site.in_helper and not helpers) or site.value is None or not isinstance(statement, cst.Assign)
                or site.call is not None):
            continue
        target = statement.targets[0].target
        if (isinstance(target, cst.Subscript) and len(target.slice) == 1
                and isinstance(target.slice[0].slice, cst.Index)
                and isinstance(target.slice[0].slice.value, cst.SimpleString)
                and target.slice[0].slice.value.evaluated_value == "lr"):
            yield site


def _written_value(group: Group, site: Site) -> tuple[cst.BaseExpression, cst.CSTNode]:
    """The value an ``lr`` write stores and the statement that computed it: through one name
    assigned earlier in the loop (``lr = peak * updates / warmup`` then ``g["lr"] = lr``)."""
    assert site.value is not None
    value, computed = site.value, site.statement
    if isinstance(value, cst.Name):
        definition = next((s for s in reversed(group.loop_sites) if s.order < site.order
                           and s.targets == (value.value,) and s.augmented is None and s.inline is site.inline), None)
        if definition is not None and definition.value is not None:
            value, computed = definition.value, definition.statement
    return value, computed


def _counts_microbatches(model: FileModel, name: str, site: Site) -> bool:
    """Whether ``name`` at ``site`` is a count of microbatches with evidence (a ``// micro_batch_size``
    or ``len(<loader>)``): its function's definitions, else the module's one top-level value."""
    definitions, on_entry = model.reaching_definitions(name, site)
    if definitions:
        unit = _name_unit(model, name, site, None, 0)
    elif on_entry and "." not in name and model.functions.module_value(name) is not None:
        top = model.scopes[0]
        value = model.functions.module_value(name)
        where = next((s for s in top.sites if s.value is value), None)
        unit = _unit(model, value, where, None, 0) if where is not None else None
    else:
        return False
    return unit is not None and not unit.opaque and (unit.micro, unit.accum) == (1, 0) and unit.evidence is not None


# --- horizons counted in optimizer updates (a scheduler meant to be stepped per update) -------

#: A count named in updates, batches or iterations (last segment): ``num_training_steps``,
#: ``warmup_steps``, ``max_steps``, ``total_iters``, ``steps_per_epoch`` … never in epochs.
UPDATE_SIZED_NAME = re.compile(
    r"^(num_|max_|total_|n_)?(training_|train_|warmup_|warm_up_|decay_|optimizer_|opt_|update_)?"
    r"(steps|updates|iters|iterations)(_per_epoch)?$", re.IGNORECASE)
#: calls of a loader's batches per epoch (``len(self.train_dataloader())``)
_LOADER_NAME = re.compile(r"loader", re.I)
#: the parameter of a ``LambdaLR``'s function and its position
_LR_LAMBDA = ("LambdaLR", "lr_lambda", 1)


def update_counted_horizons(model: FileModel, constructor: cst.Call) -> list[Horizon]:
    """The sizing arguments of a scheduler constructor whose value counts optimizer updates or
    batches, never epochs: a Lightning Trainer's count (``self.trainer.estimated_stepping_batches``,
    :data:`accumlint.frameworks.lightning.TRAINER_COUNT_UNITS`), ``len()`` of a loader, or a
    count named in steps or updates (:data:`UPDATE_SIZED_NAME`), through assignments, products,
    divisions by other counts and ``int``/``ceil``. A ``LambdaLR`` counts too when its function
    reads such a count (a warmup in steps). ``evidence`` is the count that decided; a value that
    mentions an epoch count, a literal or anything else is left out (unknown unit)."""
    site = model.call_sites.get(id(constructor))
    if site is None:
        return []
    found: list[Horizon] = []
    arguments = [(arg.keyword.value, arg.value) for arg in constructor.args
                 if arg.keyword is not None and arg.keyword.value in fw.SCHEDULE_HORIZON_KEYWORDS]
    callee = last_segment(dotted(constructor.func))
    for position, parameter in fw.SCHEDULE_HORIZON_POSITIONS.get(callee, {}).items():
        value = positional(constructor, position)
        if value is not None:
            arguments.append((parameter, value))
    named = _schedule_name(constructor) if callee == "get_scheduler" else None
    if named in fw.NAMED_SCHEDULE_READS:  # `get_scheduler("constant", ...)` ignores its sizes
        arguments = [(parameter, value) for parameter, value in arguments
                     if parameter in fw.NAMED_SCHEDULE_READS[named]]
    for parameter, value in arguments:
        evidence = _update_count(model, value, site, 0)
        if evidence is not None:
            found.append(Horizon(parameter, value, HorizonUnit.UPDATES, evidence))
    if callee == _LR_LAMBDA[0]:
        function = next((a.value for a in constructor.args if a.keyword is not None
                         and a.keyword.value == _LR_LAMBDA[1]), None) or positional(constructor, _LR_LAMBDA[2])
        evidence = _lambda_update_count(model, function, site) if function is not None else None
        if evidence is not None:
            found.append(Horizon(_LR_LAMBDA[1], function, HorizonUnit.UPDATES, evidence))  # type: ignore[arg-type]
    return found


def _schedule_name(constructor: cst.Call) -> str | None:
    """The literal schedule ``name`` of a ``get_scheduler`` call (keyword or first argument), or None."""
    value = next((a.value for a in constructor.args if a.keyword is not None and a.keyword.value == "name"), None) \
        or positional(constructor, 0)
    return value.evaluated_value if isinstance(value, cst.SimpleString) else None  # type: ignore[return-value]


def _update_count(model: FileModel, node: cst.BaseExpression, site: Site, depth: int) -> cst.CSTNode | None:
    """The count of optimizer updates or batches ``node`` is made of (see
    :func:`update_counted_horizons`), or None."""
    if depth > _MAX_DEPTH:
        return None
    if isinstance(node, cst.BinaryOperation):
        left = _update_count(model, node.left, site, depth + 1)
        right = _update_count(model, node.right, site, depth + 1)
        if _mentions_epochs(node.left) or _mentions_epochs(node.right):
            # batches per epoch times epochs still counts batches; anything else with epochs is open
            return left or right if isinstance(node.operator, cst.Multiply) else None
        if isinstance(node.operator, cst.Multiply):
            return left or right
        if isinstance(node.operator, (cst.Divide, cst.FloorDivide)):
            return left if right is None else None  # a count over a count is a ratio
        if isinstance(node.operator, (cst.Add, cst.Subtract)):
            plain = (cst.Integer, cst.Float)
            return left if (right is not None or isinstance(node.right, plain)) else \
                right if isinstance(node.left, plain) else None
        return None
    if isinstance(node, cst.Call):
        callee = last_segment(dotted(node.func))
        values = [arg.value for arg in node.args if arg.keyword is None and not arg.star]
        if callee == "len" and len(values) == 1:
            counted = values[0]
            text = dotted(counted.func) if isinstance(counted, cst.Call) else dotted(counted)
            return node if text is not None and _LOADER_NAME.search(last_segment(text)) else None
        if callee in _PASS_THROUGH and values:
            return _update_count(model, values[0], site, depth + 1)
        return None
    key = string_key(node) if isinstance(node, cst.Subscript) else None
    if key is not None:  # `self.hparams["num_steps"]`: a count read by its key, as by an attribute's name
        return node if UPDATE_SIZED_NAME.match(key) and "epoch" not in key.lower() else None
    name = dotted(node)
    if name is None or _mentions_epochs(node):
        return None
    segments = name.split(".")
    if _trainer_count(name) is not None:
        return node
    definitions, on_entry = model.reaching_definitions(name, site)
    if definitions:
        if on_entry or len(definitions) > 1:
            return None  # several values may reach it: they must agree, and one is not in view
        definition = definitions[0]
        if definition.augmented is not None or definition.value is None or len(definition.targets) != 1:
            return None
        return _update_count(model, definition.value, definition, depth + 1)
    return node if UPDATE_SIZED_NAME.match(segments[-1]) else None


def _lambda_update_count(model: FileModel, function: cst.BaseExpression, site: Site) -> cst.CSTNode | None:
    """The count of optimizer updates a ``LambdaLR`` function reads (``lambda s: min(1, s / warmup_steps)``,
    or a function of the module by name), or None: its own parameters are the scheduler's position."""
    if isinstance(function, cst.Lambda):
        body: cst.CSTNode = function.body
        params = function.params
    else:
        name = dotted(function)
        located = model.functions.functions.get(name) if name is not None else None
        if located is None and name is not None and name.startswith("self."):
            located = next((f for (_, method), f in model.functions.methods.items() if method == name[5:]), None)
        if not isinstance(located, cst.FunctionDef):
            return None
        body, params = located.body, located.params
    own = {p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)} - {"self"}
    stack: list[cst.CSTNode] = [body]
    while stack:
        node = stack.pop()
        if isinstance(node, (cst.Name, cst.Attribute)):
            name = dotted(node)
            if name is not None and name.split(".")[0] not in own:
                evidence = _update_count(model, node, site, 0)
                if evidence is not None:
                    return evidence
            if isinstance(node, cst.Attribute) and name is not None:
                continue  # `self.hparams.warmup_steps`: its parts are no counts of their own
        stack.extend(children(node))
    return None


def _mentions_epochs(node: cst.CSTNode) -> bool:
    """Whether an expression reads a count named in epochs (``max_epochs``, ``self.trainer.max_epochs``)."""
    return any("epoch" in name.lower() and not name.lower().endswith("steps_per_epoch") for name in names_in(node))
