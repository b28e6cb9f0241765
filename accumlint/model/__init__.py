"""The training-loop model of one file: roles, events, groups, and the simulator that runs the loop.

Rules read a :class:`FileModel`; they never walk statements themselves. Build one with
:func:`build_model`.
"""

from __future__ import annotations

from functools import cached_property

import libcst as cst

from accumlint import frameworks as fw
from accumlint.model import boundary, conventions
from accumlint.model.dataflow import home, loss_divisions, reaching_assignment, reaching_definitions
from accumlint.model.events import Event, classify
from accumlint.model.framework_reader import FrameworkReader
from accumlint.model.groups import Group, LoopAnalysis, LoopStyle
from accumlint.model.kinds import Cadence, EventKind, Role
from accumlint.model.names import (
    ImportMap,
    dotted,
    int_value,
    last_segment,
    names_in,
    walk,
)
from accumlint.model.roles import RoleInfo, Roles
from accumlint.model.scopes import FrameKind, Scope, Site
from accumlint.model.statement_walk import walk_scopes

#: the core's types a rule or a family's analysis names, imported from here rather than from the
#: submodule that defines each
__all__ = [
    "Group", "Cadence", "Event", "EventKind", "FileModel", "FrameKind", "LoopStyle", "Role", "RoleInfo", "Scope",
    "Site", "build_model",
]


