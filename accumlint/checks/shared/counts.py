"""Counts and their units in a group (ACC903, ACC904): which counters advance per microbatch
and which per optimizer update, throughputs computed under the update gate, and counters
restored on resume.

Units come from the loop's own increments (``n += 1`` with the group model's cadence), never
from a counter's name alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import libcst as cst

from accumlint.model import Cadence, Group
from accumlint.model.dataflow import counter_name, home, origin, reaching_assignment
from accumlint.model.grad_ops import site_cadence
from accumlint.model.names import code_of, dotted, last_segment, method_name, names_in, string_key, walk

if TYPE_CHECKING:
    from accumlint.model import FileModel, Site

#: calls that read a wall clock (``time.time()``, ``time.perf_counter()``, ``time.monotonic()``)
_CLOCKS = frozenset({"time", "perf_counter", "monotonic", "perf_counter_ns", "time_ns", "monotonic_ns"})
#: expressions that count one microbatch: ``x.numel()``, ``x.size(0)``, ``x.shape[0]``, ``len(batch)``
_SIZE_METHODS = frozenset({"numel", "size", "nelement"})


@dataclass(frozen=True)
class Throughput:
    """A rate computed once per group: ``node`` the assignment (or the division, for a rate
    written in place), ``name`` its target (or the division's source), ``count`` the
    per-microbatch numerator."""

    node: cst.CSTNode
    name: str
    count: str


def _is_clock(expression: cst.BaseExpression | None) -> bool:
    return (isinstance(expression, cst.Call) and last_segment(dotted(expression.func)) in _CLOCKS
            and (dotted(expression.func) or "").startswith("time"))


def _microbatch_size(expression: cst.BaseExpression) -> bool:
    """``x.numel()``, ``x.size(0)``, ``x.shape[0]``, ``len(batch)`` (one microbatch's count)."""
    for node in walk(expression):
        if isinstance(node, cst.Call) and (method_name(node) in _SIZE_METHODS or dotted(node.func) == "len"):
            return True
        if isinstance(node, cst.Attribute) and node.attr.value == "shape":
            return True
    return False



def _group_long_clock(model: FileModel, group: Group, expression: cst.BaseExpression,
                      site: Site) -> bool:
    """Whether ``expression`` (or the name it is) is ``clock() - t0`` with ``t0`` read from the
    clock once per group, under the update gate."""
    if isinstance(expression, cst.Name) or isinstance(expression, cst.Attribute):
        definition = reaching_assignment(site.scope, dotted(expression) or "", site.order, None, site.inline)
        if definition is None or definition.value is None:
            return False
        expression, site = definition.value, definition
    if not (isinstance(expression, cst.BinaryOperation) and isinstance(expression.operator, cst.Subtract)):
        return False
    start = dotted(expression.right)
    if not start or not _is_clock(expression.left) and dotted(expression.left) is None:
        return False
    # the clock's start read where it lives: a helper's `t0` may be the caller's, carried through the call
    start_home = home(site.scope, start, site.order, site.inline, carry=True)
    resets = [s for s in group.loop_sites if len(s.targets) == 1 and _is_clock(s.value)
              and counter_name(s) == start_home]
    return bool(resets) and all(site_cadence(model, group, s) is Cadence.UPDATE for s in resets)


def throughputs_of_one_microbatch(model: FileModel, group: Group) -> list[Throughput]:
    """Rates assigned under the update gate as (one microbatch's count) / (time since the last
    update), with no factor of A: the figure is A× too small. A rate by its shape, whatever its
    target is called: a microbatch's size over a clock difference since the update."""
    found: list[Throughput] = []
    seen: set[int] = set()
    for site in group.loop_sites:
        for node, name, rate in _divisions(site):
            if id(rate) in seen:
                continue
            seen.add(id(rate))
            numerator, denominator = rate.left, rate.right
            if _scaled(model, rate) or _multiplied(numerator):
                continue
            if site_cadence(model, group, site) is not Cadence.UPDATE:
                continue
            count = _per_microbatch_count(model, group, numerator, site)
            if count is None or not _group_long_clock(model, group, denominator, site):
                continue
            found.append(Throughput(node, name, count))
    return found


def _divisions(site: Site) -> list[tuple[cst.CSTNode, str, cst.BinaryOperation]]:
    """The rates a site may compute, with the node a finding goes to and the rate's name: the
    value of an assignment to one name, or a division written in a call's arguments (a rate
    formatted or logged in place: ``print(f"{n / dt:.0f}/s")``, ``log({"tps": n / dt})``)."""
    if site.augmented is None and len(site.targets) == 1 and _is_division(site.value):
        return [(site.node, site.targets[0] or "", site.value)]  # type: ignore[list-item]
    if site.call is None or site.targets:
        return []
    return [(node, code_of(node), node)  # type: ignore[misc]
            for arg in site.call.args for node in walk(arg.value) if _is_division(node)]


def _is_division(node: cst.CSTNode | None) -> bool:
    return isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Divide)


def _scaled(model: FileModel, expression: cst.BaseExpression) -> bool:
    """Whether an expression reads A or the replicas' count (by the model's names)."""
    return any(model.is_accumulation_name(n) for n in walk(expression) if isinstance(n, (cst.Name, cst.Attribute))) \
        or any("world" in n.lower() for n in names_in(expression))


def _multiplied(numerator: cst.BaseExpression) -> bool:
    """A count scaled by something (A, the replicas): not one microbatch's."""
    return any(isinstance(n, cst.BinaryOperation) and isinstance(n.operator, cst.Multiply) for n in walk(numerator))


def _per_microbatch_count(model: FileModel, group: Group, numerator: cst.BaseExpression,
                          site: Site) -> str | None:
    """The text of a numerator that counts one microbatch: a size expression, or a name assigned
    (not accumulated) from one on every microbatch."""
    if _microbatch_size(numerator) and not isinstance(numerator, (cst.Name, cst.Attribute)):
        return dotted(numerator) or "one microbatch's size"
    name = dotted(numerator) if isinstance(numerator, (cst.Name, cst.Attribute)) else None
    if name is None:
        return None
    found = origin(site.scope, name, site.order, site.inline, group.loop)
    if found is None:
        return None
    if found.argument:  # a helper given `x.numel()` at the update: the last microbatch's size
        value = found.value
        if isinstance(value, (cst.Name, cst.Attribute)) or _scaled(model, value) or _multiplied(value):
            return None
        return _per_microbatch_count(model, group, value, found.site)
    definition, assigned = found.site, found.name
    if definition.augmented is not None or not _microbatch_size(found.value):
        return None
    counter = counter_name(definition, assigned)
    if any(s.augmented is not None and len(s.targets) == 1 and counter_name(s) == counter for s in group.loop_sites):
        return None  # also accumulated somewhere: a group count
    return name if site_cadence(model, group, definition) is Cadence.MICROBATCH else None


# --- counters and resume --------------------------------------------------------------------


def counter_units(model: FileModel) -> dict[str, str]:
    """Counter names → ``"microbatch"`` or ``"update"``: names incremented by ``+= 1`` on every
    microbatch, or only under the update gate, of some group of the module (a name with both
    units, or with increments of other amounts, is left out)."""
    units: dict[str, set[str]] = {}
    for group in model.loops:
        if group.accumulates is not True:
            continue
        for site in group.loop_sites:
            if not isinstance(site.augmented, cst.AddAssign) or len(site.targets) != 1 or not site.targets[0]:
                continue
            name, namespace = counter_name(site)
            if namespace is not None:
                continue  # a helper's own counter
            cadence = group.increment_cadence(site)
            unit = {Cadence.MICROBATCH: "microbatch", Cadence.UPDATE: "update"}.get(cadence)
            units.setdefault(name, set()).add(unit or "?")
    return {name: next(iter(found)) for name, found in units.items() if len(found) == 1 and "?" not in found}


@dataclass(frozen=True)
class UnitMismatch:
    """A counter of one unit assigned from a counter of the other: ``node`` the assignment."""

    node: cst.CSTNode
    target: str
    target_unit: str
    source: str
    source_unit: str


def resume_mismatches(model: FileModel) -> list[UnitMismatch]:
    """Plain assignments ``U = M`` (or ``U = state["k"]`` where this module saves ``"k": M``)
    outside the microbatch loops that give a counter of updates the value of a counter of
    microbatches, or the reverse."""
    units = counter_units(model)
    if not units:
        return []
    saved = _saved_keys(model, units)
    loops = [group.loop for group in model.loops]
    found: list[UnitMismatch] = []
    for scope in model.scopes:
        for site in scope.sites:
            if (site.in_helper or site.augmented is not None or len(site.targets) != 1 or site.value is None
                    or any(site.inside(loop) for loop in loops)):
                continue
            target = site.targets[0]
            unit = units.get(target or "")
            if unit is None:
                continue
            source = dotted(site.value) if isinstance(site.value, (cst.Name, cst.Attribute)) else None
            source_unit = units.get(source or "")
            key = string_key(site.value)
            if source_unit is None and key is not None and key in saved:
                holder = site.value.func.value if isinstance(site.value, cst.Call) else site.value.value  # type: ignore[attr-defined]
                source, source_unit = f'{dotted(holder) or ""}["{key}"]', saved[key]
            if source_unit is not None and source_unit != unit and source != target:
                found.append(UnitMismatch(site.node, target, unit, source, source_unit))  # type: ignore[arg-type]
    return found


def _saved_keys(model: FileModel, units: dict[str, str]) -> dict[str, str]:
    """Checkpoint keys → the unit of the counter this module stores under them (``{"step": n}``,
    ``state["step"] = n``); a key stored with both units is left out."""
    keys: dict[str, set[str]] = {}
    for node in walk(model.module):
        if type(node) is cst.DictElement and isinstance(node.key, cst.SimpleString):
            unit = units.get(dotted(node.value) or "")
            if unit is not None:
                keys.setdefault(node.key.evaluated_value, set()).add(unit)  # type: ignore[arg-type]
    for scope in model.scopes:
        for site in scope.sites:
            if site.in_helper or site.value is None or not isinstance(site.node, cst.Assign):
                continue
            unit = units.get(dotted(site.value) or "")
            if unit is None:
                continue
            for target in site.node.targets:
                key = string_key(target.target)
                if key is not None:
                    keys.setdefault(key, set()).add(unit)
    return {key: next(iter(found)) for key, found in keys.items() if len(found) == 1}
