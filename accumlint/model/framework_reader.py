"""The model's framework-specific questions about one module (is this LightningModule under
automatic optimization, which A does this Accelerator carry, does this DeepSpeed config turn
managed accumulation off, ...), answered from the rows of :mod:`accumlint.frameworks`.

They read LibCST trees, so they live here and not with the rows, which the LibCST-free runtime
guard imports. :class:`accumlint.model.FileModel` keeps only framework-neutral questions and
holds one :class:`FrameworkReader` as ``model.frameworks``. The sources cited below are the
framework modules' (their ``VERSION``).
"""

from __future__ import annotations

import weakref
from functools import cached_property
from typing import TYPE_CHECKING

import libcst as cst

from accumlint import frameworks as fw
from accumlint.model import conventions
from accumlint.model.closures import hand_gated_modules
from accumlint.model.dataflow import arithmetic, reaching_definitions, value_history
from accumlint.model.events import Event
from accumlint.model.groups import Group, LoopStyle, is_accumulate_call
from accumlint.model.kinds import EventKind, Evidence, Role
from accumlint.model.names import dotted, int_value, keyword, last_segment, positional, string_key, walk
from accumlint.model.owned_loops import lightning_accumulates
from accumlint.model.roles import RoleInfo, Roles
from accumlint.model.scopes import Scope, Site
from accumlint.model.statement_walk import is_microbatch_hook

if TYPE_CHECKING:
    from accumlint.model import FileModel


#: ``call_keyword``'s answer when a call visibly passes no such keyword
_ABSENT = object()


