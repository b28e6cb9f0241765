"""Accelerate's ``accumulate()`` entered more than once per microbatch (ACC501), or without a
model the block trains (ACC503).

Each entry of ``accelerator.accumulate(...)`` calls ``Accelerator._do_sync`` (accelerate 1.15.0
``accelerator.py``), which advances ``accelerator.step`` and sets ``sync_gradients`` to
``step % A == 0``: two entries per microbatch advance the counter twice, so with an even A the
sync (and the prepared optimizer's update) comes every A/2 microbatches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import libcst as cst

from accumlint.checks.shared.leaks import models_reached, outermost_name, switches_requires_grad, trained_models
from accumlint.model import EventKind, FrameKind, Group, Role
from accumlint.model.groups import is_accumulate_call
from accumlint.model.names import dotted

if TYPE_CHECKING:
    from accumlint.model import FileModel


def _receivers(with_node: cst.With) -> list[str | None]:
    """The accelerators whose ``accumulate()`` a ``with`` statement enters, one per entry."""
    return [dotted(item.item.func.value) for item in with_node.items  # type: ignore[attr-defined]
            if is_accumulate_call(item.item)]


def double_entries(group: Group) -> list[cst.With]:
    """The ``with`` statements of ``group``'s loop that enter ``accumulate()`` of an accelerator
    already entered on the same pass: a second item of one ``with`` (``with acc.accumulate(a),
    acc.accumulate(b):``) or a nested ``with`` inside another one's block. Entries on different
    accelerators, or whose accelerator has no name, are not counted."""
    found: list[cst.With] = []
    for with_node in group.accumulate_contexts:
        names = [n for n in _receivers(with_node) if n is not None]
        if len(names) != len(set(names)) and with_node not in found:
            found.append(with_node)
    for site in group.loop_sites:
        entered: list[str] = []
        for frame in site.frames_inside(group.loop):
            if frame.kind is FrameKind.HELPER:
                break
            if frame.kind is not FrameKind.WITH or not isinstance(frame.node, cst.With):
                continue
            names = [n for n in _receivers(frame.node) if n is not None]
            if any(n in entered for n in names) and frame.node not in found:
                found.append(frame.node)
            entered.extend(names)
    return found


@dataclass(frozen=True)
class OmittedModel:
    """A prepared model that a ``with <accelerator>.accumulate(...)`` block trains without
    passing it: ``call`` is the innermost ``accumulate(...)`` around the backward that reaches
    it (or, where that block is another module's code, the call of it in this file), ``name``
    the model, ``passed`` the models the enclosing ``accumulate()`` calls name,
    ``optimizer`` the optimizer over its parameters that updates in the loop."""

    call: cst.CSTNode
    name: str
    passed: tuple[str, ...]
    optimizer: str


def omitted_trained_models(model: FileModel, group: Group) -> list[OmittedModel]:
    """The prepared models trained inside an ``accumulate()`` block of ``group`` but not
    passed to it (accelerate 1.15.0 ``Accelerator.accumulate(self, *models)`` enters
    ``no_sync(m)`` for the models it is given only; see
    :data:`accumlint.frameworks.accelerate.ACCUMULATE_SIGNATURE`).

    A model counts when all of these hold: a backward inside the block has a loss its forward
    feeds (not only through ``.detach()`` or under ``no_grad``: :func:`models_reached`); an
    optimizer built over its ``parameters()`` updates in the loop; it came out of
    ``accelerator.prepare``; and no ``requires_grad`` switch is written in the module (a frozen
    model has no gradient to all-reduce). Silent for an ``accumulate()`` whose arguments are not
    all plain names (``*models``, ``self.models[0]`` resolved some other way)."""
    found: list[OmittedModel] = []
    if not group.accumulate_contexts or _switches_requires_grad(model):
        return found
    optimizers: dict[str, str] = {}
    for update in group.of_kind(EventKind.UPDATE):
        for owner in trained_models(model, update) if update.target is not None else ():
            optimizers.setdefault(owner, dotted(update.target) or "the optimizer")
    if not optimizers:
        return found
    seen: set[tuple[int, str]] = set()
    for backward in group.of_kind(EventKind.BACKWARD):
        inline = backward.site.inline
        foreign = inline is not None and any(link.foreign is not None for link in inline.chain())
        calls = _enclosing_accumulate_calls(backward.site.frames)
        if not calls:
            continue
        contexts = [frame.node for frame in backward.site.frames if frame.kind is FrameKind.WITH
                    and any(item.item in calls for item in frame.node.items)]  # type: ignore[union-attr]
        site = backward.site
        passed = [_outer_name(model, arg.value, site) if not arg.star and arg.keyword is None else None
                  for call in calls for arg in call.args]
        if not passed or None in passed:
            continue
        scope, order = backward.site.scope, backward.site.order
        # the prepared models the block calls, with the name their optimizer knows them by
        candidates: dict[str, str] = {}
        for called in group.region_sites:
            name = _outer_name(model, called.call.func, called) if called.call is not None else None
            if name is None or name in candidates or not any(called.inside(c) for c in contexts):
                continue
            info = model.roles.named(name, scope, order)
            # a prepared object of no known role is a model where an optimizer holds its
            # parameters (`unet`, `text_encoder`: named like no model)
            if info.prepared is True and info.role in (*_MODEL_ROLES, Role.UNKNOWN):
                origin = name if name in optimizers else model.roles.prepared_from(name, scope, order)
                if origin in optimizers:
                    candidates[name] = origin  # type: ignore[assignment]
        reached, _ = models_reached(backward, set(candidates), model.roles)
        for name in sorted(reached - set(passed)):  # type: ignore[arg-type]
            key = (id(calls[-1]), name)
            if key not in seen:
                seen.add(key)
                # in another module's code the finding goes to the call of it in this file
                report = backward.site.report if foreign else calls[-1]
                found.append(OmittedModel(report, name, tuple(passed),  # type: ignore[arg-type]
                                          optimizers[candidates[name]]))
    return found


_MODEL_ROLES = frozenset({Role.MODEL, Role.DDP_MODEL, Role.FSDP_MODEL})


def _outer_name(model: FileModel, expression: cst.BaseExpression, site) -> str | None:
    """``expression`` (read at ``site``) in the scope's own names: an inlined helper's
    parameter is the caller's argument, and ``self.net`` of an object built on ``net`` is
    ``net`` (:meth:`Roles.stored_name`). None where a parameter's value is unknown."""
    name = outermost_name(expression, site.inline)
    return model.roles.stored_name(name, site.scope, site.order) if name else None


def _enclosing_accumulate_calls(frames) -> list[cst.Call]:
    """The ``accumulate(...)`` calls of the ``with`` frames around a site, outermost first."""
    return [item.item for frame in frames if frame.kind is FrameKind.WITH and isinstance(frame.node, cst.With)
            for item in frame.node.items if is_accumulate_call(item.item)]  # type: ignore[misc]


def _switches_requires_grad(model: FileModel) -> bool:
    """Whether any scope of the module switches ``requires_grad``: which model is frozen, and
    when, is then left open."""
    return any(switches_requires_grad(site) for scope in model.scopes for site in scope.sites)