class FileModel:
    """Everything the rules may ask about one module.

    Attributes: ``module`` (the LibCST tree), ``imports``, ``scopes`` (module top level
    first, then every function and method), ``roles``, ``events`` (per scope, execution
    order), ``loops`` (every microbatch loop found, with its style and cadences).
    """

    def __init__(self, module: cst.Module, project: object | None = None) -> None:
        self.module = module
        #: what a family's analysis computes once per module, under a key of its own
        #: (``"tail.length_facts"``): the analyses that live with their rules keep their facts here
        self.memo: dict[str, object] = {}
        self.imports = ImportMap(module)
        self.scopes, self.functions = walk_scopes(module, project)
        self.roles = Roles(self.imports, self.scopes, project, self.functions)
        self.events: dict[Scope, list[Event]] = {}
        #: (id of a call, kind) whose inlined implementation decides itself when it acts (see
        #: :meth:`decides_inside`)
        self._decided_inside: set[tuple[int, EventKind]] = set()
        for scope in self.scopes:
            classified = [event for event in (classify(site, self.roles) for site in scope.sites) if event is not None]
            self._decided_inside |= _decided_inside(classified)
            self.events[scope] = _without_implementations(classified)
        #: id(reported node) → the helper events it stands for (a call of a helper that clips,
        #: steps and resets stands for all three)
        self.via: dict[int, list[Event]] = {}
        for events in self.events.values():
            for event in events:
                if event.site.report is not event.site.node:
                    self.via.setdefault(id(event.site.report), []).append(event)
        self.loops: list[Group] = []
        for scope in self.scopes:
            analysis = LoopAnalysis(scope, self.events[scope],
                                    lambda node, scope=scope: self.frameworks.is_accumulate_context(node, scope))
            self.loops.extend(analysis.analyse(loop) for loop in analysis.microbatch_loops())
        # a loop walked in its own function comes before the same loop inlined in its callers:
        # where both report one bug at one place, the first wording (the function's own names) is kept
        self.loops.sort(key=lambda group: group.scope.inlining_depth(group.loop))
        for group in self.loops:
            if group.accumulates is None:
                group.accumulates = self.frameworks.accumulates(group)

    def settle_groups(self) -> None:
        """Where a simulation decided a gated loop and its runs show no group
        (:meth:`accumlint.model.simulation.Simulation.trains_without_groups`), the loop does not
        accumulate: the test the reading of the code took for its group boundary is a training
        ratio (a generator stepped with its own backward on every n-th batch). Nor where the runs
        found the gate to start a training phase of its own (a delayed policy update: a loop of
        resets, backwards and updates every n-th environment step), whatever else they left open.
        Runs the simulator (the engine calls it before the rules, as a stage that may fail alone)."""
        for group in self.loops:
            if group.accumulates is True and group.style is LoopStyle.GATED and any(
                    simulation.covers(group.loop) and (simulation.trains_without_groups() or group.gate is not None
                                                       and simulation.gates_phases(group.gate.frame_node, group.loop))
                    for simulation in self.simulations):
                group.accumulates = False

    def divided_in_the_runs(self, group: Group, event: Event) -> bool:
        """Whether the decided runs that cover ``group``'s loop divide the loss of the backward at
        ``event`` in every run of A ≥ 2 (a known factor other than 1 on each: ``loss / A`` made in a
        helper of another module that the reading of this one does not follow)."""
        factors = [e.factor for simulation in self.simulations if simulation.decided and simulation.covers(group.loop)
                   for trace in simulation.traces if trace.configuration.accumulation > 1
                   for e in trace.events if e.kind is EventKind.BACKWARD and e.node is event.node]
        return bool(factors) and all(f is not None and abs(f - 1.0) > 1e-9 for f in factors)

    def gated_in_the_runs(self, group: Group, event: Event) -> bool:
        """Whether the decided runs that cover ``group``'s loop make the update at ``event`` on fewer
        microbatches than they draw, in every run of A ≥ 2, and at all in some (a boundary on a counter
        the reading does not follow: ``self.pending == self.accum`` in a method the loop calls)."""
        counts = [(sum(1 for e in trace.events if e.kind is EventKind.UPDATE
                       and (e.node is event.node or e.node is event.site.node)), trace.microbatches_drawn)
                  for simulation in self.simulations if simulation.decided and simulation.covers(group.loop)
                  for trace in simulation.traces if trace.configuration.accumulation > 1]
        return any(made for made, _ in counts) and all(made < drawn for made, drawn in counts)

    @cached_property
    def simulations(self) -> list:
        """The simulator's runs of this module's entry points, in the configurations the trace
        properties judge (:func:`accumlint.model.simulation.simulate` with ``judged_only``);
        computed once, for the rules that read traces."""
        from accumlint.model.simulation import simulate

        return simulate(self.functions, "", judged_only=True)

    @cached_property
    def local_nodes(self) -> frozenset[int]:
        """The ids of every node of this module's tree (computed for files with findings only)."""
        return frozenset(id(node) for node in walk(self.module))

    def report_for(self, node: cst.CSTNode) -> tuple[cst.CSTNode, Site] | None:
        """For a node of another module's code that a rule pointed at (a division in a helper's
        ``return``, a ``with`` statement of whose items a site is), the call of this module to report
        it at and the helper's site holding it."""
        for scope in self.scopes:
            for site in scope.sites:
                if site.inline is None or site.report is site.node:
                    continue
                if site.node is node or site.statement is node or any(inner is node for inner in walk(site.node)):
                    return site.report, site
        return None

    @cached_property
    def frameworks(self) -> FrameworkReader:
        """The framework-specific questions about this module (Accelerate's ``accumulate()``,
        a LightningModule's optimization mode, a DeepSpeed config, ...)."""
        return FrameworkReader(self)

    def divided_by_a(self, event: Event) -> bool:
        """Whether the loss of a backward ``event`` was divided by an A-named value."""
        return bool(self.divisions_by(event, self.is_accumulation_name))

    # --- frameworks ---------------------------------------------------------------------------
    def on_trainer_backend_path(self, event: Event) -> bool:
        """Whether ``event`` runs, in a method of an HF Trainer subclass, under a test of a flag
        ``Trainer.__init__`` sets from how it was built (``if self.do_grad_scaling:``,
        :data:`accumlint.frameworks.transformers.BACKEND_FLAGS`) that this module never assigns: a
        path of the framework's own configuration, which the subclass copied with its ``training_step``."""
        owner = event.site.scope.class_def
        if owner is None or not any(
                self.imports.qualify(dotted(base.value) or "") in fw.transformers.TRAINER_CLASSES
                or dotted(base.value) in fw.transformers.TRAINER_CLASS_NAMES for base in owner.bases):
            return False
        flags = {name for frame in event.site.frames if frame.kind is FrameKind.IF and frame.branch == "body"
                 and frame.test is not None for name in names_in(frame.test)} & fw.transformers.BACKEND_FLAGS
        return bool(flags) and not any(
            flag in site.targets for scope in self.scopes for site in scope.sites for flag in flags)

    # --- data flow --------------------------------------------------------------------------
    def divisions_by(self, event: Event, is_divisor) -> list[cst.CSTNode]:
        """Where the loss of a backward ``event`` was divided by a divisor ``is_divisor`` accepts."""
        return loss_divisions(event.loss, event.site, is_divisor)

    def reaching(self, name: str, site: Site, within: cst.CSTNode | None = None) -> Site | None:
        """The assignment to ``name`` that reaches ``site`` (execution order, same scope); in an
        inlined helper, a parameter it does not rebind is read as the caller's argument
        (:func:`~accumlint.model.dataflow.home`)."""
        name, namespace = home(site.scope, name, site.order, site.inline)
        return reaching_assignment(site.scope, name, site.order, within, namespace)

    def sole_reaching(self, name: str, site: Site) -> Site | None:
        """The assignment to ``name`` that reaches ``site`` on every path; None when several may
        (``if amp: loss /= A ... else: loss /= A`` are one division on either path, not two) or
        the value on entry may. Inside an inlined helper: its own straight-line assignment."""
        definition = self.reaching(name, site)
        if definition is None or site.inline is not None:
            return definition
        candidates, from_entry = self.reaching_definitions(name, site)
        return definition if candidates == [definition] and not from_entry else None

    def reaching_definitions(self, name: str, site: Site) -> tuple[list[Site], bool]:
        """Every assignment to ``name`` that may reach ``site`` (latest first), and whether the
        value ``name`` had on entry may reach it too (see :func:`dataflow.reaching_definitions`)."""
        return reaching_definitions(site.scope, name, site.order)

    def decides_inside(self, event: Event) -> bool:
        """Whether ``event`` is a call of a project implementation (inlined) that performs events
        of its kind only under a boundary test of its own (``wrapper.step(loss, i)`` whose body
        updates under ``if (i + 1) % self.accum == 0 or i == self.epoch_len - 1``): how often the
        call runs says nothing of how often that kind happens."""
        return event.site.call is not None and (id(event.site.call), event.kind) in self._decided_inside

    def is_accumulation_name(self, expression: cst.BaseExpression | None) -> bool:
        """Whether an expression is named like the accumulation steps A (a name, an attribute, or
        a call of an A-named function: litgpt's ``train.gradient_accumulation_iters(devices)``),
        or is a name or integer literal the module uses as A (:attr:`accumulation_aliases`)."""
        if isinstance(expression, cst.Call):
            expression = expression.func
        if expression is None:
            return False
        if isinstance(expression, cst.Integer):
            return expression.value in self.accumulation_aliases
        text = dotted(expression)
        return bool(conventions.ACCUMULATION_NAME.search(last_segment(text))) or (
            text is not None and text in self.accumulation_aliases)

    @cached_property
    def accumulation_aliases(self) -> frozenset[str]:
        """Names (and integer literals, as written) the module uses as A whatever they are called,
        bound by use: the divisor of a microbatch loop's modulo gate (``(i + 1) % A == 0``); the
        bound of a microbatch loop whose update follows it (``for _ in range(A)``) or a name given
        the length of what it iterates (``n = len(micro_batches)``); the value passed for a keyword
        or a config dict's key that configures A (``Trainer(accumulate_grad_batches=A)``,
        ``{"gradient_accumulation_steps": A}``); and the moduli the module groups microbatches by
        (:meth:`_grouping_divisors`). A loss divided by a value alone is no evidence: a constant
        scale divides a loss as well."""
        names: set[str] = set()
        for group in self.loops:
            test = group.gate.test if group.gate is not None else None
            if test is not None and test.kind == "modulo":
                names.add(_symbol(test.divisor))
            if group.style is LoopStyle.MICRO_LOOP:
                names.add(_symbol(_range_bound(group.loop)))
                names |= _length_names(group)
        for scope in self.scopes:
            for site in scope.sites:
                if site.call is None or site.in_helper:
                    continue
                for arg in site.call.args:
                    if arg.keyword is not None and arg.keyword.value in fw.ACCUMULATION_KEYWORDS:
                        names.add(_symbol(arg.value))
        for node in walk(self.module):  # a config dict's entry: `{"gradient_accumulation_steps": A}` (DeepSpeed)
            if (type(node) is cst.DictElement and isinstance(node.key, cst.SimpleString)
                    and node.key.evaluated_value in _ACCUMULATION_KEYS):
                names.add(_symbol(node.value))
        names |= self._grouping_divisors(names)
        names.discard("")
        return frozenset(names)

    def _grouping_divisors(self, known: set[str]) -> set[str]:
        """The moduli the module groups microbatches by where no gate already binds A: a modulo
        test ``i % X == 0`` in a microbatch loop around a gradient operation (a clip, a reset, an
        update: ``if n % X == 0: clip_grad_norm_(...)`` with the step outside), and a modulus of
        the length ``len(loader) % X == 0`` that also divides the loss before a backward of a
        microbatch loop."""
        found: set[str] = set()
        for group in self.loops:
            for event in group.events:
                if event.kind in _GRADIENT_KINDS and group.in_loop(event):
                    found |= {_symbol(test.right) for frame in event.site.frames_inside(group.loop)
                              if frame.kind is FrameKind.IF and frame.test is not None
                              for test in walk(frame.test)
                              if isinstance(test, cst.BinaryOperation) and isinstance(test.operator, cst.Modulo)}
        lengths = {_symbol(node.right) for node in walk(self.module)
                   if type(node) is cst.BinaryOperation and type(node.operator) is cst.Modulo  # (exact: hot)
                   and _counts_length(node.left)} - known - found - {""}
        for group in self.loops:
            for event in group.of_kind(EventKind.BACKWARD):
                if group.in_loop(event):
                    found |= {divisor for divisor in lengths if self.divisions_by(
                        event, lambda node, divisor=divisor: _symbol(node) == divisor)}
        return found

    @cached_property
    def call_sites(self) -> dict[int, Site]:
        """Every call's own site (not a copy inlined into a caller), by ``id`` of its ``cst.Call``."""
        return {id(site.call): site for scope in self.scopes for site in scope.sites
                if site.call is not None and not site.in_helper}

    def all_events(self) -> list[Event]:
        return [event for scope in self.scopes for event in self.events[scope]]


