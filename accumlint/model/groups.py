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

How one site is gated and how often it runs (boundary tests, flags, loop invariants) is
:mod:`accumlint.model.gate_analysis`; the loop styles are declared in :mod:`accumlint.model.kinds`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import libcst as cst

from accumlint import frameworks as fw
from accumlint.model import conventions
from accumlint.model.dataflow import reaching_assignment
from accumlint.model.events import Event
from accumlint.model.gate_analysis import PURE_CALLS, Gate, GateAnalysis
from accumlint.model.kinds import Cadence, EventKind, LoopStyle, Role
from accumlint.model.names import calls_in, dotted, int_value, last_segment, method_name, names_in, walk
from accumlint.model.roles import constructor_role, role_from_name
from accumlint.model.scopes import Frame, FrameKind, Scope, Site

#: assignments followed back from a loss to the forward it was computed from (one forward, many losses)
_MAX_ONE_FORWARD_CHAIN = 16


#: calls that read a value without changing anything or drawing anything new: the gate analysis's,
#: a mapping's ``get`` and arithmetic on numbers
_PURE_READS = PURE_CALLS | {"get", "min", "max", "abs"}


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
    #: how often each counter increment in the loop (``n += k``, in its helpers too) runs, by id of its site
    increment_cadences: dict[int, Cadence] = field(default_factory=dict)
    #: how often each attribute store in the loop (``obj.attr = v``, ``obj.attr += k``; in its helpers
    #: too) runs, by id of its site: a store to a framework object's own state (an engine's counter)
    store_cadences: dict[int, Cadence] = field(default_factory=dict)
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

    def cadence(self, event: Event) -> Cadence:
        """How often ``event`` runs relative to the group (``UNKNOWN`` when undecidable)."""
        return self.cadences.get(id(event), Cadence.UNKNOWN)

    def increment_cadence(self, site: Site) -> Cadence:
        """How often a counter increment ``n += k`` in the loop (or an inlined helper) runs
        (``UNKNOWN`` when undecidable, or for a site that is no such increment)."""
        return self.increment_cadences.get(id(site), Cadence.UNKNOWN)

    def store_cadence(self, site: Site) -> Cadence:
        """How often an attribute store ``obj.attr = v`` (or ``obj.attr += k``) in the loop or an
        inlined helper runs (``UNKNOWN`` when undecidable, or for a site that stores no attribute)."""
        return self.store_cadences.get(id(site), Cadence.UNKNOWN)

    @property
    def iterable(self) -> cst.Name | cst.Attribute | None:
        """What a ``for`` microbatch loop iterates, through ``enumerate``/``tqdm``/``iter``
        (``for i, b in enumerate(tqdm(train_loader))`` → ``train_loader``); None for a
        ``while`` loop or a computed iterable (``range(n)``, ``zip(a, b)``)."""
        if not isinstance(self.loop, cst.For):
            return None
        iterable = conventions.passed_over(self.loop.iter)
        return iterable if isinstance(iterable, (cst.Name, cst.Attribute)) else None

    def varies(self, name: str) -> bool:
        """Whether ``name``, assigned inside the microbatch loop, may change between microbatches:
        some assignment gives it a value that reads a loop-variant name or calls anything but a
        read (:data:`_PURE_READS`); re-reading one config entry every microbatch
        (``A = cfg["runner"].get("accum")``) leaves it fixed. False for a name not assigned here."""
        if name not in self.assigned:
            return False
        for site in self.loop_sites:
            if name not in site.targets:
                continue
            value = site.value_of(name) if site.augmented is None else None
            if value is None or (set(names_in(value)) & self.assigned) or any(
                    (method_name(call) or dotted(call.func)) not in _PURE_READS for call in calls_in(value)):
                return True
        return False

    def redrawn_at_update(self, name: str, counter: str) -> bool:
        """Whether every assignment of ``name`` in the loop runs in the update's branch of the gate,
        where ``counter`` (the gate's count of microbatches) is also set to a literal: each group
        is counted afresh for the value chosen at its start (a group size drawn per update)."""
        gate = self.gate
        if gate is None:
            return False

        def at_update(site: Site) -> bool:
            return any(f.node is gate.frame_node and f.kind is FrameKind.IF and f.branch == gate.update_branch
                       for f in site.frames)

        writes = [s for s in self.loop_sites if name in s.targets]
        restarts = [s for s in self.loop_sites if counter in s.targets and s.augmented is None and at_update(s)
                    and int_value(s.value_of(counter)) is not None]
        return bool(writes) and bool(restarts) and all(at_update(s) for s in writes)

    def of_kind(self, *kinds: EventKind) -> list[Event]:
        return [event for event in self.events if event.kind in kinds]

    def in_loop(self, event: Event) -> bool:
        return event.site.inside(self.loop)


