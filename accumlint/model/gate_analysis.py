"""How a site inside a microbatch loop is gated and how often it runs: boundary tests, flags,
loop-invariant conditions, and the cadence that follows from them (the part of
:class:`accumlint.model.groups.LoopAnalysis` that reads one site's control flow)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import libcst as cst

from accumlint import frameworks as fw
from accumlint.model import boundary, conventions
from accumlint.model.events import Event
from accumlint.model.kinds import Cadence, EventKind, LoopStyle, Role
from accumlint.model.names import children, dotted, int_value, last_segment, method_name, names_in
from accumlint.model.scopes import Frame, FrameKind, Scope, Site

if TYPE_CHECKING:
    from accumlint.model.groups import Group


@dataclass(frozen=True)
class Gate:
    """The ``if`` (or ``continue`` guard) that gates the update, and the branch the update is in."""

    frame_node: cst.CSTNode
    update_branch: str  # "body" or "orelse"
    test: boundary.BoundaryTest | None


#: calls that return a value without side effects (a test made only of them is loop-invariant when its names are)
PURE_CALLS = frozenset({"len", "isinstance", "hasattr", "getattr", "callable", "int", "float", "bool", "str"})
#: methods that change the length of the list or deque they are called on (a name they are called on
#: varies in the loop); not ``update``/``add``: a GradScaler, a progress bar or a meter has those too
_MUTATORS = frozenset({"append", "extend", "insert", "pop", "popleft", "appendleft", "remove", "clear"})


class GateAnalysis:
    """The gate and cadence reasoning of :class:`~accumlint.model.groups.LoopAnalysis` (a mixin over its state)."""

    scope: Scope
    events: list[Event]
    _assigned: dict[int, set[str]]

    def _gate_of(self, site: Site, loop: cst.CSTNode,
                 skips: frozenset[int] = frozenset()) -> tuple[Gate | None, bool]:
        """The boundary gate around ``site`` inside ``loop``; second value: under an unknown condition."""
        unknown = False
        for frame in site.frames_inside(loop):
            if frame.kind in (FrameKind.HANDLER, FrameKind.MATCH):
                unknown = True
            if frame.kind not in (FrameKind.IF, FrameKind.GUARD) or (
                    frame.kind is FrameKind.GUARD and id(frame.node) in skips):
                continue
            test = self.boundary_test(frame, loop)
            if test is not None:
                branch = "orelse" if frame.kind is FrameKind.GUARD else frame.branch
                return Gate(frame.node, branch, test), False
            if not self.invariant(frame.test, loop, site):
                unknown = True
        return None, unknown

    def boundary_test(self, frame: Frame, loop: cst.CSTNode) -> boundary.BoundaryTest | None:
        test = frame.test
        if test is None:
            return None
        order = self.scope.statement_orders.get(id(frame.node))
        found = boundary.analyze(test, lambda name: self.flag_value(name, loop, order))
        if found is None or (found.kind != "framework" and self.invariant(test, loop)):
            return None
        return found

    def flag_value(
        self, name: str, loop: cst.CSTNode, before: int | None
    ) -> tuple[cst.BaseExpression, cst.CSTNode] | None:
        """The value last assigned to ``name`` inside ``loop`` before execution position ``before``."""
        best: Site | None = None
        for site in self.scope.within(loop):
            if (site.targets == (name,) and site.augmented is None and site.value is not None
                    and not site.in_helper and (before is None or site.order < before)):
                best = site
        return (best.value, best.statement) if best is not None else None  # type: ignore[return-value]

    def invariant(self, test: cst.BaseExpression | None, loop: cst.CSTNode, site: Site | None = None) -> bool:
        """Whether a condition has the same value on every microbatch of ``loop`` (a config flag).

        Names bound by a loop nested inside ``loop`` around ``site`` (``for p in
        model.parameters(): if p.grad is not None``) vary per element, not per microbatch.
        """
        if test is None:
            return False
        assigned = self.assigned_in(loop)
        if site is not None:
            inner = self._inner_loop_targets(site, loop)
            if inner:
                assigned = assigned - inner
        for name in names_in(test):
            if any(name == a or name.startswith(a + ".") or name.startswith(a + "[") or a.startswith(name + ".")
                   for a in assigned):
                return False
        stack: list[cst.CSTNode] = [test]
        while stack:
            node = stack.pop()
            kind = type(node)  # exact types: isinstance on LibCST's (ABC) node classes is slow
            if kind is cst.Call and dotted(node.func) not in PURE_CALLS:
                return False
            if kind is cst.Attribute and node.attr.value in fw.accelerate.BOUNDARY_ATTRS:
                return False
            stack.extend(children(node))
        return True

    def _from_threshold_on(self, test: cst.BaseExpression | None, group: Group, site: Site) -> bool:
        """Whether ``test`` is ``counter >= bound`` (``>``, or written the other way round) on a
        counter that grows on every microbatch of the loop and a bound that does not change in
        it: false for a while, then true on every microbatch (a warm-up threshold)."""
        if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
            return False
        target = test.comparisons[0]
        if isinstance(target.operator, (cst.GreaterThanEqual, cst.GreaterThan)):
            counter, bound = test.left, target.comparator
        elif isinstance(target.operator, (cst.LessThanEqual, cst.LessThan)):
            counter, bound = target.comparator, test.left
        else:
            return False
        name = dotted(counter)
        return (name is not None and self._grows_every_microbatch(name, group)
                and self.invariant(bound, group.loop, site))

    def _grows_every_microbatch(self, name: str, group: Group) -> bool:
        """``name`` is the loop's own index, or is only ever changed in the loop by an
        unconditional ``name += k`` (k a positive integer) of the loop's own code."""
        loop = group.loop
        if isinstance(loop, cst.For):
            target = loop.target
            iterator = loop.iter
            if isinstance(target, cst.Name) and target.value == name and isinstance(iterator, cst.Call) and (
                    dotted(iterator.func) == "range" and len(iterator.args) <= 2):
                return not any(name in s.targets and s.node is not loop for s in group.loop_sites)
            if (isinstance(target, (cst.Tuple, cst.List)) and target.elements and isinstance(iterator, cst.Call)
                    and dotted(iterator.func) == "enumerate" and dotted(target.elements[0].value) == name):
                return not any(name in s.targets and s.node is not loop for s in group.loop_sites)
        writes = [s for s in group.loop_sites if name in s.targets]
        return len(writes) == 1 and not writes[0].in_helper and isinstance(writes[0].augmented, cst.AddAssign) and (
            (int_value(writes[0].value) or 0) > 0) and not any(  # type: ignore[arg-type]
            f.kind in (FrameKind.IF, FrameKind.GUARD, FrameKind.LOOP, FrameKind.HANDLER, FrameKind.MATCH)
            for f in writes[0].frames_inside(loop))

    def _inner_loop_targets(self, site: Site, loop: cst.CSTNode) -> set[str]:
        names: set[str] = set()
        for frame in site.frames_inside(loop):
            if frame.kind is FrameKind.LOOP and isinstance(frame.node, cst.For):
                binding = self.scope.sites[self.scope.loop_spans[frame.node][0]] if (
                    frame.node in self.scope.loop_spans) else None
                if binding is not None:
                    names.update(n for n in binding.targets if n)
        return names

    def assigned_in(self, loop: cst.CSTNode) -> set[str]:
        cached = self._assigned.get(id(loop))
        if cached is not None:
            return cached
        names: set[str] = set()
        for site in self.scope.within(loop):
            if site.targets:
                names.update(n for n in site.targets if n)
            elif site.call is not None and method_name(site.call) in _MUTATORS:
                receiver = dotted(site.call.func.value)  # type: ignore[attr-defined]
                if receiver:  # `history.append(x)`: `len(history)` changes every time
                    names.add(receiver)
        self._assigned[id(loop)] = names
        return names

    def _cadence_in_loop(self, group: Group, event: Event) -> Cadence:
        cadence = self._site_cadence(group, event.site)
        if cadence is not Cadence.MICROBATCH:
            return cadence
        # Accelerate's prepared optimizer and scheduler read the sync flag that the loop's
        # accumulate() set, wherever in the loop they are called (accelerate 1.15.0 optimizer.py)
        if group.accumulate_contexts and event.kind in (EventKind.UPDATE, EventKind.RESET, EventKind.SCHEDULER_STEP):
            role = event.role
            if event.kind is EventKind.RESET and role.role is Role.MODEL:
                return Cadence.MICROBATCH
            if role.role not in fw.accelerate.GATED_ROLES:
                return Cadence.UNKNOWN
            if role.prepared is True:
                return Cadence.FRAMEWORK_GATED
            return Cadence.MICROBATCH if role.prepared is False else Cadence.UNKNOWN
        return cadence

    def _site_cadence(self, group: Group, site: Site, user_groups: bool = False) -> Cadence:
        """How often a site inside the microbatch loop runs, from its control flow alone
        (``MICROBATCH`` when no gate, boundary test or loop-variant condition encloses it).
        ``user_groups``: in a loop whose engine steps every microbatch (DeepSpeed), the user's own
        boundary test counts as the group's (its branch runs once per group); the events' cadences
        leave it undecided (``engine.step()`` in both arms of such a test still runs every microbatch)."""
        if group.style in (LoopStyle.NO_UPDATE, LoopStyle.UNKNOWN):
            return Cadence.UNKNOWN
        for frame in site.frames_inside(group.loop):
            if frame.kind in (FrameKind.HANDLER, FrameKind.MATCH):
                return Cadence.UNKNOWN
            elif frame.kind is FrameKind.GUARD and id(frame.node) in group.skip_guards:
                continue
            elif frame.kind in (FrameKind.IF, FrameKind.GUARD):
                branch = "orelse" if frame.kind is FrameKind.GUARD else frame.branch
                if group.gate is not None and frame.node is group.gate.frame_node:
                    return Cadence.UPDATE if branch == group.gate.update_branch else Cadence.NON_BOUNDARY
                test = self.boundary_test(frame, group.loop)
                if test is not None and test.kind == "framework":
                    positive = (branch == "body") == test.polarity
                    return Cadence.UPDATE if positive else Cadence.NON_BOUNDARY
                if test is not None and group.gate is not None and _same_test(test, group.gate.test):
                    gate = group.gate.test
                    # the gate's test is (update_branch == "body") on the boundary microbatch; the
                    # remainder hits there iff that value equals the gate's polarity
                    residue_hit = (group.gate.update_branch == "body") == gate.polarity  # type: ignore[union-attr]
                    positive = (branch == "body") == (residue_hit == test.polarity)
                    return Cadence.UPDATE if positive else Cadence.NON_BOUNDARY
                if (user_groups and test is not None and group.gate is None and group.style is LoopStyle.DEEPSPEED
                        and test.kind in ("modulo", "counter") and not test.extra):
                    return Cadence.UPDATE if (branch == "body") == test.polarity else Cadence.NON_BOUNDARY
                last = _last_iteration_test(frame.test, group) if group.style is LoopStyle.MICRO_LOOP else None
                if last is not None:
                    # the micro-loop's own test of its last microbatch (`if i < A:` over range(1, A + 1));
                    # the last microbatch's arm is left undecided (no cadence says "the last microbatch")
                    return Cadence.UNKNOWN if (branch == "body") == last else Cadence.NON_BOUNDARY
                if branch == "body" and self._from_threshold_on(frame.test, group, site) and not _leaves(frame.node):
                    continue  # `if global_step >= warmup:`: every microbatch once the counter passed it
                if not self.invariant(frame.test, group.loop, site):
                    return Cadence.UNKNOWN
                if _single_microbatch_branch(frame.test, branch):
                    return Cadence.UNKNOWN  # taken only when A == 1: no group to speak of
        return Cadence.MICROBATCH