def build_model(module: cst.Module, project: object | None = None) -> FileModel:
    """Build the model of one parsed module; ``project`` (an
    :class:`accumlint.project.ProjectView`) lets it follow calls into other project modules."""
    return FileModel(module, project)


#: keys of a config dict that set A (DeepSpeed's config, a keyword spelled as a dict key)
_ACCUMULATION_KEYS = fw.ACCUMULATION_KEYWORDS | {fw.deepspeed.ACCUMULATION_KEY}
#: events under a modulo test that show the test groups microbatches (a clip, a reset, an update)
_GRADIENT_KINDS = frozenset({EventKind.UPDATE, EventKind.RESET, EventKind.CLIP})


def _symbol(node: cst.BaseExpression | None) -> str:
    """The key of a candidate A: a dotted name, or an integer literal above 1 as written; else ``""``."""
    if isinstance(node, cst.Integer):
        value = int_value(node)
        return node.value if value is not None and value > 1 else ""
    if isinstance(node, (cst.Name, cst.Attribute)):
        return dotted(node) or ""
    return ""


def _range_bound(loop: cst.For | cst.While) -> cst.BaseExpression | None:
    """``X`` of a loop ``for _ in range(X)``, else None."""
    return _range_bound_of(loop.iter) if isinstance(loop, cst.For) else None


