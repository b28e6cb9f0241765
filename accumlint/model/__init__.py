"""The static training-loop model of one file: imports, roles, events, accumulation loops.

Rules read a :class:`FileModel`; they never walk statements themselves. Build one with
:func:`build_model`.
"""

from __future__ import annotations

from functools import cached_property

import libcst as cst

from accumlint.model import frameworks as fw
from accumlint.model.dataflow import loss_divisions, reaching_assignment
from accumlint.model.events import Event, classify
from accumlint.model.groups import AccumulationLoop, LoopAnalysis, LoopStyle, is_accumulate_call
from accumlint.model.kinds import Cadence, EventKind, Role
from accumlint.model.names import ImportMap, children, dotted, int_value, keyword, last_segment
from accumlint.model.roles import RoleInfo, Roles
from accumlint.model.sites import Scope, Site, walk_scopes

__all__ = [
    "AccumulationLoop", "Cadence", "Event", "EventKind", "FileModel", "LoopStyle", "Role", "RoleInfo", "build_model",
]


class FileModel:
    """Everything the rules may ask about one module.

    Attributes: ``module`` (the LibCST tree), ``imports``, ``scopes`` (module top level
    first, then every function and method), ``roles``, ``events`` (per scope, execution
    order), ``loops`` (every microbatch loop found, with its style and cadences).
    """

    def __init__(self, module: cst.Module) -> None:
        self.module = module
        self.imports = ImportMap(module)
        self.scopes, self.functions = walk_scopes(module)
        self.roles = Roles(self.imports, self.scopes)
        self.events: dict[Scope, list[Event]] = {}
        for scope in self.scopes:
            classified = (classify(site, self.roles) for site in scope.sites)
            self.events[scope] = [event for event in classified if event is not None]
        self.loops: list[AccumulationLoop] = []
        for scope in self.scopes:
            analysis = LoopAnalysis(scope, self.events[scope], self.is_accumulate_context)
            self.loops.extend(analysis.analyse(loop) for loop in analysis.microbatch_loops())
        for group in self.loops:
            if group.accumulates is None:
                group.accumulates = self._framework_accumulates(group)

    def _framework_accumulates(self, group: AccumulationLoop) -> bool | None:
        """Whether a framework-managed loop's groups hold several microbatches (A > 1)."""
        if group.style is LoopStyle.ACCELERATE and group.accumulate_contexts:
            with_node = group.accumulate_contexts[0]
            call = next(item.item for item in with_node.items if is_accumulate_call(item.item))
            site = next(s for s in group.scope.sites if s.node is call)
            configured = self.accelerate_accumulation(self.roles.of(call.func.value, site))  # type: ignore[attr-defined]
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
        for node in _walk(self.module):
            if (type(node) is cst.DictElement and isinstance(node.key, cst.SimpleString)
                    and node.key.evaluated_value == "gradient_accumulation_steps"):
                literal = int_value(node.value)
                return literal != 1 if literal is not None else True
        return None

    # --- framework facts --------------------------------------------------------------------
    @staticmethod
    def is_accumulate_context(node: cst.CSTNode) -> bool:
        """Whether a ``with`` statement enters ``<accelerator>.accumulate(...)``."""
        return isinstance(node, cst.With) and any(is_accumulate_call(item.item) for item in node.items)

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
        for node in _walk(self.module):
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
        return not any(
            "self.automatic_optimization" in site.targets
            for scope in self.scopes if scope.class_def is class_def for site in scope.sites
        )

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

    # --- data flow --------------------------------------------------------------------------
    def divisions_by(self, event: Event, is_divisor) -> list[cst.CSTNode]:
        """Where the loss of a backward ``event`` was divided by a divisor ``is_divisor`` accepts."""
        return loss_divisions(event.loss, event.site, is_divisor)

    def reaching(self, name: str, site: Site, within: cst.CSTNode | None = None) -> Site | None:
        """The assignment to ``name`` that reaches ``site`` (execution order, same scope)."""
        return reaching_assignment(site.scope, name, site.order, within)

    @staticmethod
    def is_accumulation_name(expression: cst.BaseExpression | None) -> bool:
        """Whether an expression is named like the accumulation steps A."""
        return bool(fw.ACCUMULATION_NAME.search(last_segment(dotted(expression)) if expression is not None else ""))

    def all_events(self) -> list[Event]:
        return [event for scope in self.scopes for event in self.events[scope]]


def _walk(node: cst.CSTNode):
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(children(current))


def build_model(module: cst.Module) -> FileModel:
    """Build the model of one parsed module."""
    return FileModel(module)
