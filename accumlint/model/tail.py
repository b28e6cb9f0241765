"""The epoch's last partial group: what a loop does with the microbatches after its last
full group of A (P9).

Decided for the loops whose boundary the user's code sets (a modulo on a per-pass index of
a loop over a data loader); loops whose boundary a framework owns take the framework's row
of :data:`accumlint.frameworks.FRAMEWORK_TAILS`. ``None`` whenever the code does not
show enough: an index that runs across epochs, an iterable of unknown kind, a range.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

import libcst as cst

from accumlint import frameworks as fw
from accumlint.frameworks.contracts import TailTreatment
from accumlint.model import boundary
from accumlint.model.events import Event
from accumlint.model.groups import AccumulationLoop, LoopStyle
from accumlint.model.kinds import EventKind, Role
from accumlint.model.names import children, dotted, last_segment
from accumlint.model.roles import Roles
from accumlint.model.sites import Site

if TYPE_CHECKING:
    from accumlint.model import FileModel



class LengthFact(str, Enum):
    """What the module's arithmetic says about a loader's length and A."""

    COUNTS_GROUPS = "counts groups per pass as len // A, ceil(len / A), or takes len % A"
    MULTIPLE_OF_A = "asserts len % A == 0"


_GROUP_COUNT_OPERATORS = (cst.FloorDivide, cst.Modulo, cst.Divide)


def length_arithmetic(module: cst.Module, is_a) -> dict[str, LengthFact]:
    """Loader names (last segment) → what the module computes from ``len(loader)`` and A
    (``is_a(expression)`` says whether an expression is A)."""
    facts: dict[str, LengthFact] = {}
    stack: list[cst.CSTNode] = [module]
    while stack:
        node = stack.pop()
        kind = type(node)  # exact types: this walks the whole module, and isinstance on LibCST's nodes is slow
        if kind is cst.Assert:
            found = _len_modulo(node.test, is_a)  # type: ignore[attr-defined]
            if found is not None:
                facts[found] = LengthFact.MULTIPLE_OF_A
                continue
        if kind is cst.BinaryOperation and type(node.operator) in _GROUP_COUNT_OPERATORS and is_a(node.right):  # type: ignore[attr-defined]
            name = _len_of(node.left)  # type: ignore[attr-defined]
            if name is not None:
                facts.setdefault(name, LengthFact.COUNTS_GROUPS)
        stack.extend(children(node))
    return facts


def _len_modulo(test: cst.BaseExpression, is_a) -> str | None:
    """``len(x) % A == 0`` → ``x``'s last segment."""
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1 and isinstance(
            test.comparisons[0].operator, cst.Equal):
        left = test.left
        if (isinstance(left, cst.BinaryOperation) and isinstance(left.operator, cst.Modulo) and is_a(left.right)
                and isinstance(test.comparisons[0].comparator, cst.Integer)
                and test.comparisons[0].comparator.value == "0"):
            return _len_of(left.left)
    return None


def _len_of(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.Call) and dotted(node.func) == "len" and len(node.args) == 1:
        return last_segment(dotted(node.args[0].value)) or None
    return None


@dataclass(frozen=True)
class Tail:
    """The treatment of the partial final group of one accumulation loop.

    ``framework``: the framework that decides it (None: the user's own gate); ``divided_by_a``:
    whether each microbatch's loss is divided by A (so a partial group weighs r/A);
    ``report``: the node to point at (the update gate).
    """

    treatment: TailTreatment
    framework: str | None
    divided_by_a: bool
    report: cst.CSTNode | None
    source: str = ""


