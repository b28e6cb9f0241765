"""Sync switches: the contexts and flags that make a data-parallel backward skip its
gradient all-reduce (DDP ``no_sync``, ``accelerator.no_sync``, Fabric ``no_backward_sync``).

Sources: torch 2.13.0 ``nn/parallel/distributed.py`` (``no_sync`` flips
``require_backward_grad_sync``; the reducer is armed in forward), accelerate 1.15.0
``accelerator.py`` (``no_sync(model)``), lightning 2.6.6 ``fabric.py``
(``no_backward_sync(model, enabled=...)``). And whether a wrapper sums the gradients of backwards
run outside its ``no_sync()`` (FSDP1 with CPU parameter offload does not: ACC407).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import libcst as cst

from accumlint import frameworks as fw
from accumlint.model.dataflow import reaching_assignment
from accumlint.model.names import calls_in, dotted, method_name, positional, receiver
from accumlint.model.scopes import FrameKind, Scope, Site
from accumlint.model.values import Construction, Obj

if TYPE_CHECKING:
    from accumlint.model.roles import Roles


@dataclass(frozen=True)
class NoSyncContext:
    """A ``with`` around a site that skips the all-reduce for ``synced`` (the model's dotted name);
    ``call``: the no-sync call itself."""

    node: cst.With
    call: cst.Call
    synced: str | None


def no_sync_contexts(site: Site, frames: tuple | None = None) -> list[NoSyncContext]:
    """The no-sync contexts among ``frames`` (default: all frames of ``site``), outermost first."""
    found: list[NoSyncContext] = []
    for frame in site.frames if frames is None else frames:
        if frame.kind is not FrameKind.WITH:
            continue
        for item in frame.node.items:  # type: ignore[attr-defined]
            call = _no_sync_call(item.item, site)
            if call is not None:
                found.append(NoSyncContext(frame.node, call, dotted(_synced_model(call))))  # type: ignore[arg-type]
    return found


def from_parameter(scope: Scope, name: str | None, site: Site, depth: int = 0) -> bool:
    """Whether ``name`` at ``site`` still holds (a scaling of) a parameter of the function:
    its value was computed by the caller."""
    if name is None or depth > 4 or not isinstance(scope.node, cst.FunctionDef):
        return False
    definition = reaching_assignment(scope, name, site.order)
    if definition is None:
        params = scope.node.params
        return any(p.name.value == name for p in (*params.posonly_params, *params.params, *params.kwonly_params))
    if definition.augmented is not None or definition.value is None:
        return False
    value = definition.value
    if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, (cst.Divide, cst.Multiply)):
        return from_parameter(scope, expression_root(value), definition, depth + 1)
    return False


def scope_name(name: str | None, site: Site, roles: Roles | None = None) -> str | None:
    """``name`` (dotted, as read at ``site``) in the scope's own names: a helper's parameter is its
    caller's argument (``model`` in ``step(ddp_model)`` is ``ddp_model``) and, given ``roles``, a
    trainer's attribute is the name its constructor was given (``trainer.model`` → ``model``). None
    where the helper's parameter is unknown or the name is the helper's own local."""
    if name is None:
        return None
    if site.inline is not None:
        try:
            expression = cst.parse_expression(name)
        except cst.ParserSyntaxError:
            return None
        value, where = site.inline.resolve(expression)
        name = dotted(value) if where is None else None
    if name is not None and roles is not None:
        name = roles.stored_name(name, site.scope, site.order)
    return name


def expression_root(expression: cst.BaseExpression | None) -> str | None:
    """The name an arithmetic expression starts from (``loss / A`` → ``loss``)."""
    while isinstance(expression, cst.BinaryOperation):
        expression = expression.left
    return dotted(expression)


def reduces_by_hand(sites: list[Site]) -> bool:
    """Whether the sites all-reduce gradients themselves (``dist.all_reduce(p.grad)``)."""
    return any(
        s.call is not None and (dotted(s.call.func) or "").rsplit(".", 1)[-1] in MANUAL_REDUCTIONS for s in sites
    )


#: the collectives that reduce gradients by hand (a run that calls one syncs its replicas itself)
MANUAL_REDUCTIONS = frozenset({"all_reduce", "all_reduce_coalesced", "reduce_scatter", "reduce_scatter_tensor",
                                "allreduce", "all_reduce_gradients", "allreduce_gradients"})


def _no_sync_call(item: cst.BaseExpression, site: Site) -> cst.Call | None:
    """The no-sync call a ``with`` item enters (directly, or through a name bound to an
    expression containing one)."""
    candidates = [item]
    name = dotted(item)
    if name is not None:
        definition = reaching_assignment(site.scope, name, site.order)
        if definition is not None and definition.value is not None:
            candidates.append(definition.value)
    return next((call for expression in candidates for call in calls_in(expression)
                 if method_name(call) in fw.NO_SYNC_METHODS), None)


def _synced_model(call: cst.Call) -> cst.BaseExpression | None:
    """The model whose sync the call switches: the receiver (``ddp.no_sync()``) or the first
    argument (``accelerator.no_sync(model)``, ``fabric.no_backward_sync(model)``)."""
    return positional(call, 0) or receiver(call)


def accumulates_outside_no_sync(built: object) -> bool | None:
    """Whether the data-parallel wrapper a run built with ``built`` (its
    :class:`~accumlint.model.values.Construction`) sums the gradients of backwards run outside its
    ``no_sync()``: False for FSDP1 with ``cpu_offload=CPUOffload(offload_params=True)``
    (``frameworks.pytorch.FSDP1_OFFLOAD_ACCUMULATES_OUTSIDE_NO_SYNC``, read in
    ``FSDP1_OFFLOAD_SOURCE``), True for FSDP1 without parameter offload, None where the wrapper is
    no FSDP1 or its offload setting is a value the run does not know (a config field, a spread
    of keyword arguments)."""
    torch = fw.pytorch
    if not isinstance(built, Construction) or built.callee not in torch.FSDP1_WRAPPERS:
        return None
    carrier = torch.CPU_OFFLOAD
    given, setting = built.argument(carrier.passed_as, torch.FSDP1_PARAMETERS)
    if given is None:
        return None
    if not given or setting is None:
        return True  # no cpu_offload: nothing offloaded
    if not (isinstance(setting, Obj) and setting.built is not None
            and setting.built.callee.rpartition(".")[2] == carrier.call):
        return None  # not a `CPUOffload(...)` the run built
    if carrier.keyword not in setting.attrs and setting.built.starred:
        return None
    offload = setting.attrs.get(carrier.keyword, torch.CPU_OFFLOAD_DEFAULT)
    if offload is True:
        return torch.FSDP1_OFFLOAD_ACCUMULATES_OUTSIDE_NO_SYNC
    return True if offload is False else None
