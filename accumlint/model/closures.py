"""Lightning's optimizer closure in an ``optimizer_step`` override: on which batches it runs.

Under automatic optimization the closure Lightning hands ``optimizer_step`` runs the batch's
``training_step``, the gradient reset of a group's first batch and the backward
(:data:`accumlint.frameworks.lightning.UPDATE_STEP_HOOKS`). The override is walked as the body
of the loop over updates (:func:`accumlint.model.statement_walk.is_update_hook`), so the group model's
gate logic says how often each use of the closure runs: a use under a boundary gate on
``batch_idx`` or on a counter the module keeps runs on the gate's batches only.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import libcst as cst

from accumlint import frameworks as fw
from accumlint.model.dataflow import home
from accumlint.model.grad_ops import site_cadence
from accumlint.model.groups import Group, LoopAnalysis
from accumlint.model.kinds import Cadence, EventKind
from accumlint.model.names import dotted, walk
from accumlint.model.owned_loops import closure_parameter
from accumlint.model.scopes import FrameKind, Scope, Site

if TYPE_CHECKING:
    from accumlint.model import FileModel


@dataclass(frozen=True)
class GatedClosure:
    """An ``optimizer_step`` override whose every use of the closure runs on the batches a
    boundary gate selects and on no other.

    ``scope``: the override; ``closure``: the closure's parameter name; ``step``: the update
    that hands the closure on (``optimizer.step(closure=optimizer_closure)``); ``test``: the
    gate's condition; ``holds``: the closure runs where ``test`` is true (False: where it is
    false, an ``else`` branch or after an ``if test: return`` guard).
    """

    scope: Scope
    closure: str
    step: Site
    test: cst.BaseExpression
    holds: bool


def _overrides(model: FileModel) -> Iterator[tuple[Scope, cst.FunctionDef, Group]]:
    """The ``optimizer_step`` overrides of automatic LightningModules with one base, walked as
    the body of the loop over updates, each with its group model."""
    for scope in model.scopes:
        function = scope.node
        if (not isinstance(function, cst.FunctionDef) or scope.class_def is None
                or function.name.value not in fw.lightning.UPDATE_STEP_HOOKS or function not in scope.loop_spans
                or len(scope.class_def.bases) != 1 or not model.frameworks.lightning_automatic(scope.class_def)):
            continue  # (another base may turn automatic optimization off: Lightning then calls no optimizer_step)
        analysis = LoopAnalysis(scope, model.events[scope], model.frameworks.is_accumulate_context)
        yield scope, function, analysis.analyse(function)


def hand_gated_modules(model: FileModel) -> set[int]:
    """``id``s of the LightningModule classes whose ``optimizer_step`` override runs the update
    only on the batches a boundary gate selects (every update event has cadence ``UPDATE``):
    the module accumulates by hand, with Lightning's ``accumulate_grad_batches`` left at 1, so
    Lightning divides the loss by 1 and a division by A in ``training_step`` is the module's own
    normalisation (lightning 2.6.6 ``loops/optimization/automatic.py``)."""
    found: set[int] = set()
    for scope, _function, group in _overrides(model):
        updates = [event.site for event in model.events[scope] if event.kind is EventKind.UPDATE]
        if group.gate is not None and updates and all(site_cadence(model, group, s) is Cadence.UPDATE for s in updates):
            found.add(id(scope.class_def))
    return found


def gated_closures(model: FileModel) -> list[GatedClosure]:
    """The ``optimizer_step`` overrides of automatic LightningModules whose closure runs only on
    the batches of a boundary gate (cadence ``UPDATE`` for every use), with the update that
    hands it on. Left out: a closure also run on the other batches (an ``else: optimizer_closure()``,
    a hand-off to ``super().optimizer_step``), an unconditional use, a condition the gate logic
    cannot decide, a closure read anywhere but as a call or a call's argument (stored,
    wrapped in a lambda), and a class with a base besides ``LightningModule``."""
    found: list[GatedClosure] = []
    for scope, function, group in _overrides(model):
        closure = closure_parameter(function)
        if closure is None:
            continue
        sites = [site for site in scope.sites if site.call is not None and _reads_closure(scope, site, closure)]
        own = [site for site in sites if not site.in_helper]
        nodes = list(walk(function.body))
        keywords = {id(node.keyword) for node in nodes if isinstance(node, cst.Arg) and node.keyword is not None}
        reads = sum(1 for node in nodes if isinstance(node, cst.Name) and node.value == closure
                    and id(node) not in keywords)  # (`step(closure=...)`: the keyword is no read)
        if not own or reads != len(own):
            continue  # the closure is read elsewhere too (stored, wrapped): where it runs is open
        uses = [site for site in sites if not site.followed]  # a helper's call: its own uses count instead
        if not uses or group.gate is None or any(site_cadence(model, group, site) is not Cadence.UPDATE
                                                 for site in uses):
            continue
        updates = {id(event.site) for event in model.events[scope] if event.kind is EventKind.UPDATE}
        step = next((site for site in uses if id(site) in updates), None)
        frame = next((f for f in (step.frames if step is not None else ()) if f.node is group.gate.frame_node), None)
        if step is None or frame is None or frame.kind not in (FrameKind.IF, FrameKind.GUARD) or frame.test is None:
            continue
        found.append(GatedClosure(scope, closure, step, frame.test,
                                  frame.kind is FrameKind.IF and frame.branch == "body"))
    return found


def _reads_closure(scope: Scope, site: Site, closure: str) -> bool:
    """Whether a call calls the closure or passes it on, in the override's code or in a helper
    it calls with the closure as an argument (the helper's parameter stands for it)."""
    names = [dotted(site.call.func), *(dotted(arg.value) for arg in site.call.args)]  # type: ignore[union-attr]
    return any(name is not None and home(scope, name, site.order, site.inline) == (closure, None) for name in names)