def _range_bound_of(iterable: cst.BaseExpression) -> cst.BaseExpression | None:
    """``X`` of ``range(X)``, else None."""
    if (isinstance(iterable, cst.Call) and dotted(iterable.func) == "range" and len(iterable.args) == 1
            and iterable.args[0].keyword is None and not iterable.args[0].star):
        return iterable.args[0].value
    return None


def _length_names(group: Group) -> set[str]:
    """Where the group's function counts the microbatches a microbatch loop iterates (a plain
    name ``xs``): the names assigned ``len(xs)``, and ``X`` where ``xs = [... for _ in range(X)]``
    (a group drawn ahead: ``group = [next(it) for _ in range(A)]``)."""
    iterable = group.loop.iter if isinstance(group.loop, cst.For) else None
    if not isinstance(iterable, cst.Name):
        return set()
    found: set[str] = set()
    for site in group.scope.sites:
        if site.in_helper or site.augmented is not None or len(site.targets) != 1:
            continue
        value = site.value
        if (site.targets == (iterable.value,) and isinstance(value, cst.ListComp)
                and value.for_in.inner_for_in is None):
            found.add(_symbol(_range_bound_of(value.for_in.iter)))
        elif (isinstance(value, cst.Call) and dotted(value.func) == "len" and len(value.args) == 1
              and dotted(value.args[0].value) == iterable.value):
            found.add(site.targets[0] or "")
    found.discard("")
    return found


def _counts_length(node: cst.BaseExpression) -> bool:
    """``len(x)``: the length of a loader or dataset."""
    return isinstance(node, cst.Call) and dotted(node.func) == "len"


def _without_implementations(events: list[Event]) -> list[Event]:
    """``events`` less those inside an inlined call that is itself an event of the same kind:
    ``optimizer.zero_grad()`` on a project class whose ``zero_grad`` resets its inner optimizer
    and accumulator is one reset, the user's, not three more under names the user never wrote."""
    at_call = {(id(e.site.call), e.kind) for e in events if e.site.call is not None}
    return [e for e in events if e.site.inline is None
            or not any((id(inline.call), e.kind) in at_call for inline in e.site.inline.chain())]


def _decided_inside(events: list[Event]) -> set[tuple[int, EventKind]]:
    """(id of an inlined call, event kind) where the implementation performs that kind under a
    boundary test of its own (a wrapper's ``step(loss, i)`` that updates only under
    ``if (i + 1) % self.accum == 0``): the call is no such event on every call."""
    return {(id(inline.call), e.kind) for e in events if e.site.inline is not None
            for inline in e.site.inline.chain() if _under_boundary_test(e.site, inline.call)}


def _under_boundary_test(site: Site, call: cst.Call) -> bool:
    """Whether ``site`` runs, inside the implementation inlined at ``call``, under an ``if`` whose
    test has the shape of a group boundary (:func:`accumlint.model.boundary.analyze`)."""
    inside = False
    for frame in site.frames:
        if frame.kind is FrameKind.HELPER and frame.node is call:
            inside = True
        elif inside and frame.kind in (FrameKind.IF, FrameKind.GUARD) and frame.test is not None \
                and boundary.analyze(frame.test, lambda _name: None) is not None:
            return True
    return False
