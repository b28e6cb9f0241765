"""The static training-loop model of one file: imports, roles, events, accumulation loops.

Rules read a :class:`FileModel`; they never walk statements themselves. Build one with
:func:`build_model`.
"""

from __future__ import annotations

from functools import cached_property

import libcst as cst

from accumlint import frameworks as fw
from accumlint.model import conventions, losses
from accumlint.model import ledger as ledgers
from accumlint.model.dataflow import home, loss_divisions, reaching_assignment, reaching_definitions
from accumlint.model.events import Event, classify
from accumlint.model.framework_reader import FrameworkReader
from accumlint.model.groups import Group, LoopAnalysis, LoopStyle
from accumlint.model.kinds import Cadence, EventKind, Role
from accumlint.model.names import ImportMap, dotted, last_segment, walk
from accumlint.model.parallel import DataParallel
from accumlint.model.roles import RoleInfo, Roles
from accumlint.model.sites import Scope, Site, walk_scopes
from accumlint.model.tail import LengthFact, Tail, length_arithmetic, tail_of

__all__ = [
    "Group", "Cadence", "Event", "EventKind", "FileModel", "LoopStyle", "Role", "RoleInfo", "Tail",
    "build_model",
]


class FileModel:
    """Everything the rules may ask about one module.

    Attributes: ``module`` (the LibCST tree), ``imports``, ``scopes`` (module top level
    first, then every function and method), ``roles``, ``events`` (per scope, execution
    order), ``loops`` (every microbatch loop found, with its style and cadences).
    """

    def __init__(self, module: cst.Module, project: object | None = None) -> None:
        self.module = module
        self.imports = ImportMap(module)
        self.scopes, self.functions = walk_scopes(module, project)
        self.roles = Roles(self.imports, self.scopes)
        self.events: dict[Scope, list[Event]] = {}
        for scope in self.scopes:
            classified = [event for event in (classify(site, self.roles) for site in scope.sites) if event is not None]
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
        ``return``), the call of this module to report it at and the helper's site holding it."""
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

    def tail(self, group: Group) -> Tail | None:
        """What ``group`` does with the last partial group of each pass (None: undecided)."""
        return tail_of(self, group)

    @cached_property
    def length_arithmetic(self) -> dict[str, LengthFact]:
        """Loader names (last segment) → what the module computes from ``len(loader)`` and A."""
        return length_arithmetic(self.module, self.is_accumulation_name)

    def divided_by_a(self, event: Event) -> bool:
        """Whether the loss of a backward ``event`` was divided by an A-named value."""
        return bool(self.divisions_by(event, self.is_accumulation_name))

    # --- losses -------------------------------------------------------------------------------
    def token_mean(self, event: Event) -> losses.TokenMean | None:
        """The mean-reduced token loss (with maskable labels) a backward differentiates, if shown."""
        return losses.token_mean(event, lambda name, site: self.reaching(name, site))

    def ledger(self, group: Group | None, event: Event) -> ledgers.Ledger:
        """Every factor between a backward's per-element loss and the applied gradient
        (:mod:`accumlint.model.ledger`); ``group`` None: the loss side only. Computed once."""
        key = (id(group), id(event))
        book = self._ledgers.get(key)
        if book is None:
            book = self._ledgers[key] = ledgers.ledger_of(self, group, event)
        return book

    @cached_property
    def _ledgers(self) -> dict[tuple[int, int], ledgers.Ledger]:
        return {}

    @cached_property
    def pads_labels_with_ignore(self) -> set[str]:
        """Evidence that this module's own collate code pads labels with -100 (see
        :func:`losses.pads_labels_with_ignore`); walked once per module."""
        return losses.pads_labels_with_ignore(self.module)

    @staticmethod
    def loss_history_in_view(group: Group, event: Event) -> bool:
        """Whether a backward inlined from a helper has its loss computed in view
        (:func:`accumlint.model.losses.loss_history_in_view`)."""
        return losses.loss_history_in_view(group, event)

    @staticmethod
    def never_scaled(event: Event) -> bool:
        """Whether the loss of a backward reaches it with no division or multiplication at all."""
        return losses.never_scaled(event)

    def may_rescale_gradients(self, group: Group) -> bool:
        """Whether the group's code hands a model's parameters to a function it cannot see
        (``self.divide_grads_(self.model.parameters(), n)`` with the function given from outside):
        it may rescale their gradients (:func:`accumlint.model.losses.hands_parameters_over`)."""
        events = {id(event.site) for event in group.events}
        return losses.hands_parameters_over([s for s in group.region_sites if id(s) not in events], self.imports)

    @staticmethod
    def scales_gradients(group: Group) -> bool:
        """Whether the group's code rescales ``.grad`` by hand (normalizing after the backward)."""
        return losses.scales_gradients(group.region_sites)

    def divided_after_backward(self, group: Group) -> list[tuple[cst.CSTNode, Event]]:
        """Divisions by A (or a microbatch count) of a loss whose backward already ran, in ``group``."""
        events = [e for e in self.events[group.scope] if e.site.inside(group.loop)]
        return [(node, event) for node, event in losses.divided_after_backward(group.scope, events, self._is_count)
                if event.site.inside(group.loop) and any(s.node is node or s.value is node for s in group.loop_sites)]

    def _is_count(self, divisor: cst.BaseExpression) -> bool:
        return self.is_accumulation_name(divisor) or (isinstance(divisor, cst.Call) and dotted(divisor.func) == "len")

    def retained_backwards(self, group: Group) -> list[Event]:
        """Backwards of ``group``'s loop with ``retain_graph=True`` that nothing backpropagates again."""
        if group.accumulates is not True:
            return []
        events = [e for e in group.events if group.in_loop(e) and self._fresh_graph(e, group)]
        return losses.retained_backwards(events, group.loop_sites)

    def _fresh_graph(self, event: Event, group: Group) -> bool:
        """Whether a backward's loss is computed anew in each pass of the loop (a forward call in
        the expression, or an assignment in the loop body), not a graph built once outside it."""
        if event.loss is None:
            return False
        if isinstance(event.loss, cst.Call) or any(isinstance(n, cst.Call) for n in walk(event.loss)):
            return True
        name = dotted(event.loss)
        definition = self.reaching(name, event.site) if name else None
        return (definition is not None and definition.inside(group.loop)
                and not isinstance(definition.node, (cst.For, cst.With)))

    @cached_property
    def parallel(self) -> DataParallel:
        """Data-parallel facts: replicas, the loader each loop reads, GPU and world counts,
        sums over replicas, BatchNorm layers (see :mod:`accumlint.model.parallel`)."""
        return DataParallel(self)

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

    def reaching_definitions(self, name: str, site: Site) -> tuple[list[Site], bool]:
        """Every assignment to ``name`` that may reach ``site`` (latest first), and whether the
        value ``name`` had on entry may reach it too (see :func:`dataflow.reaching_definitions`)."""
        return reaching_definitions(site.scope, name, site.order)

    def is_accumulation_name(self, expression: cst.BaseExpression | None) -> bool:
        """Whether an expression is named like the accumulation steps A (a name, an attribute, or
        a call of an A-named function: litgpt's ``train.gradient_accumulation_iters(devices)``),
        or is a name the module uses as A (:attr:`accumulation_aliases`)."""
        if isinstance(expression, cst.Call):
            expression = expression.func
        if expression is None:
            return False
        text = dotted(expression)
        return bool(conventions.ACCUMULATION_NAME.search(last_segment(text))) or (
            text is not None and text in self.accumulation_aliases)

    @cached_property
    def accumulation_aliases(self) -> frozenset[str]:
        """Names the module uses as A whatever they are called (the docs' own ``A``): the divisor
        of a microbatch loop's modulo gate (``(i + 1) % A == 0``) and the value passed for a
        keyword that configures A (``Trainer(accumulate_grad_batches=A)``,
        ``frameworks.ACCUMULATION_KEYWORDS``)."""
        names: set[str] = set()
        for group in self.loops:
            test = group.gate.test if group.gate is not None else None
            if test is not None and test.kind == "modulo" and isinstance(test.divisor, (cst.Name, cst.Attribute)):
                names.add(dotted(test.divisor) or "")
        for scope in self.scopes:
            for site in scope.sites:
                if site.call is None or site.in_helper:
                    continue
                for arg in site.call.args:
                    if (arg.keyword is not None and arg.keyword.value in fw.ACCUMULATION_KEYWORDS
                            and isinstance(arg.value, (cst.Name, cst.Attribute))):
                        names.add(dotted(arg.value) or "")
        names.discard("")
        return frozenset(names)

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


def _without_implementations(events: list[Event]) -> list[Event]:
    """``events`` less those inside an inlined call that is itself an event of the same kind:
    ``optimizer.zero_grad()`` on a project class whose ``zero_grad`` resets its inner optimizer
    and accumulator is one reset, the user's, not three more under names the user never wrote."""
    at_call = {(id(e.site.call), e.kind) for e in events if e.site.call is not None}
    return [e for e in events if e.site.inline is None
            or not any((id(inline.call), e.kind) in at_call for inline in e.site.inline.chain())]
