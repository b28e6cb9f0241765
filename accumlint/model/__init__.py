"""The static training-loop model of one file: imports, roles, events, accumulation loops.

Rules read a :class:`FileModel`; they never walk statements themselves. Build one with
:func:`build_model`.
"""

from __future__ import annotations

from functools import cached_property

import libcst as cst

from accumlint.model import frameworks as fw
from accumlint.model import ledger as ledgers
from accumlint.model import losses
from accumlint.model.dataflow import loss_divisions, reaching_assignment, reaching_definitions
from accumlint.model.events import Event, classify
from accumlint.model.groups import AccumulationLoop, LoopAnalysis, LoopStyle, is_accumulate_call
from accumlint.model.kinds import Cadence, EventKind, Role
from accumlint.model.names import ImportMap, dotted, int_value, keyword, last_segment, walk
from accumlint.model.parallel import DataParallel
from accumlint.model.roles import RoleInfo, Roles
from accumlint.model.sites import Scope, Site, walk_scopes
from accumlint.model.tail import LengthFact, Tail, length_arithmetic, tail_of

__all__ = [
    "AccumulationLoop", "Cadence", "Event", "EventKind", "FileModel", "LoopStyle", "Role", "RoleInfo", "Tail",
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
        self.loops: list[AccumulationLoop] = []
        for scope in self.scopes:
            analysis = LoopAnalysis(scope, self.events[scope],
                                    lambda node, scope=scope: self.is_accumulate_context(node, scope))
            self.loops.extend(analysis.analyse(loop) for loop in analysis.microbatch_loops())
        for group in self.loops:
            if group.accumulates is None:
                group.accumulates = self._framework_accumulates(group)

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
                if site.node is node or any(inner is node for inner in walk(site.node)):
                    return site.report, site
        return None

    def _framework_accumulates(self, group: AccumulationLoop) -> bool | None:
        """Whether a framework-managed loop's groups hold several microbatches (A > 1)."""
        if group.style is LoopStyle.ACCELERATE and group.accumulate_contexts:
            entry = self.accumulate_entry(group.accumulate_contexts[0], group.scope)
            if entry is None:
                return None
            accelerator, call = entry
            site = next(s for s in group.scope.sites if s.node is call)
            configured = self.accelerate_accumulation(self.roles.of(accelerator, site))
            if configured is None or configured is False:
                return None
            literal = int_value(configured)  # type: ignore[arg-type]
            return literal != 1 if literal is not None else True
        if group.style is LoopStyle.DEEPSPEED:
            return self.deepspeed_accumulates
        return None

    @cached_property
    def deepspeed_accumulates(self) -> bool | None:
        """A > 1 in a DeepSpeed config dict of this module (``"gradient_accumulation_steps"``)."""
        for node in walk(self.module):
            if (type(node) is cst.DictElement and isinstance(node.key, cst.SimpleString)
                    and node.key.evaluated_value == "gradient_accumulation_steps"):
                literal = int_value(node.value)
                return literal != 1 if literal is not None else True
        return None

    # --- framework facts --------------------------------------------------------------------
    def is_accumulate_context(self, node: cst.CSTNode, scope: Scope | None = None) -> bool:
        """Whether a ``with`` statement enters ``<accelerator>.accumulate(...)`` (directly, or in
        ``scope`` through a variable, see :meth:`accumulate_entry`)."""
        return isinstance(node, cst.With) and self.accumulate_entry(node, scope) is not None

    def accumulate_entry(self, node: cst.With, scope: Scope | None = None, every: bool = True,
                         ) -> tuple[cst.BaseExpression, cst.Call] | None:
        """The accelerator a ``with`` statement enters ``accumulate()`` of, and the call that names
        the accumulated models: ``with accelerator.accumulate(model):``, or through a variable of
        ``scope`` whose every definition holds ``accelerator.accumulate`` or a null context
        (``ctx = nullcontext if flag else accelerator.accumulate``; ``with ctx(model):``), so that
        accumulate() runs in some configurations and nothing else does in the others.
        ``every=False``: one definition or arm holding accumulate() is enough (it may be entered)."""
        for item in node.items:
            value = item.item
            if is_accumulate_call(value):
                return value.func.value, value  # type: ignore[attr-defined]
            if scope is None:
                continue
            order = scope.statement_orders.get(id(node))
            called = isinstance(value, cst.Call) and isinstance(value.func, cst.Name)
            name = value.func.value if called else dotted(value)  # type: ignore[attr-defined]
            if order is None or name is None:
                continue
            definitions, on_entry = reaching_definitions(scope, name, order)
            if (on_entry and every) or not definitions:
                continue
            arms = [arm for site in definitions for arm in _arms(site.value)]
            entered = [arm for arm in arms if (isinstance(arm, cst.Attribute) and arm.attr.value == "accumulate"
                                               if called else is_accumulate_call(arm))]
            if entered and (not every or all(arm in entered or _null_context(arm, called) for arm in arms)):
                first = entered[0]
                return (first.value, value) if called else (first.func.value, first)  # type: ignore[attr-defined]
        return None

    def accelerate_accumulation(self, info: RoleInfo) -> cst.BaseExpression | None | bool:
        """A configured on an Accelerator: the ``gradient_accumulation_steps=`` expression,
        ``False`` when the constructor is seen without it (A = 1 unless set by the launcher),
        ``None`` when the constructor is not visible."""
        if info.role is not Role.ACCELERATOR or info.origin is None:
            return None
        value = keyword(info.origin, "gradient_accumulation_steps")
        if value is None:
            return None if keyword(info.origin, "gradient_accumulation_plugin") is not None else False
        return value

    @cached_property
    def deepspeed_accumulation_names(self) -> set[str]:
        """Names bound to a DeepSpeed config's ``gradient_accumulation_steps`` (read from a
        config dict), e.g. ``gas = ds_config["gradient_accumulation_steps"]``."""
        names: set[str] = set()
        for scope in self.scopes:
            for site in scope.sites:
                value = site.value
                if (site.targets and isinstance(value, cst.Subscript) and len(value.slice) == 1
                        and isinstance(value.slice[0].slice, cst.Index)
                        and isinstance(value.slice[0].slice.value, cst.SimpleString)
                        and value.slice[0].slice.value.evaluated_value == "gradient_accumulation_steps"
                        and "deepspeed" in (dotted(value.value) or "")):
                    names.update(n for n in site.targets if n)
        return names

    @cached_property
    def deepspeed_unmanaged(self) -> bool:
        """Whether a DeepSpeed config in this module turns managed accumulation off
        (``"managed_gradient_accumulation": False``, deepspeed 0.19.x)."""
        for node in walk(self.module):
            # type(), not isinstance: this sees every node, and isinstance on LibCST's classes is slow
            if type(node) is cst.DictElement and isinstance(node.key, cst.SimpleString):
                if node.key.evaluated_value == fw.DEEPSPEED_UNMANAGED_KEY:
                    return not (isinstance(node.value, cst.Name) and node.value.value == "True")
        return False

    def lightning_automatic(self, class_def: cst.ClassDef) -> bool:
        """Whether a class is a LightningModule under automatic optimization (no
        ``self.automatic_optimization = False`` in any of its methods). Source: lightning
        2.6.6 ``core/module.py`` (``automatic_optimization`` defaults to True)."""
        if not any(last_segment(dotted(base.value)) in fw.LIGHTNING_MODULE_BASES for base in class_def.bases):
            return False
        if any(f.name.value == "automatic_optimization" for (owner, _), f in self.functions.methods.items()
               if owner is class_def) or _class_assigns(class_def, "automatic_optimization"):
            return False  # a property override or a class attribute: its value is not read here
        return not any(
            "self.automatic_optimization" in site.targets
            for scope in self.scopes if scope.class_def is class_def for site in scope.sites
        )

    def lightning_automatic_hooks(self) -> list[Scope]:
        """The microbatch hooks (``training_step``) of LightningModules under automatic
        optimization that run no backward themselves: Lightning runs the microbatch's backward
        after the hook returns (lightning 2.6.6 ``loops/optimization/automatic.py``
        ``Closure.closure``: ``training_step``, then ``zero_grad`` on a group's first batch, then
        backward), so whatever the hook does to ``.grad`` sees earlier microbatches only."""
        return [
            scope for scope in self.scopes
            if isinstance(scope.node, cst.FunctionDef) and scope.class_def is not None
            and scope.node in scope.loop_spans and self.lightning_automatic(scope.class_def)
            and not any(e.kind is EventKind.BACKWARD for e in self.events[scope])
        ]

    @staticmethod
    def scaler_enabled(info: RoleInfo) -> bool | None:
        """Whether a GradScaler scales the loss: False when built with ``enabled=False``, True
        when built without ``enabled=`` (or with ``True``), None when its constructor is not
        visible or ``enabled=`` is an expression (a flag: on in some runs). A disabled scaler
        returns the loss unscaled and its ``unscale_``/``update`` do nothing (torch 2.13.0
        ``amp/grad_scaler.py``)."""
        if info.role is not Role.SCALER or info.origin is None:
            return None
        value = keyword(info.origin, fw.SCALER_ENABLED_KEYWORD)
        if value is None:  # `enabled` is the 5th (torch.cuda.amp) or 6th (torch.amp) positional
            args = info.origin.args
            positionals = [a for a in args if a.keyword is None and not a.star]
            return True if len(positionals) < 5 and not any(a.star for a in args) else None
        if isinstance(value, cst.Name) and value.value in ("True", "False"):
            return value.value == "True"
        return None

    def clip_unscales(self, event: Event) -> bool | None:
        """Whether a clip event unscales GradScaler gradients itself before clipping: True for
        Accelerate's and Fabric's clips, False for ``torch.nn.utils.clip_grad_*`` and FSDP's
        ``clip_grad_norm_`` (``frameworks.py`` tables), None for a callee we cannot place."""
        if event.role.role in fw.UNSCALING_CLIP_OWNERS:
            return True
        if event.role.role in fw.PLAIN_CLIP_OWNERS:
            return False
        call = event.site.call
        if call is None:
            return None
        return False if self.roles.qualify_call(call).startswith(fw.PLAIN_CLIP_PREFIX) else None

    def accelerate_deepspeed(self, info: RoleInfo) -> bool:
        """Whether an Accelerator is visibly built for the DeepSpeed backend (``deepspeed_plugin=``):
        its ``clip_grad_norm_`` then clips nothing (``frameworks.ACCELERATE_DEEPSPEED_KEYWORDS``)."""
        return info.role is Role.ACCELERATOR and info.origin is not None and any(
            keyword(info.origin, name) is not None for name in fw.ACCELERATE_DEEPSPEED_KEYWORDS)

    def sync_decided_at_forward(self, info: RoleInfo) -> bool | None:
        """Whether the sync switch of this model is read at forward time (DDP, Accelerate and
        Fabric over DDP: torch 2.13.0 ``nn/parallel/distributed.py`` arms the reducer in
        forward) rather than in the backward hooks (FSDP1/FSDP2). For a model of unknown
        wrapper, the module's imports decide: DDP imported and no FSDP → True; else None."""
        if info.role in fw.FORWARD_DECIDES_SYNC:
            return True
        if info.role is Role.FSDP_MODEL:
            return False
        if info.role in (Role.MODEL, Role.UNKNOWN):
            names = set(self.imports.names.values())
            ddp = any(n.endswith("DistributedDataParallel") for n in names)
            fsdp = any(n.endswith(("FullyShardedDataParallel", "fully_shard")) for n in names)
            return True if ddp and not fsdp else None
        return None

    def tail(self, group: AccumulationLoop) -> Tail | None:
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

    def ledger(self, group: AccumulationLoop | None, event: Event) -> ledgers.Ledger:
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
    def never_scaled(event: Event) -> bool:
        """Whether the loss of a backward reaches it with no division or multiplication at all."""
        return losses.never_scaled(event)

    @staticmethod
    def scales_gradients(group: AccumulationLoop) -> bool:
        """Whether the group's code rescales ``.grad`` by hand (normalizing after the backward)."""
        return losses.scales_gradients(group.region_sites)

    def divided_after_backward(self, group: AccumulationLoop) -> list[tuple[cst.CSTNode, Event]]:
        """Divisions by A (or a microbatch count) of a loss whose backward already ran, in ``group``."""
        events = [e for e in self.events[group.scope] if e.site.inside(group.loop)]
        return [(node, event) for node, event in losses.divided_after_backward(group.scope, events, self._is_count)
                if event.site.inside(group.loop) and any(s.node is node or s.value is node for s in group.loop_sites)]

    def _is_count(self, divisor: cst.BaseExpression) -> bool:
        return self.is_accumulation_name(divisor) or (isinstance(divisor, cst.Call) and dotted(divisor.func) == "len")

    def retained_backwards(self, group: AccumulationLoop) -> list[Event]:
        """Backwards of ``group``'s loop with ``retain_graph=True`` that nothing backpropagates again."""
        if group.accumulates is not True:
            return []
        events = [e for e in group.events if group.in_loop(e) and self._fresh_graph(e, group)]
        return losses.retained_backwards(events, group.loop_sites)

    def _fresh_graph(self, event: Event, group: AccumulationLoop) -> bool:
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

    def hf_overrides_ignoring_count(self) -> list[cst.FunctionDef]:
        """HF Trainer subclasses' ``compute_loss`` overrides that accept ``num_items_in_batch`` and
        ignore it, with no declaration of how their loss is normalized and no division by A
        (transformers 5.24.0 trainer.py ``training_step``: the loss then counts as normalized)."""
        if not (self.imports.imports_module("transformers") or self.imports.imports_module("trl")):
            return []
        found: list[cst.FunctionDef] = []
        for scope in self.scopes:
            function, owner = scope.node, scope.class_def
            if not isinstance(function, cst.FunctionDef) or function.name.value != fw.HF_COMPUTE_LOSS or owner is None:
                continue
            if not any(self.imports.qualify(dotted(base.value)) in fw.HF_TRAINER_CLASSES for base in owner.bases):
                continue
            if not losses.ignores_parameter(function, losses.HF_COUNT_PARAMETER):
                continue
            if not losses.reads_key(function, "labels"):
                continue  # without labels in the batch the Trainer counts nothing and divides by A itself
            if losses.declares_attribute(owner, losses.HF_NORMALIZATION_ATTRS):
                continue
            if losses.trained_models_take_no_loss_kwargs(self.module, owner.name.value):
                continue  # the Trainer divides by A itself: a mean of means at most (ACC102's matter)
            returns = [s for s in scope.sites if s.is_return and not s.in_helper and s.value is not None]
            if any(loss_divisions(s.value, s, self.is_accumulation_name) for s in returns):
                continue  # `mean / A`: a mean of means at the right scale (ACC102's matter)
            found.append(function)
        return found

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
        """The assignment to ``name`` that reaches ``site`` (execution order, same scope)."""
        return reaching_assignment(site.scope, name, site.order, within, site.inline)

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
        return bool(fw.ACCUMULATION_NAME.search(last_segment(text))) or (
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


def _arms(value: cst.BaseExpression | None) -> list[cst.BaseExpression]:
    """The values a conditional expression may take (``a if c else b`` → a, b; nested too)."""
    if isinstance(value, cst.IfExp):
        return [*_arms(value.body), *_arms(value.orelse)]
    return [value] if value is not None else [cst.Name("None")]


def _null_context(value: cst.BaseExpression, called: bool) -> bool:
    """``contextlib.nullcontext`` (a factory, when the ``with`` calls the variable) or
    ``nullcontext()`` (a context, when it enters the variable itself)."""
    if not called:
        if not isinstance(value, cst.Call):
            return False
        value = value.func
    return last_segment(dotted(value)) in fw.NULL_CONTEXTS


def _class_assigns(class_def: cst.ClassDef, name: str) -> bool:
    """Whether the class body assigns the class attribute ``name`` (``automatic_optimization = False``)."""
    body = class_def.body.body if isinstance(class_def.body, cst.IndentedBlock) else ()
    for statement in body:
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                targets = ([t.target for t in small.targets] if isinstance(small, cst.Assign)
                           else [small.target] if isinstance(small, cst.AnnAssign) else [])
                if any(isinstance(t, cst.Name) and t.value == name for t in targets):
                    return True
    return False



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
