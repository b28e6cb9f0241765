"""Accumulation loops: which loop iterates microbatches, how its optimizer update is gated,
and how often each training event in it runs (every microbatch, once per update, …).

Shapes recognized:
- GATED: the update sits under a boundary test inside the microbatch loop;
- MICRO_LOOP: an inner loop of backwards followed (after the loop) by the update;
- ACCELERATE: the loop body enters ``accelerator.accumulate()``, prepared objects are gated;
- DEEPSPEED: ``engine.step()`` runs every microbatch and the engine decides the boundary;
- UNGATED: the update runs every microbatch (no accumulation, or ACC004).
When none fits, the loop is UNKNOWN and rules stay silent about it; so is a loop that
backpropagates several losses of one forward run before it (its passes are no microbatches).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

import libcst as cst

from accumlint import frameworks as fw
from accumlint.model import boundary, conventions
from accumlint.model.dataflow import reaching_assignment
from accumlint.model.events import Event
from accumlint.model.kinds import Cadence, EventKind, Role
from accumlint.model.names import children, dotted, int_value, last_segment, method_name, names_in, positional, walk
from accumlint.model.sites import Frame, FrameKind, Scope, Site

#: Calls that wrap a loader without changing what it yields (the index comes from enumerate).
_ITERATION_WRAPPERS = frozenset({"enumerate", "tqdm", "iter"})
#: assignments followed back from a loss to the forward it was computed from (one forward, many losses)
_MAX_ONE_FORWARD_CHAIN = 16
_PURE_CALLS = frozenset({"len", "isinstance", "hasattr", "getattr", "callable", "int", "float", "bool", "str"})


class LoopStyle(str, Enum):
    GATED = "optimizer update gated by a boundary test"
    MICRO_LOOP = "inner microbatch loop followed by the optimizer update"
    ACCELERATE = "Accelerate accumulate()"
    DEEPSPEED = "DeepSpeed engine owns the boundary"
    UNGATED = "optimizer update on every microbatch"
    NO_UPDATE = "no optimizer update in this function"
    UNKNOWN = "undecided"


@dataclass(frozen=True)
class Gate:
    """The ``if`` (or ``continue`` guard) that gates the update, and the branch the update is in."""

    frame_node: cst.CSTNode
    update_branch: str  # "body" or "orelse"
    test: boundary.BoundaryTest | None


@dataclass(eq=False)
class Group:
    """One microbatch loop and the events of its group.

    ``events``: every event of the group region in execution order (the loop, plus for
    MICRO_LOOP the statements around it in the enclosing block). ``accumulates``: True
    when a group holds several microbatches, False when it holds one, None when unknown.
    """

    scope: Scope
    loop: cst.For | cst.While
    style: LoopStyle
    events: list[Event]
    gate: Gate | None = None
    accumulates: bool | None = None
    cadences: dict[int, Cadence] = field(default_factory=dict)
    #: how often each counter increment of the loop's own code (``n += k``) runs, by id of its site
    increment_cadences: dict[int, Cadence] = field(default_factory=dict)
    accumulate_contexts: list[cst.With] = field(default_factory=list)
    #: for MICRO_LOOP: the loop that encloses the group's region (None: the function body)
    region_root: cst.CSTNode | None = None
    #: the innermost loop of this scope around the microbatch loop (an epoch loop; None: none)
    outer_loop: cst.CSTNode | None = None
    #: dotted names assigned inside the microbatch loop (its loop-variant names)
    assigned: frozenset[str] = frozenset()
    #: every site inside the microbatch loop, in execution order (inlined helpers included)
    loop_sites: list[Site] = field(default_factory=list)
    #: every site of the group region (the loop; for MICRO_LOOP the block around it too)
    region_sites: list[Site] = field(default_factory=list)
    #: ids of the ``if cond: continue`` statements that skip whole microbatches: every backward
    #: of the loop runs after them, so they choose which iterations are microbatches, not
    #: which events of a microbatch run (the resume-skip `if step < resume_step: continue`)
    skip_guards: frozenset[int] = frozenset()

    def region_frames(self, site: Site) -> tuple[Frame, ...]:
        """The frames of a site inside the group's region (the loop, or for MICRO_LOOP the
        block around it)."""
        if self.style is LoopStyle.MICRO_LOOP:
            return site.frames_inside(self.region_root) if self.region_root is not None else site.frames
        return site.frames_inside(self.loop)

    def cadence(self, event: Event) -> Cadence:
        """How often ``event`` runs relative to the group (``UNKNOWN`` when undecidable)."""
        return self.cadences.get(id(event), Cadence.UNKNOWN)

    def increment_cadence(self, site: Site) -> Cadence:
        """How often a counter increment ``n += k`` of the loop's own code runs (``UNKNOWN`` when
        undecidable, or for a site that is no such increment)."""
        return self.increment_cadences.get(id(site), Cadence.UNKNOWN)

    @property
    def iterable(self) -> cst.Name | cst.Attribute | None:
        """What a ``for`` microbatch loop iterates, through ``enumerate``/``tqdm``/``iter``
        (``for i, b in enumerate(tqdm(train_loader))`` → ``train_loader``); None for a
        ``while`` loop or a computed iterable (``range(n)``, ``zip(a, b)``)."""
        if not isinstance(self.loop, cst.For):
            return None
        iterable: cst.BaseExpression = self.loop.iter
        while isinstance(iterable, cst.Call) and last_segment(dotted(iterable.func)) in _ITERATION_WRAPPERS:
            first = positional(iterable, 0)
            if first is None:
                return None
            iterable = first
        return iterable if isinstance(iterable, (cst.Name, cst.Attribute)) else None

    def true_on_update(self, test: cst.BaseExpression, before: int) -> bool | None:
        """The value a condition evaluated at position ``before`` takes on the microbatch whose
        update the gate lets through, when it is a modulo test on the gate's own index and
        divisor (``micro % A == 0`` against the gate ``(micro + 1) % A == 0``: False for A > 1);
        None when undecidable (another index, a counter moved in between, A unknown)."""
        gate = self.gate
        mine = gate.test if gate is not None else None
        if mine is None or mine.kind != "modulo" or mine.extra or (gate.update_branch == "body") != mine.polarity:
            return None  # no modulo gate, or the update runs on the microbatches the modulo misses

        def resolve(name: str) -> tuple[cst.BaseExpression, cst.CSTNode] | None:
            found = [s for s in self.loop_sites if s.targets == (name,) and s.augmented is None
                     and s.value is not None and not s.in_helper and s.order < before]
            return (found[-1].value, found[-1].statement) if found else None  # type: ignore[return-value]

        other = boundary.analyze(test, resolve)
        if other is None or other.kind != "modulo" or other.extra or other.tail:
            return None
        if dotted(other.divisor) is None or dotted(other.divisor) != dotted(mine.divisor):
            return None
        split, gate_split = boundary.index_offset(other.dividend), boundary.index_offset(mine.dividend)
        if split is None or gate_split is None or split[0] != gate_split[0]:
            return None
        gate_order = self.scope.statement_orders.get(id(gate.frame_node))  # type: ignore[union-attr]
        if gate_order is None:
            return None
        low, high = sorted((before, gate_order))
        if any(split[0] in s.targets and low <= s.order < high for s in self.loop_sites):
            return None  # the index moves between the two tests
        # on the update microbatch (index + gate offset) % A == gate residue; the other test reads
        # (index + its offset) % A, which equals its residue iff the difference is 0 mod A
        difference = (split[1] - gate_split[1]) + ((mine.residue or 0) - (other.residue or 0))
        if difference == 0:
            return other.polarity
        if abs(difference) == 1:  # never 0 mod A once A > 1 (A = 1 accumulates nothing)
            return not other.polarity
        return None

    def of_kind(self, *kinds: EventKind) -> list[Event]:
        return [event for event in self.events if event.kind in kinds]

    def in_loop(self, event: Event) -> bool:
        return event.site.inside(self.loop)


class LoopAnalysis:
    """Builds :class:`Group` objects for one scope."""

    def __init__(self, scope: Scope, events: list[Event], accumulate_test) -> None:
        self.scope = scope
        self.events = events
        self.is_accumulate_context = accumulate_test  # With node -> bool
        self._assigned: dict[int, set[str]] = {}

    # --- loops ------------------------------------------------------------------------------
    def microbatch_loops(self) -> list[cst.For | cst.While]:
        """Innermost own loops that contain a backward (in this scope or a helper it calls)."""
        loops: list[cst.For | cst.While] = []
        for event in self.events:
            if event.kind is not EventKind.BACKWARD:
                continue
            own = _own_frames_list(event.site.frames)
            if len(own) < len(event.site.frames) and any(
                f.kind is FrameKind.LOOP for f in event.site.frames[len(own):]
            ):
                helper_loop = self._helper_micro_loop(event)
                if helper_loop is not None and helper_loop not in loops:
                    loops.append(helper_loop)
                continue  # else the backward is in a loop of the helper: that scope analyses it
            inner = [f.node for f in own if f.kind is FrameKind.LOOP]
            if inner and inner[-1] not in loops and inner[-1] in self.scope.loop_spans:
                loops.append(inner[-1])  # type: ignore[arg-type]
        return loops

    def _helper_micro_loop(self, event: Event) -> cst.For | cst.While | None:
        """The innermost loop of a helper around a backward, when that loop updates nothing
        itself (the helper's own scope then finds no group) and this scope updates after it:
        the helper's micro-loop, the caller's update (``accumulate_group(); opt.step()``)."""
        loop = next((f.node for f in reversed(event.site.frames) if f.kind is FrameKind.LOOP), None)
        if loop is None or loop not in self.scope.loop_spans:
            return None
        start, end = self.scope.loop_spans[loop]
        if not (start <= event.order < end):
            return None  # a later inlined copy of the helper: its first copy stands for it
        if any(e.kind is EventKind.UPDATE and start <= e.order < end for e in self.events):
            return None
        return loop if self._updates_after(loop) else None  # type: ignore[return-value]

    def analyse(self, loop: cst.For | cst.While) -> Group:
        start, end = self.scope.loop_spans[loop]
        inside = [e for e in self.events if start <= e.order < end]
        updates = [e for e in inside if e.kind is EventKind.UPDATE]
        accumulate = [f.node for e in inside for f in e.site.frames_inside(loop)
                      if f.kind is FrameKind.WITH and self.is_accumulate_context(f.node)]
        contexts = list(dict.fromkeys(accumulate))
        skips = self._skip_guards([e for e in inside if e.kind is EventKind.BACKWARD], loop)
        gate = None
        conditional_unknown = False
        for update in updates:
            found, unknown = self._gate_of(update.site, loop, skips)
            if found is not None and gate is None:
                gate = found
            conditional_unknown = conditional_unknown or (found is None and unknown)
        if gate is not None and self._both_arms_update(gate, updates):
            # `if it % 2 == 0: opt_a.step() else: opt_b.step()`, DeepSpeed's `engine.step()` in both
            # arms: an update runs on every microbatch, the `if` chooses which, not when
            gate = None
            style = (LoopStyle.DEEPSPEED if all(u.role.role is Role.ENGINE for u in updates)
                     else LoopStyle.UNKNOWN)
        elif gate is not None:
            style = LoopStyle.GATED
        elif updates and not conditional_unknown:
            if any(any(f.node in contexts for f in u.site.frames) for u in updates):
                style = LoopStyle.ACCELERATE
            elif any(u.role.role is Role.ENGINE for u in updates):
                style = LoopStyle.DEEPSPEED
            else:
                style = LoopStyle.UNGATED
        elif updates:
            style = LoopStyle.UNKNOWN
        elif contexts:
            style = LoopStyle.ACCELERATE
        elif self._updates_after(loop):
            # several losses of one forward, each backpropagated once, are no microbatches
            style = LoopStyle.UNKNOWN if self._losses_of_one_forward(loop) else LoopStyle.MICRO_LOOP
        else:
            style = LoopStyle.NO_UPDATE
        group = Group(self.scope, loop, style, [], gate, accumulate_contexts=contexts,  # type: ignore[arg-type]
                                 skip_guards=skips)
        self._fill(group)
        return group

    # --- gates ------------------------------------------------------------------------------
    @staticmethod
    def _both_arms_update(gate: Gate, updates: list[Event]) -> bool:
        """Whether an update also runs on the gate's other branch (the ``else`` of its ``if``,
        or the body of its ``continue`` guard)."""
        for update in updates:
            for frame in update.site.frames:
                if frame.node is not gate.frame_node:
                    continue
                branch = "orelse" if frame.kind is FrameKind.GUARD else frame.branch
                if branch != gate.update_branch:
                    return True
        return False

    def _skip_guards(self, backwards: list[Event], loop: cst.CSTNode | None) -> frozenset[int]:
        """The ``continue`` guards inside ``loop`` that every backward runs behind and that test
        no boundary: a skipped iteration is no microbatch at all (no backward runs in it), so what
        runs behind such a guard runs on every microbatch."""
        common: set[int] | None = None
        guards: dict[int, Frame] = {}
        for backward in backwards:
            frames = backward.site.frames_inside(loop) if loop is not None else backward.site.frames
            own = {id(f.node): f for f in frames if f.kind is FrameKind.GUARD}
            guards.update(own)
            common = set(own) if common is None else common & set(own)
        return frozenset(key for key in common or ()
                         if loop is None or self.boundary_test(guards[key], loop) is None)

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
            if isinstance(node, cst.Call) and dotted(node.func) not in _PURE_CALLS:
                return False
            if isinstance(node, cst.Attribute) and node.attr.value in fw.accelerate.BOUNDARY_ATTRS:
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
        self._assigned[id(loop)] = names
        return names

    def _losses_of_one_forward(self, loop: cst.For | cst.While) -> bool:
        """Whether every backward of ``loop`` differentiates a graph built before it: its loss
        is computed in the loop only by tensor methods, subscripts and arithmetic (no call of a
        function or model: no forward per pass) from values bound before the loop, one of them
        a call's result (``out = model(x)``; ``losses = model(x)`` iterated as ``for loss in
        losses``), and the loop's own index (``range``). Such a loop iterates the losses of one
        batch (``(out.mean() * w[k]).backward(retain_graph=True)``), not microbatches."""
        start, end = self.scope.loop_spans[loop]
        backwards = [e for e in self.events if e.kind is EventKind.BACKWARD and start <= e.order < end]
        return bool(backwards) and all(self._one_forward_loss(event, loop, start) for event in backwards)

    def _one_forward_loss(self, event: Event, loop: cst.For | cst.While, start: int) -> bool:
        if event.loss is None or event.site.in_helper:
            return False
        targets = set(names_in(loop.target)) if isinstance(loop, cst.For) else set()
        indexes = isinstance(loop, cst.For) and isinstance(loop.iter, cst.Call) and dotted(loop.iter.func) == "range"
        work: list[tuple[cst.BaseExpression, int]] = [(event.loss, event.order)]
        forward = False
        for _ in range(_MAX_ONE_FORWARD_CHAIN):
            if not work:
                return forward
            expression, order = work.pop()
            names = _root_names(expression)
            if names is None:
                return False  # a function or model call in the loop: a forward per pass
            for name in names:
                if name in targets:
                    if not indexes:
                        work.append((loop.iter, start))  # `for loss in losses`: what is iterated
                    continue
                definition = reaching_assignment(self.scope, name, order)
                if definition is None:
                    continue  # a parameter (or a global): a value from before the loop
                if definition.value is None or definition.augmented is not None:
                    return False
                if definition.order >= start:
                    work.append((definition.value, definition.order))
                elif type(definition.value) is cst.Call:
                    forward = True  # `out = model(x)` before the loop
                elif not isinstance(definition.value, (cst.Integer, cst.Float)):
                    return False
        return False

    def _updates_after(self, loop: cst.CSTNode) -> bool:
        root = self._region_root(loop)
        _, end = self.scope.loop_spans[loop]
        return any(e.kind is EventKind.UPDATE and e.order >= end and (root is None or e.site.inside(root))
                   for e in self.events)

    def _region_root(self, loop: cst.CSTNode) -> cst.CSTNode | None:
        """The loop that encloses ``loop`` in this scope (None: the function body)."""
        inside = self.scope.within(loop)
        frames = inside[0].frames if inside else ()
        nodes = [f.node for f in frames]
        index = next((i for i, node in enumerate(nodes) if node is loop), len(frames))
        outer = [f.node for f in frames[:index] if f.kind is FrameKind.LOOP]
        return outer[-1] if outer else None

    # --- cadences ---------------------------------------------------------------------------
    def _fill(self, group: Group) -> None:
        loop = group.loop
        start, end = self.scope.loop_spans[loop]
        group.loop_sites = self.scope.within(loop)
        group.assigned = frozenset(self.assigned_in(loop))
        group.outer_loop = self._region_root(loop)
        if group.style is LoopStyle.MICRO_LOOP:
            group.region_root = self._region_root(loop)
            group.region_sites = (self.scope.within(group.region_root) if group.region_root is not None
                                  else self.scope.sites)
            low, high = group.region_sites[0].order, group.region_sites[-1].order + 1
            region = [e for e in self.events if low <= e.order < high]
            group.skip_guards = self._skip_guards([e for e in region if e.kind is EventKind.BACKWARD],
                                                  group.region_root)
        else:
            group.region_sites = group.loop_sites
            region = [e for e in self.events if start <= e.order < end]
        group.events = region
        root = group.region_root
        for event in region:
            if start <= event.order < end:
                cadence = self._cadence_in_loop(group, event)
            else:
                frames = event.site.frames_inside(root) if root is not None else event.site.frames
                cadence = Cadence.GROUP_START if event.order < start else Cadence.UPDATE
                for frame in frames:
                    if frame.kind is FrameKind.GUARD and id(frame.node) in group.skip_guards:
                        continue
                    if frame.kind is FrameKind.LOOP and not self._runs_backward(frame.node):
                        continue  # `for opt in optimizers: opt.step()`: each element once per group
                    if frame.kind in (FrameKind.HANDLER, FrameKind.MATCH, FrameKind.LOOP):
                        cadence = Cadence.UNKNOWN
                    elif frame.kind in (FrameKind.IF, FrameKind.GUARD) and not self.invariant(frame.test, root or loop):
                        if not (event.kind is EventKind.UPDATE and cadence is Cadence.UPDATE):
                            cadence = Cadence.UNKNOWN
                        # an update after the micro-loop under a per-pass condition (a training
                        # manager that steps some optimizers on odd passes only) still runs at most
                        # once per pass, after the group's last backward: a condition only skips
                        # updates, it never makes one run per microbatch
            group.cadences[id(event)] = cadence
        for site in group.loop_sites:
            if isinstance(site.augmented, cst.AddAssign) and not site.in_helper:
                nested = any(f.kind is FrameKind.LOOP for f in site.frames_inside(loop))
                group.increment_cadences[id(site)] = Cadence.UNKNOWN if nested else self._site_cadence(group, site)
        group.accumulates = {
            LoopStyle.GATED: True,
            LoopStyle.MICRO_LOOP: True,
            LoopStyle.UNGATED: False,
        }.get(group.style)

    def _runs_backward(self, loop: cst.CSTNode) -> bool:
        """Whether a loop of this scope (a helper's too) runs a backward: its passes are
        microbatches; a loop without one iterates something else (optimizers, parameters)."""
        span = self.scope.loop_spans.get(loop)
        if span is None:
            return True  # not walked here: assume the worst
        start, end = span
        return any(e.kind is EventKind.BACKWARD and start <= e.order < end for e in self.events)

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

    def _site_cadence(self, group: Group, site: Site) -> Cadence:
        """How often a site inside the microbatch loop runs, from its control flow alone
        (``MICROBATCH`` when no gate, boundary test or loop-variant condition encloses it)."""
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


def _root_names(expression: cst.BaseExpression) -> set[str] | None:
    """The names an expression reads at its roots (``out`` of ``out.mean() * (k + 1)``), or
    None when it calls anything but a method of a value (``model(x)``, ``self.model(x)``)."""
    attributes: set[int] = set()
    names: set[str] = set()
    for node in walk(expression):
        if isinstance(node, cst.Call):
            receiver = node.func.value if isinstance(node.func, cst.Attribute) else None
            if receiver is None or (isinstance(receiver, cst.Name) and receiver.value == "self") or \
                    method_name(node) in ("forward", "__call__"):
                return None
        elif isinstance(node, cst.Attribute):
            attributes.add(id(node.attr))
        elif isinstance(node, cst.Arg) and node.keyword is not None:
            attributes.add(id(node.keyword))
        elif isinstance(node, (cst.Lambda, cst.GeneratorExp, cst.ListComp, cst.SetComp, cst.DictComp)):
            return None
        elif isinstance(node, cst.Name) and id(node) not in attributes and node.value not in ("True", "False", "None"):
            names.add(node.value)
    return names


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


def _own_frames_list(frames: tuple[Frame, ...]) -> tuple[Frame, ...]:
    """The frames before the first inlined-helper frame (the scope's own control flow)."""
    for index, frame in enumerate(frames):
        if frame.kind is FrameKind.HELPER:
            return frames[:index]
    return frames


def is_accumulate_call(node: cst.CSTNode) -> bool:
    """Whether a ``with`` item is ``<accelerator>.accumulate(...)``."""
    return isinstance(node, cst.Call) and method_name(node) == fw.accelerate.ACCUMULATE_METHOD