def _leaves(node: cst.CSTNode) -> bool:
    """Whether an ``if`` statement's body may leave the loop (``break``, ``return``, ``raise``):
    a threshold that ends the run is passed once, not on every microbatch after it."""
    body = node.body if isinstance(node, cst.If) else None
    stack: list[cst.CSTNode] = [body] if body is not None else []
    while stack:
        current = stack.pop()
        if isinstance(current, (cst.Break, cst.Return, cst.Raise)):
            return True
        if not isinstance(current, (cst.FunctionDef, cst.ClassDef, cst.Lambda, cst.For, cst.While)):
            stack.extend(current.children)
    return body is None


def _last_iteration_test(test: cst.BaseExpression | None, group: Group) -> bool | None:
    """Whether ``test`` holds on the last pass of the micro-loop ``for i in range([a,] stop)``
    only (True), on every pass but the last (False), or is no such test (None): ``i < stop - 1``,
    ``i + 1 != stop``, ``i == stop - 1`` … compared on the same name and constant offsets; the
    index must not be assigned in the loop."""
    loop = group.loop
    if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1 and isinstance(loop, cst.For)
            and isinstance(loop.target, cst.Name) and isinstance(loop.iter, cst.Call)
            and dotted(loop.iter.func) == "range" and 1 <= len(loop.iter.args) <= 2
            and not any(arg.keyword or arg.star for arg in loop.iter.args)):
        return None
    index = loop.target.value
    if any(index in site.targets and site.node is not loop for site in group.loop_sites):
        return None  # the index is rebound inside the loop
    stop = boundary.index_offset(loop.iter.args[-1].value)
    left, right = boundary.index_offset(test.left), boundary.index_offset(test.comparisons[0].comparator)
    operator = test.comparisons[0].operator
    if stop is None or left is None or right is None:
        return None
    if right[0] == index and left[0] != index:  # `A > i`: read as `i < A`
        left, right = right, left
        operator = {cst.LessThan: cst.GreaterThan(), cst.GreaterThan: cst.LessThan(),
                    cst.LessThanEqual: cst.GreaterThanEqual(), cst.GreaterThanEqual: cst.LessThanEqual()}.get(
            type(operator), operator)
    if left[0] != index or right[0] != stop[0] or stop[0] == index:
        return None
    # on the last pass i = stop - 1: the left side is stop + last, the right side stop + bound
    last, bound = stop[1] - 1 + left[1], right[1]
    rows = {cst.LessThan: (bound, False), cst.NotEqual: (bound, False), cst.LessThanEqual: (bound + 1, False),
            cst.Equal: (bound, True), cst.GreaterThanEqual: (bound, True), cst.GreaterThan: (bound + 1, True)}
    row = rows.get(type(operator))
    return row[1] if row is not None and row[0] == last else None