class LoopAnalysis(GateAnalysis):
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
            if inner and inner[-1] not in loops and inner[-1] in self.scope.loop_spans \
                    and not self._after_group_update(event, inner[-1]):
                loops.append(inner[-1])  # type: ignore[arg-type]
        return loops

    def _after_group_update(self, event: Event, loop: cst.CSTNode) -> bool:
        """Whether the backward ``event``, whose innermost loop is ``loop``, runs after a loop
        inside ``loop`` that backpropagates and an update after that inner loop: each pass of
        ``loop`` runs a whole group, and ``event`` a backward of its own after the group's update
        (a curvature probe before its optimizer's estimate); it makes ``loop`` no loop of
        microbatches."""
        start, end = self.scope.loop_spans[loop]
        for inner, (low, high) in self.scope.loop_spans.items():
            if inner is loop or not start <= low < high <= event.order < end or not self._runs_backward(inner):
                continue
            if any(e.kind is EventKind.UPDATE and high <= e.order < event.order for e in self.events):
                return True
        return False

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
            increment = isinstance(site.augmented, cst.AddAssign)  # a helper's too: it may advance a caller's counter
            store = site.call is None and not site.is_return and any(t and "." in t for t in site.targets)
            if not (increment or store):
                continue
            nested = any(f.kind is FrameKind.LOOP for f in site.frames_inside(loop))
            if increment:
                group.increment_cadences[id(site)] = Cadence.UNKNOWN if nested else self._site_cadence(group, site)
            if store:
                group.store_cadences[id(site)] = (Cadence.UNKNOWN if nested
                                                  else self._site_cadence(group, site, user_groups=True))
        group.accumulates = {
            LoopStyle.GATED: True,
            LoopStyle.MICRO_LOOP: True,
            LoopStyle.UNGATED: False,
        }.get(group.style)
        if group.style is LoopStyle.MICRO_LOOP and iterates_one_microbatch(group, _hook_batch(group.scope)):
            group.accumulates = None  # the views of one microbatch: a sum of terms, or a group cut out of sight

    def _runs_backward(self, loop: cst.CSTNode) -> bool:
        """Whether a loop of this scope (a helper's too) runs a backward: its passes are
        microbatches; a loop without one iterates something else (optimizers, parameters)."""
        span = self.scope.loop_spans.get(loop)
        if span is None:
            return True  # not walked here: assume the worst
        start, end = span
        return any(e.kind is EventKind.BACKWARD and start <= e.order < end for e in self.events)


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


def _own_frames_list(frames: tuple[Frame, ...]) -> tuple[Frame, ...]:
    """The frames before the first inlined-helper frame (the scope's own control flow)."""
    for index, frame in enumerate(frames):
        if frame.kind is FrameKind.HELPER:
            return frames[:index]
    return frames


def is_accumulate_call(node: cst.CSTNode) -> bool:
    """Whether a ``with`` item is ``<accelerator>.accumulate(...)``."""
    return isinstance(node, cst.Call) and method_name(node) == fw.accelerate.ACCUMULATE_METHOD


#: calls that cut one batch into parts that together hold it once: a partition into microbatches
_PARTITIONS = frozenset({"split", "chunk", "tensor_split", "split_with_sizes", "array_split", "unbind"})
#: a name of microbatches or of their size (``micro_batches``, ``micro_bs``): parts cut for a group
_MICROBATCH_NAME = re.compile(r"micro", re.IGNORECASE)