def tail_of(model: FileModel, group: AccumulationLoop) -> Tail | None:
    """What ``group`` does with the last ``len(loader) % A`` microbatches of a pass, or None.

    For a user-set boundary the answer needs the code to show that the pass length need not be
    a multiple of A: it counts the groups per epoch as ``len(loader) // A`` (or ``ceil``, or
    takes ``len(loader) % A``), or handles a tail. ``assert len(loader) % A == 0`` settles it
    the other way.
    """
    roles = model.roles
    scope_events = model.events[group.scope]
    if group.style is LoopStyle.DEEPSPEED:
        return _framework("deepspeed")
    if group.style is LoopStyle.ACCELERATE:
        loader = _loader_of(group, roles)
        prepared = loader is not None and roles.of(loader, group.loop_sites[0]).prepared
        return _framework("accelerate-prepared-loader" if prepared else "accelerate-unprepared-loader")
    if group.style is not LoopStyle.GATED or group.gate is None or group.gate.test is None:
        return None
    test = group.gate.test
    # a framework-owned loop (model/owned_loops.py) whose epoch hook restarts the gate's counter:
    # the code counts passes itself, and the framework's loader has no length the code shows
    owned = isinstance(group.loop, cst.FunctionDef) and group.outer_loop is not None
    if test.kind != "modulo" or not (isinstance(group.loop, cst.For) or owned):
        return None
    if owned:
        if not _per_pass_index(group, test):
            return None
    else:
        loader = _loader_of(group, roles)
        if loader is None or not _per_pass_index(group, test):
            return None
        length = model.length_arithmetic.get(last_segment(dotted(loader)))
        if length is LengthFact.MULTIPLE_OF_A or (length is None and not test.tail):
            return None
    backwards = [e for e in group.events if e.kind is EventKind.BACKWARD and group.in_loop(e)]
    divided = bool(backwards) and all(model.divided_by_a(e) for e in backwards)
    report = group.gate.frame_node if test.flag is None else test.report
    if test.tail:
        return Tail(TailTreatment.WEIGHTED if divided else TailTreatment.TRUE_COUNT, None, divided, report)
    after = _events_after(group, scope_events)
    if any(e.kind is EventKind.UPDATE for e in after):
        return Tail(TailTreatment.WEIGHTED if divided else TailTreatment.TRUE_COUNT, None, divided, report)
    if any(e.kind is EventKind.RESET for e in after) or _reset_at_pass_start(group, scope_events):
        return Tail(TailTreatment.DROPPED, None, divided, report)
    treatment = TailTreatment.LEAKS if group.outer_loop is not None else TailTreatment.NOT_APPLIED
    return Tail(treatment, None, divided, report)


def _framework(key: str) -> Tail:
    row = fw.FRAMEWORK_TAILS[key]
    return Tail(row.treatment, row.framework, row.treatment is TailTreatment.WEIGHTED, None, row.source)


def _loader_of(group: AccumulationLoop, roles: Roles) -> cst.BaseExpression | None:
    """The data loader a ``for`` loop iterates (through ``enumerate``/``tqdm``), when it is one."""
    iterable = group.iterable
    if iterable is None or roles.of(iterable, group.loop_sites[0]).role is not Role.LOADER:
        return None
    return iterable


def _per_pass_index(group: AccumulationLoop, test: boundary.BoundaryTest) -> bool:
    """Whether the modulo's index restarts with every pass over the loader: the loop's own
    ``enumerate`` index, or a counter set to a constant right before the loop (same block)."""
    split = boundary.index_offset(test.dividend)
    if split is None:
        return False
    name = split[0]
    loop = group.loop
    target = loop.target if isinstance(loop, cst.For) else None
    if isinstance(target, (cst.Tuple, cst.List)) and target.elements and dotted(target.elements[0].value) == name:
        return True
    scope_sites = group.scope.sites
    first = group.loop_sites[0]
    if boundary.first_value(test.dividend, loop, scope_sites, first.order) is None:
        return False
    loop_frames = first.frames[:-1] if first.frames and first.frames[-1].node is loop else None
    if loop_frames is None:
        return False
    inits = [s for s in scope_sites if s.order < first.order and name in s.targets and not s.in_helper]
    return bool(inits) and _same_block(inits[-1], loop_frames)


def _same_block(site: Site, frames: tuple) -> bool:
    return len(site.frames) == len(frames) and all(a.node is b.node for a, b in zip(site.frames, frames, strict=True))


def _events_after(group: AccumulationLoop, scope_events: list[Event]) -> list[Event]:
    """Events after the microbatch loop, up to the end of its pass (the enclosing loop's body,
    or the rest of the function)."""
    _, end = group.scope.loop_spans[group.loop]
    outer = group.outer_loop
    return [e for e in scope_events if e.order >= end and (outer is None or e.site.inside(outer))]


def _reset_at_pass_start(group: AccumulationLoop, scope_events: list[Event]) -> bool:
    """A reset in the enclosing loop's body before the microbatch loop (it wipes the previous
    pass's tail), or in the function before the loop when there is no enclosing loop."""
    start, _ = group.scope.loop_spans[group.loop]
    outer = group.outer_loop
    return any(e.kind is EventKind.RESET and e.order < start and (outer is None or e.site.inside(outer))
               for e in scope_events)