def _single_microbatch_branch(test: cst.BaseExpression | None, branch: str) -> bool:
    """Whether ``branch`` of an ``if`` on the accumulation steps runs only when A == 1
    (``if A == 1:`` body, ``else`` of ``if A > 1:``)."""
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return False
    target = test.comparisons[0]
    if not conventions.ACCUMULATION_NAME.search(last_segment(dotted(test.left))):
        return False
    operator, value = type(target.operator), int_value(target.comparator)
    only_one = (operator, value) in ((cst.Equal, 1), (cst.LessThanEqual, 1), (cst.LessThan, 2))
    more_than_one = (operator, value) in ((cst.GreaterThan, 1), (cst.NotEqual, 1), (cst.GreaterThanEqual, 2))
    return (only_one and branch == "body") or (more_than_one and branch == "orelse")


def _same_test(a: boundary.BoundaryTest, b: boundary.BoundaryTest | None) -> bool:
    """Both tests are the same modulo: same dividend (index and offset), divisor and residue."""
    return (b is not None and a.kind == b.kind == "modulo" and dotted(a.divisor) is not None
            and dotted(a.divisor) == dotted(b.divisor) and a.residue == b.residue
            and boundary.index_offset(a.dividend) is not None
            and boundary.index_offset(a.dividend) == boundary.index_offset(b.dividend))
