"""Sync switches: the contexts and flags that make a data-parallel backward skip its
gradient all-reduce (DDP ``no_sync``, ``accelerator.no_sync``, Fabric ``no_backward_sync``).

Sources: torch 2.13.0 ``nn/parallel/distributed.py`` (``no_sync`` flips
``require_backward_grad_sync``; the reducer is armed in forward), accelerate 1.15.0
``accelerator.py`` (``no_sync(model)``), lightning 2.6.6 ``fabric.py``
(``no_backward_sync(model, enabled=...)``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import libcst as cst

from accumlint import frameworks as fw
from accumlint.model import conventions
from accumlint.model.dataflow import reaching_assignment, reaching_definitions
from accumlint.model.names import calls_in, dotted, keyword, last_segment, method_name, positional, receiver
from accumlint.model.sites import FrameKind, Scope, Site

if TYPE_CHECKING:
    from accumlint.model.roles import Roles


@dataclass(frozen=True)
class NoSyncContext:
    """A ``with`` around a site that skips the all-reduce for ``synced`` (the model's dotted name).

    ``unconditional``: entered on every pass (a direct call, no ``enabled=`` flag, not chosen
    by a conditional expression). ``call``: the no-sync call itself.
    """

    node: cst.With
    call: cst.Call
    synced: str | None
    unconditional: bool


def no_sync_contexts(site: Site, frames: tuple | None = None) -> list[NoSyncContext]:
    """The no-sync contexts among ``frames`` (default: all frames of ``site``), outermost first."""
    found: list[NoSyncContext] = []
    for frame in site.frames if frames is None else frames:
        if frame.kind is not FrameKind.WITH:
            continue
        for item in frame.node.items:  # type: ignore[attr-defined]
            call, unconditional = _no_sync_call(item.item, site)
            if call is not None:
                found.append(NoSyncContext(frame.node, call, dotted(_synced_model(call)), unconditional))  # type: ignore[arg-type]
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


def _no_sync_call(item: cst.BaseExpression, site: Site) -> tuple[cst.Call | None, bool]:
    """The no-sync call a ``with`` item enters (directly, or through a name bound to an
    expression containing one) and whether it is entered unconditionally."""
    candidates: list[tuple[cst.BaseExpression, bool]] = [(item, True)]
    name = dotted(item)
    if name is not None:
        definition = reaching_assignment(site.scope, name, site.order)
        if definition is not None and definition.value is not None:
            candidates.append((definition.value, False))
    for expression, direct in candidates:
        for call in calls_in(expression):
            if method_name(call) in fw.NO_SYNC_METHODS:
                unconditional = direct and isinstance(expression, cst.Call) and keyword(call, "enabled") is None
                return call, unconditional
    return None, False


@dataclass(frozen=True)
class ChosenNoSync:
    """A no-sync context chosen by a condition: a conditional expression (``ctx = nullcontext()
    if last else model.no_sync()``; ``cm = model.no_sync if at_boundary else nullcontext``) or an
    ``if`` statement that re-binds a null context (``ctx = nullcontext`` then ``if not last: ctx =
    model.no_sync``). ``choice`` is the expression or statement, ``arm`` the side holding the
    no-sync (``"body"`` or ``"orelse"``), ``order`` where its test is evaluated."""

    choice: cst.IfExp | cst.If
    arm: str
    order: int

    @property
    def report(self) -> cst.CSTNode:
        """Where a finding about the choice points: the expression, or the statement's test."""
        return self.choice.test if isinstance(self.choice, cst.If) else self.choice


def chosen_no_sync(item: cst.BaseExpression, site: Site) -> ChosenNoSync | None:
    """The conditional expression a ``with`` item enters a no-sync context through (directly,
    or through a name), when its other arm is a null context.

    A name is read through every binding that may reach the ``with``: one of them is the choice,
    the others null contexts (``ctx = nullcontext`` then, under ``if use_ddp:``, ``ctx =
    model.no_sync if i % A != 0 else ctx``). An arm that is a name is a null context when every
    binding of it reaching the choice is one."""
    choice, order = item, site.order
    if isinstance(choice, cst.Call) and not choice.args and isinstance(choice.func, cst.Name):
        choice = choice.func  # `with maybe_no_sync():` — the name holds the context factory
    name = dotted(choice) if isinstance(choice, (cst.Name, cst.Attribute)) else None
    if name is not None:
        definitions, on_entry = reaching_definitions(site.scope, name, site.order)
        chosen = [d for d in definitions if not _null_context(d.value, site.scope, d.order)]
        if on_entry or len(chosen) != 1 or chosen[0].value is None:
            return None
        choice, order = chosen[0].value, chosen[0].order
        if _is_no_sync(choice):
            return _chosen_by_statement(chosen[0], site)
    if not isinstance(choice, cst.IfExp):
        return None
    arms = {"body": choice.body, "orelse": choice.orelse}
    syncing = [arm for arm, value in arms.items() if _is_no_sync(value)]
    if len(syncing) != 1:
        return None
    if not _null_context(arms["orelse" if syncing[0] == "body" else "body"], site.scope, order):
        return None
    return ChosenNoSync(choice, syncing[0], order)


def _chosen_by_statement(definition: Site, use: Site) -> ChosenNoSync | None:
    """The ``if`` that binds a no-sync context in one of its branches (the other bindings
    reaching the use being null contexts): only where that ``if`` is the one construct around
    the binding that the use is not also in (an outer condition could rule the branch out)."""
    shared = {id(frame.node) for frame in use.frames}
    own = [frame for frame in definition.frames if id(frame.node) not in shared]
    if len(own) != 1 or own[0].kind is not FrameKind.IF or not isinstance(own[0].node, cst.If):
        return None
    return ChosenNoSync(own[0].node, own[0].branch, definition.order)


def _null_context(value: cst.BaseExpression | None, scope: Scope, order: int, depth: int = 0) -> bool:
    """Whether ``value`` (read at position ``order``) enters no context: ``nullcontext()``, the
    factory itself, or a name every binding of which reaching ``order`` is one (at most four
    renames deep)."""
    if value is None or depth > 4:
        return False
    if last_segment(dotted(value.func if isinstance(value, cst.Call) else value)) in conventions.NULL_CONTEXTS:
        return True
    if not isinstance(value, cst.Name):
        return False
    definitions, on_entry = reaching_definitions(scope, value.value, order)
    return not on_entry and bool(definitions) and all(
        _null_context(d.value, scope, d.order, depth + 1) for d in definitions)


def _is_no_sync(value: cst.BaseExpression) -> bool:
    """``model.no_sync()`` or the method itself (``model.no_sync``)."""
    if isinstance(value, cst.Call):
        return method_name(value) in fw.NO_SYNC_METHODS
    return isinstance(value, cst.Attribute) and value.attr.value in fw.NO_SYNC_METHODS


def _synced_model(call: cst.Call) -> cst.BaseExpression | None:
    """The model whose sync the call switches: the receiver (``ddp.no_sync()``) or the first
    argument (``accelerator.no_sync(model)``, ``fabric.no_backward_sync(model)``)."""
    return positional(call, 0) or receiver(call)