def iterates_one_microbatch(group: Group, hook_batch: str | None) -> bool:
    """Whether a MICRO_LOOP group's loop iterates parts of one drawn microbatch that the code does not
    cut for a group: its iterable is read from the target of an enclosing loop of its scope, or from
    ``hook_batch`` (the batch a Lightning ``training_step`` is handed), with no A-named or
    microbatch-named value and no partition (``chunk``, ``split``, a strided range or slice) on the
    way, and the loop draws nothing itself (``for k, crop in enumerate(crops)``, ``range(len(crops)
    - 1)``): views of one microbatch (crops, augmentations) whose objective is the sum of their
    terms, not a group."""
    loop, scope = group.loop, group.scope
    if type(loop) is not cst.For or loop not in scope.loop_spans \
            or any(method_name(call) == "next" or dotted(call.func) == "next" for call in calls_in(loop.body)):
        return False
    start = scope.loop_spans[loop][0]
    work: list[tuple[cst.BaseExpression, int]] = [(loop.iter, 0)]
    seen: set[str] = set()
    rooted = False
    while work:
        expression, depth = work.pop()
        called = {id(call.func) for call in calls_in(expression)}
        # (the keys a value is read under, `batch[self.modality_key]`, and the instance are not what is iterated)
        keys = {id(n) for sub in walk(expression) if type(sub) is cst.Subscript for element in sub.slice
                for n in walk(element)}
        for node in walk(expression):
            kind = type(node)
            if kind is cst.Call and (last_segment(dotted(node.func)) in _PARTITIONS or method_name(node) in _PARTITIONS
                                     or dotted(node.func) == "range" and len(node.args) == 3):
                return False
            if kind is cst.Slice and node.step is not None:
                return False
            text = dotted(node) if kind in (cst.Name, cst.Attribute) else None
            if text and (conventions.ACCUMULATION_NAME.search(last_segment(text)) or _MICROBATCH_NAME.search(text)):
                return False
        for node in walk(expression):
            if type(node) is not cst.Name or id(node) in called or id(node) in keys or node.value in seen \
                    or node.value in ("self", "cls"):
                continue
            seen.add(node.value)
            definition = reaching_assignment(scope, node.value, start)
            if definition is None or definition.node is scope.node:
                if node.value != hook_batch:
                    return False  # a parameter or a global: where it comes from is open
                rooted = True
            elif type(definition.node) is cst.For:
                outer = definition.node
                if not (outer in scope.loop_spans and outer is not loop
                        and scope.loop_spans[outer][0] <= start < scope.loop_spans[outer][1]
                        and _over_a_loader(outer, scope)):
                    return False  # (`for group in groups: for batch in group:`: an item that is a group)
                rooted = True  # a microbatch an enclosing loop drew from a loader
            elif definition.value is not None and depth < 4:
                work.append((definition.value, depth + 1))
            else:
                return False
    return rooted


def _over_a_loader(loop: cst.For, scope: Scope) -> bool:
    """Whether ``loop`` passes over a data loader, each item one microbatch: named for one
    (``train_loader``, through ``enumerate``/``tqdm``), or a name bound to a ``DataLoader(...)``."""
    iterable = conventions.passed_over(loop.iter)
    if type(iterable) is cst.Name:
        definition = reaching_assignment(scope, iterable.value, scope.loop_spans[loop][0])
        if definition is not None and type(definition.value) is cst.Call:
            iterable = definition.value
    if type(iterable) is cst.Call:
        return constructor_role(last_segment(dotted(iterable.func)), False) is Role.LOADER
    return iterable is not None and role_from_name(dotted(iterable)) is Role.LOADER


def _hook_batch(scope: Scope) -> str | None:
    """The name of the batch a framework hands ``scope`` once per microbatch (``batch`` of a
    LightningModule's ``training_step(self, batch, batch_idx)``, its class deriving from Lightning's
    directly or through the project's own base classes), else None."""
    node = scope.node
    if type(node) is not cst.FunctionDef or scope.class_def is None \
            or node.name.value not in fw.lightning.MICROBATCH_HOOKS:
        return None
    params = node.params.params
    return params[1].name.value if len(params) > 1 else None