class FrameworkReader:
    """Framework facts of one :class:`FileModel`, each read from the tree through a framework row."""

    def __init__(self, model: FileModel) -> None:
        # a weak proxy: the model holds its reader, and a cycle would keep the tree alive
        self.model: FileModel = weakref.proxy(model)

    def accumulates(self, group: Group) -> bool | None:
        """Whether a framework-managed loop's groups hold several microbatches (A > 1)."""
        if group.style is LoopStyle.ACCELERATE:
            configured = self._accumulate_configured(group)
            if configured is None or configured is False:
                return None
            literal = int_value(configured)  # type: ignore[arg-type]
            return literal != 1 if literal is not None else True
        if group.style is LoopStyle.DEEPSPEED:
            return self.deepspeed_accumulates
        return None

    def accumulation_unset(self, group: Group) -> bool:
        """Whether an Accelerate loop's ``accumulate()`` belongs to an Accelerator built, in view,
        without ``gradient_accumulation_steps``: Accelerate's default is one microbatch per group
        (a launcher may still set more; the code does not show it)."""
        return group.style is LoopStyle.ACCELERATE and self._accumulate_configured(group) is False

    def _accumulate_configured(self, group: Group) -> cst.BaseExpression | None | bool:
        """:meth:`accelerate_accumulation` of the accelerator whose ``accumulate()`` the loop enters."""
        if not group.accumulate_contexts:
            return None
        entry = self.accumulate_entry(group.accumulate_contexts[0], group.scope)
        if entry is None:
            return None
        accelerator, call = entry
        site = next(s for s in group.scope.sites if s.node is call)
        return self.accelerate_accumulation(self.model.roles.of(accelerator, site))

    @cached_property
    def deepspeed_accumulates(self) -> bool | None:
        """Whether a DeepSpeed config of this module, else of a checked module that imports its
        trainer class (the script that builds the engine), sets ``"gradient_accumulation_steps"``
        (a dict's entry, or ``conf["gradient_accumulation_steps"] = ...``) to more than 1: False
        where every value it is set to is the literal 1, None where no config sets it."""
        key = fw.deepspeed.ACCUMULATION_KEY
        for module in (self.model.module, *self.model.roles.importer_modules):
            values = []
            for node in walk(module):
                # type(), not isinstance: this sees every node, and isinstance on LibCST's classes is slow
                if type(node) is cst.DictElement and isinstance(node.key, cst.SimpleString) \
                        and node.key.evaluated_value == key:
                    values.append(node.value)
                elif type(node) is cst.Assign and any(string_key(t.target) == key for t in node.targets):
                    values.append(node.value)
            if values:
                return any(int_value(value) != 1 for value in values)
        return None


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
        ``every=False``: one definition or arm holding accumulate() is enough (it may be entered).
        In an inlined helper the variable is read through its parameters where the caller binds it
        (``step(ctx, ...)`` entering ``with ctx(model):``; ``step(accelerator.accumulate(model))``)."""
        for item in node.items:
            value = item.item
            if is_accumulate_call(value):
                return value.func.value, value  # type: ignore[attr-defined]
            if scope is None:
                continue
            order = scope.statement_orders.get(id(node))
            called = isinstance(value, cst.Call) and isinstance(value.func, (cst.Name, cst.Attribute))
            read = value.func if called else value  # type: ignore[attr-defined]
            if order is None:
                read, order = _through_helper(read, node, scope, self.model.roles)
                method = fw.accelerate.ACCUMULATE_METHOD
                if called and isinstance(read, cst.Attribute) and read.attr.value == method:
                    return read.value, value  # `step(accelerator.accumulate, ...)`: entered directly
                if not called and is_accumulate_call(read):
                    return read.func.value, read  # type: ignore[attr-defined]
            name = dotted(read) if read is not None else None
            if order is None or name is None:
                continue
            definitions, on_entry = reaching_definitions(scope, name, order)
            if (on_entry and every) or not definitions:
                continue
            arms = [arm for site in definitions for arm in _arms(site.value)]
            method = fw.accelerate.ACCUMULATE_METHOD
            entered = [arm for arm in arms if (isinstance(arm, cst.Attribute) and arm.attr.value == method
                                               if called else is_accumulate_call(arm))]
            if entered and (not every or all(arm in entered or _null_context(arm, called) for arm in arms)):
                first = entered[0]
                return (first.value, value) if called else (first.func.value, first)  # type: ignore[attr-defined]
        return None

    def accelerate_accumulation(self, info: RoleInfo) -> cst.BaseExpression | None | bool:
        """A configured on an Accelerator: the ``gradient_accumulation_steps=`` expression (given
        directly, through ``**options`` bound to a dict in the same scope, or as the ``num_steps``
        of a ``GradientAccumulationPlugin`` passed as ``gradient_accumulation_plugin=``),
        ``False`` when the constructor is seen without it (A = 1 unless set by the launcher),
        ``None`` when the constructor is not visible or a ``**`` argument or plugin hides it."""
        if info.role is not Role.ACCELERATOR or info.origin is None:
            return None
        value = self.call_keyword(info.origin, fw.accelerate.ACCUMULATION_KEYWORD)
        if value is not _ABSENT:
            return value  # type: ignore[return-value]
        plugin = self.call_keyword(info.origin, fw.accelerate.PLUGIN_KEYWORD)
        if plugin is _ABSENT:
            return False
        return self._carried(plugin, info.origin, fw.accelerate.ACCUMULATION_PLUGIN) if plugin is not None else None

    def mmengine_accumulation(self, info: RoleInfo) -> cst.BaseExpression | None | bool:
        """A configured on an mmengine optimizer wrapper: the ``accumulative_counts=`` expression
        of its visible ``OptimWrapper(...)`` constructor (``False`` when the constructor passes
        none: A = 1), or, for a wrapper the framework hands over (a ``train_step`` parameter),
        the ``accumulative_counts`` of the module's wrapper config dicts
        (``dict(type='OptimWrapper', accumulative_counts=A)``) when they all agree. ``None``
        when undecided (no constructor or config in view, a ``**`` argument, configs that differ)."""
        if info.role is not Role.OPTIM_WRAPPER:
            return None
        if info.origin is not None:
            value = self.call_keyword(info.origin, fw.mmengine.ACCUMULATION_KEYWORD)
            return False if value is _ABSENT else value  # type: ignore[return-value]
        if info.evidence is not Evidence.CONSTRUCTOR:
            return None  # a name alone: which wrapper it is (and its A) is not in view
        configured = self._mmengine_configs
        texts = {self.model.module.code_for_node(value) for value in configured}
        return configured[0] if len(texts) == 1 else None

    @cached_property
    def _mmengine_configs(self) -> list[cst.BaseExpression]:
        """The ``accumulative_counts`` values of the module's wrapper config dicts (``dict(...)``
        calls and dict displays whose ``type`` names an mmengine wrapper class)."""
        found: list[cst.BaseExpression] = []
        mm = fw.mmengine
        for node in walk(self.model.module):
            entries: dict[str, cst.BaseExpression] = {}
            if type(node) is cst.Call and dotted(node.func) == "dict":
                entries = {a.keyword.value: a.value for a in node.args if a.keyword is not None}
            elif type(node) is cst.Dict:
                entries = {e.key.evaluated_value: e.value for e in node.elements  # type: ignore[misc]
                           if isinstance(e, cst.DictElement) and isinstance(e.key, cst.SimpleString)}
            kind = entries.get(mm.CONFIG_TYPE_KEY)
            if isinstance(kind, cst.SimpleString) and kind.evaluated_value in mm.WRAPPER_CLASSES or (
                    kind is not None and last_segment(dotted(kind)) in mm.WRAPPER_CLASSES):
                value = entries.get(mm.ACCUMULATION_KEYWORD)
                if value is not None:
                    found.append(value)
        return found

    def call_keyword(self, call: cst.Call, name: str) -> cst.BaseExpression | object | None:
        """The value ``call`` passes for the keyword ``name``: given directly, or through a
        ``**options`` argument whose ``options`` is bound in the call's scope to a dict display
        or a ``dict(...)`` call that holds the key. :data:`_ABSENT` when the call visibly passes
        none; ``None`` when a ``**`` argument may hold it (unresolved, or a dict without the key
        that later code may fill in)."""
        value = keyword(call, name)
        if value is not None:
            return value
        hidden = False
        for arg in call.args:
            if arg.star != "**":
                continue
            found = self._mapping_value(self._bound_value(arg.value, call), name)
            if found is not None:
                return found
            hidden = True
        return None if hidden else _ABSENT

    def _bound_value(self, expression: cst.BaseExpression, near: cst.Call) -> cst.BaseExpression | None:
        """``expression`` itself, or the value a plain name is assigned where ``near`` runs."""
        if not isinstance(expression, cst.Name):
            return expression
        site = self.model.call_sites.get(id(near))
        definition = self.model.reaching(expression.value, site) if site is not None else None
        return definition.value if definition is not None else None

    @staticmethod
    def _mapping_value(mapping: cst.BaseExpression | None, name: str) -> cst.BaseExpression | None:
        """The value a dict display (``{"name": v}``) or ``dict(name=v)`` gives the key ``name``."""
        if isinstance(mapping, cst.Dict):
            for element in mapping.elements:
                if (isinstance(element, cst.DictElement) and isinstance(element.key, cst.SimpleString)
                        and element.key.evaluated_value == name):
                    return element.value
        if isinstance(mapping, cst.Call) and dotted(mapping.func) == "dict":
            return keyword(mapping, name)
        return None

    def _carried(self, value: cst.BaseExpression, near: cst.Call, carrier: fw.contracts.ConfigCarrier,
                 ) -> cst.BaseExpression | None:
        """The setting a carrier object passes on (``GradientAccumulationPlugin(num_steps=A)`` → A),
        built in the argument or bound to a name where ``near`` runs; None when not shown."""
        built = self._bound_value(value, near)
        if not isinstance(built, cst.Call) or last_segment(dotted(built.func)) != carrier.call:
            return None
        given = keyword(built, carrier.keyword) or positional(built, carrier.position)
        return given

    @cached_property
    def deepspeed_accumulation_names(self) -> set[str]:
        """Names bound to a DeepSpeed config's ``gradient_accumulation_steps`` (read from a
        config dict), e.g. ``gas = ds_config["gradient_accumulation_steps"]``."""
        names: set[str] = set()
        for scope in self.model.scopes:
            for site in scope.sites:
                value = site.value
                if (site.targets and isinstance(value, cst.Subscript)
                        and string_key(value) == fw.deepspeed.ACCUMULATION_KEY
                        and "deepspeed" in (dotted(value.value) or "")):
                    names.update(n for n in site.targets if n)
        return names

    @cached_property
    def deepspeed_unmanaged(self) -> bool:
        """Whether a DeepSpeed config in this module turns managed accumulation off
        (``"managed_gradient_accumulation": False``, deepspeed 0.19.x)."""
        for node in walk(self.model.module):
            # type(), not isinstance: this sees every node, and isinstance on LibCST's classes is slow
            if type(node) is cst.DictElement and isinstance(node.key, cst.SimpleString):
                if node.key.evaluated_value == fw.deepspeed.UNMANAGED_KEY:
                    return not (isinstance(node.value, cst.Name) and node.value.value == "True")
        return False

    def lightning_automatic(self, class_def: cst.ClassDef) -> bool:
        """Whether a class is a LightningModule under automatic optimization (no
        ``self.automatic_optimization = False`` in any of its methods). Source: lightning
        2.6.6 ``core/module.py`` (``automatic_optimization`` defaults to True)."""
        writes = self._optimization_writes(class_def, only_base=False)
        return writes is not None and not writes

    def lightning_manual(self, class_def: cst.ClassDef) -> bool:
        """Whether a class is a LightningModule under manual optimization, by the code itself: its
        only base is ``LightningModule`` and its methods set ``self.automatic_optimization = False``,
        never another value. Source: lightning 2.6.6 ``core/module.py`` (``automatic_optimization``
        defaults to True)."""
        writes = self._optimization_writes(class_def, only_base=True)
        return bool(writes) and all(isinstance(v, cst.Name) and v.value == "False" for v in writes)

    def lightning_divides_returned_loss(self, class_def: cst.ClassDef) -> bool:
        """Whether Lightning divides the loss a LightningModule's ``training_step`` returns by A: under
        automatic optimization it does (by ``accumulate_grad_batches``), unless the module accumulates
        by hand in its own ``optimizer_step`` gate with no ``Trainer`` in view that sets A > 1 (then
        Lightning's A is 1 and a division in the hook is the module's own normalisation). Source:
        lightning 2.6.6 ``loops/optimization/automatic.py`` (``ClosureResult.from_training_step_output``
        divides the closure loss by ``trainer.accumulate_grad_batches``)."""
        if not self.lightning_automatic(class_def):
            return False
        return id(class_def) not in hand_gated_modules(self.model) or lightning_accumulates(self.model)

    def _optimization_writes(self, class_def: cst.ClassDef, only_base: bool) -> list[cst.BaseExpression | None] | None:
        """The values a LightningModule's methods assign to ``self.automatic_optimization``; None
        where the class is no LightningModule (``only_base``: or has other bases too) or the value is
        not read here (a property override or a class attribute)."""
        bases = [last_segment(dotted(base.value)) in fw.lightning.MODULE_BASES for base in class_def.bases]
        if not (all(bases) and len(bases) == 1 if only_base else any(bases)):
            return None
        attribute = fw.lightning.AUTOMATIC_OPTIMIZATION_ATTR
        if any(f.name.value == attribute for (owner, _), f in self.model.functions.methods.items()
               if owner is class_def) or _class_assigns(class_def, attribute):
            return None
        return [site.value for scope in self.model.scopes if scope.class_def is class_def
                for site in scope.sites if f"self.{attribute}" in site.targets]

    def lightning_automatic_hooks(self) -> list[Scope]:
        """The microbatch hooks (``training_step``) of LightningModules under automatic
        optimization that run no backward themselves: Lightning runs the microbatch's backward
        after the hook returns (lightning ``loops/optimization/automatic.py``
        ``Closure.closure``: ``training_step``, then ``zero_grad`` on a group's first batch, then
        backward), so whatever the hook does to ``.grad`` sees earlier microbatches only."""
        return [
            scope for scope in self.model.scopes
            if isinstance(scope.node, cst.FunctionDef) and scope.class_def is not None
            and scope.node in scope.loop_spans and is_microbatch_hook(scope.node, scope.class_def)
            and self.lightning_automatic(scope.class_def)
            and not any(e.kind is EventKind.BACKWARD for e in self.model.events[scope])
        ]

    def scale_invariant_optimizers(self, group: Group) -> list[str] | None:
        """The constructors of the optimizers a group's updates step when each is a torch optimizer
        whose update ignores a constant factor on every gradient
        (:data:`accumlint.frameworks.pytorch.SCALE_INVARIANT_OPTIMIZERS`: ``torch.optim.AdamW``, ...),
        in update order; None when an update's optimizer is another or its constructor is not in view."""
        found: list[str] = []
        for update in group.of_kind(EventKind.UPDATE):
            info = update.role
            if info.role is not Role.OPTIMIZER or info.origin is None:
                return None
            qualified = self.model.roles.qualify_call(info.origin)
            if not qualified.startswith("torch.optim.") or last_segment(qualified) not in \
                    fw.pytorch.SCALE_INVARIANT_OPTIMIZERS:
                return None
            found.append(qualified)
        return found or None

    def learning_rate_divided_by_a(self, group: Group) -> cst.BinaryOperation | None:
        """The division by A in the learning rate of the optimizers a group's updates step
        (``SGD(params, lr=base / batch / A)``, or ``lr=base_lr`` with ``base_lr = cfg.lr / A``), when
        every update's optimizer is a ``torch.optim`` one built in view with such a learning rate:
        the update then applies the group's mean gradient times the base rate, a normalization by
        the group's size applied through the rate (the Darknet convention). ``None`` otherwise.
        The rate as constructed: a later write into ``param_groups`` is not read."""
        found: cst.BinaryOperation | None = None
        for update in group.of_kind(EventKind.UPDATE):
            info = update.role
            if info.role is not Role.OPTIMIZER or info.origin is None \
                    or not self.model.roles.qualify_call(info.origin).startswith("torch.optim."):
                return None
            site = self._site_of(info.origin)
            rate = keyword(info.origin, fw.pytorch.OPTIMIZER_LR_KEYWORD) \
                or positional(info.origin, fw.pytorch.OPTIMIZER_LR_POSITION)
            if site is None or rate is None:
                return None
            division = next((node for value, operator, _ in value_history(rate, site) if operator is None
                             for node in arithmetic(value)
                             if isinstance(node.operator, cst.Divide) and self._holds_a(node.right)), None)
            if division is None:
                return None
            found = found or division
        return found

    def _holds_a(self, divisor: cst.BaseExpression) -> bool:
        """A divisor that is A, or a product with A as a factor (``batch * A``)."""
        if isinstance(divisor, cst.BinaryOperation) and isinstance(divisor.operator, cst.Multiply):
            return self._holds_a(divisor.left) or self._holds_a(divisor.right)
        return self.model.is_accumulation_name(divisor)

    def _site_of(self, call: cst.Call) -> Site | None:
        """The site (in the scope that runs it, not inlined) whose value is ``call``."""
        for scope in self.model.scopes:
            for site in scope.sites:
                if site.value is call and not site.in_helper:
                    return site
        return None

    @staticmethod
    def scaler_enabled(info: RoleInfo) -> bool | None:
        """Whether a GradScaler scales the loss: False when built with ``enabled=False``, True
        when built without ``enabled=`` (or with ``True``), None when its constructor is not
        visible or ``enabled=`` is an expression (a flag: on in some runs). A disabled scaler
        returns the loss unscaled and its ``unscale_``/``update`` do nothing (torch 2.13.0
        ``amp/grad_scaler.py``)."""
        if info.role is not Role.SCALER or info.origin is None:
            return None
        value = keyword(info.origin, fw.pytorch.SCALER_ENABLED_KEYWORD)
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
        ``clip_grad_norm_`` (``accumlint.frameworks`` rows), None for a callee we cannot place."""
        if event.role.role in fw.UNSCALING_CLIP_OWNERS:
            return True
        if event.role.role in fw.pytorch.PLAIN_CLIP_OWNERS:
            return False
        call = event.site.call
        if call is None:
            return None
        return False if self.model.roles.qualify_call(call).startswith(fw.pytorch.PLAIN_CLIP_PREFIX) else None

    def accelerate_deepspeed(self, info: RoleInfo) -> bool:
        """Whether an Accelerator is visibly built for the DeepSpeed backend (``deepspeed_plugin=``):
        its ``clip_grad_norm_`` then clips nothing (``frameworks.ACCELERATE_DEEPSPEED_KEYWORDS``)."""
        return info.role is Role.ACCELERATOR and info.origin is not None and any(
            keyword(info.origin, name) is not None for name in fw.accelerate.DEEPSPEED_KEYWORDS)

    def sync_decided_at_forward(self, info: RoleInfo) -> bool | None:
        """Whether the sync switch of this model is read at forward time (DDP, Accelerate and
        Fabric over DDP: torch ``nn/parallel/distributed.py`` arms the reducer in
        forward) rather than in the backward hooks (FSDP1/FSDP2). For a model of unknown
        wrapper, the module's imports decide: DDP imported and no FSDP → True; else None."""
        if info.role in fw.FORWARD_DECIDES_SYNC:
            return True
        if info.role is Role.FSDP_MODEL:
            return False
        if info.role in (Role.MODEL, Role.UNKNOWN):
            names = set(self.model.imports.names.values())
            ddp = any(n.endswith("DistributedDataParallel") for n in names)
            fsdp = any(n.endswith(("FullyShardedDataParallel", "fully_shard")) for n in names)
            return True if ddp and not fsdp else None
        return None


def _through_helper(expression: cst.BaseExpression, node: cst.With, scope: Scope, roles: Roles,
                    ) -> tuple[cst.BaseExpression | None, int | None]:
    """``expression`` (the context a ``with`` of an inlined helper enters) rewritten into the
    scope's own names (a step object's attribute: the argument its constructor was given in this
    scope), and the position of the scope's own call that runs the helper, where the rewritten
    names are read; (None, None) when the ``with`` is no inlined helper's or a parameter's value
    is unknown."""
    site = next((s for s in scope.sites if s.inline is not None and (s.statement is node or s.inside(node))), None)
    if site is None or site.inline is None:
        return None, None
    resolved, where = site.inline.resolve(expression)
    if where is not None:
        return None, None
    outermost = site.inline.chain()[-1].call
    call_site = next((s for s in scope.sites if s.call is outermost and s.inline is None), None)
    if call_site is None:
        return None, None
    name = dotted(resolved)
    stored = roles.stored(name, scope, call_site.order) if name is not None else None
    if stored is not None and stored[1] is scope:
        return cst.parse_expression(stored[0]), call_site.order
    return resolved, call_site.order


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
    return last_segment(dotted(value)) in conventions.NULL_CONTEXTS


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


