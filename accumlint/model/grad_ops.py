"""How often a gradient rescale or a once-per-update hook runs, through the helpers that do it.

A rescale or an EMA written in a same-module helper (``def scale_grads_(params, c): for p in
params: if p.grad is not None: p.grad.mul_(c)``) is inlined where the helper is called; the
per-parameter ``for`` and ``if p.grad is not None`` inside it vary per element, not per
microbatch, so the event runs as often as the helper's call. Rules report such an event at
that call, the line the user wrote in the loop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

import accumlint.frameworks as fw
from accumlint.model.conventions import MODEL_ROLES
from accumlint.model.events import WEIGHT_BLEND, Event
from accumlint.model.groups import Group, LoopAnalysis
from accumlint.model.kinds import Cadence
from accumlint.model.names import dotted, names_in, receiver
from accumlint.model.scopes import FrameKind, Site

if TYPE_CHECKING:
    from accumlint.model import FileModel

#: words in the iterable of a ``for`` that walks a model's parameters (``model.parameters()``,
#: ``zip(ema.state_dict().values(), params)``, ``self.params``)
_PARAMETER_WORDS = ("param", "state_dict", "named_", "modules", "grads")
_CONSTANTS = frozenset({"None", "True", "False"})


def outer_helper_call(group: Group, event: Event) -> cst.Call | None:
    """The call in ``group``'s own loop body that inlined the helper ``event`` comes from (None:
    the event is the loop's own code)."""
    for frame in event.site.frames_inside(group.loop):
        if frame.kind is FrameKind.HELPER:
            return frame.node  # type: ignore[return-value]
    return None


def report_node(group: Group, event: Event) -> cst.CSTNode:
    """Where a finding about ``event`` goes: the helper call in the loop, or the event itself."""
    return outer_helper_call(group, event) or event.node


def per_element_frames(group: Group, event: Event) -> bool:
    """Whether every construct between the helper call (or the loop) and ``event`` is a ``for``
    over elements, a ``with``, or an ``if`` that reads only names those ``for`` loops bind
    (``if p.grad is not None``): none of them decides per microbatch."""
    bound: set[str] = set()
    for frame in event.site.frames_inside(group.loop):
        if frame.kind in (FrameKind.HELPER, FrameKind.WITH):
            continue
        if frame.kind is FrameKind.LOOP and isinstance(frame.node, cst.For):
            bound.update(name for name in names_in(frame.node.target))
            continue
        if frame.kind is FrameKind.IF and frame.test is not None:
            names = {name.split(".")[0].split("[")[0] for name in names_in(frame.test)} - _CONSTANTS
            if names and names <= bound:
                continue
        return False
    return True


def _helper_conditions_per_element(group: Group, event: Event) -> bool:
    """Whether every ``if`` inside the inlined helper(s) around ``event`` reads only names bound
    by a ``for`` inside them (``if p.grad is not None``)."""
    bound: set[str] = set()
    inside = False
    for frame in event.site.frames_inside(group.loop):
        if frame.kind is FrameKind.HELPER:
            inside = True
        elif not inside:
            continue
        elif frame.kind is FrameKind.LOOP and isinstance(frame.node, cst.For):
            bound.update(names_in(frame.node.target))
        elif frame.kind in (FrameKind.IF, FrameKind.GUARD, FrameKind.HANDLER, FrameKind.MATCH):
            test = frame.test
            names = ({name.split(".")[0].split("[")[0] for name in names_in(test)} - _CONSTANTS
                     if test is not None else {"?"})
            if not names <= bound:
                return False
    return True


def over_parameters(group: Group, event: Event) -> bool:
    """Whether ``event`` sits in a ``for`` (of the loop or of an inlined helper) over a model's
    parameters or their gradients."""
    for frame in event.site.frames_inside(group.loop):
        if frame.kind is FrameKind.LOOP and isinstance(frame.node, cst.For):
            text = " ".join(names_in(frame.node.iter)) + " " + (dotted(frame.node.iter) or "")
            if any(word in text.lower() for word in _PARAMETER_WORDS):
                return True
    return False


#: hooks whose framework defines them over the model's weights (torch's ``AveragedModel``,
#: peft's AdaLoRA rank allocator), and a blend of one model's parameters into another's: they
#: read the weights whatever their arguments say
_WEIGHT_HOOKS = frozenset({fw.pytorch.SWA_UPDATE_HOOK, fw.peft.UPDATE_HOOK, WEIGHT_BLEND})


def reads_weights(model: FileModel, group: Group, event: Event) -> bool:
    """Whether a once-per-update hook averages a trained model's weights: the framework defines it
    so, a hand-written decay walks the parameters, a model (by its role) or its parameters /
    ``state_dict`` reach the call's arguments, or the averager was built over one in this module
    (``ema = EMA(model)``; ``ema.update()``). An EMA of data statistics (``ema.update(out.mean().item(),
    "D_real")``) reads none of them: averaging a new value each microbatch is its purpose."""
    if event.method in _WEIGHT_HOOKS:
        return True
    if event.method in ("mul_", "lerp_"):
        return over_parameters(group, event)
    call = event.site.call
    if call is None:
        return False
    if _reaches_weights(model, call, event.site):
        return True
    target = receiver(call)
    name = dotted(target) if target is not None else None
    return bool(name) and any(_reaches_weights(model, built, site) for built, site in _constructions(model, name))


def _reaches_weights(model: FileModel, call: cst.Call, site: Site) -> bool:
    """Whether an argument of ``call`` is a model (by its role) or names parameters / weights."""
    for argument in call.args:
        if model.roles.of(argument.value, site).role in MODEL_ROLES:
            return True
        text = " ".join(names_in(argument.value)).lower()
        if any(word in text for word in _PARAMETER_WORDS):
            return True
    return False


def _constructions(model: FileModel, name: str) -> list[tuple[cst.Call, Site]]:
    """The calls this module assigns to ``name`` (``self.ema = EMA(self.model)``), with their sites."""
    return [(site.value, site) for scope in model.scopes for site in scope.sites
            if not site.in_helper and isinstance(site.value, cst.Call) and name in site.targets]


def op_cadence(model: FileModel, group: Group, event: Event) -> Cadence:
    """How often ``event`` runs in ``group``: its own cadence when the group model decides it,
    else (an event under a per-parameter ``for``/``if``) the cadence of the helper call or of
    the event's own line with those element constructs set aside. ``UNKNOWN`` otherwise."""
    cadence = group.cadence(event)
    if cadence is not Cadence.UNKNOWN:
        return cadence  # a helper's conditions are read with its parameters bound to the call's arguments
    if outer_helper_call(group, event) is not None and not _helper_conditions_per_element(group, event):
        return Cadence.UNKNOWN  # `if now:` on a helper's parameter the caller binds to no test it shows
    if not per_element_frames(group, event):
        return cadence
    site = _anchor(model, group, event)
    return Cadence.UNKNOWN if site is None else site_cadence(model, group, site)


def site_cadence(model: FileModel, group: Group, site: Site) -> Cadence:
    """How often a site of ``group``'s own loop body runs, by the group model's gate logic
    (``UNKNOWN`` for a site outside the loop or under a condition it cannot decide)."""
    if not site.inside(group.loop):
        return Cadence.UNKNOWN
    analysis = LoopAnalysis(group.scope, model.events[group.scope], model.frameworks.is_accumulate_context)
    return analysis._site_cadence(group, site)


def _anchor(model: FileModel, group: Group, event: Event):
    """The site of the loop's own code that runs exactly when the element constructs around
    ``event`` start: the helper's call, or the binding of the outermost inner ``for``."""
    scope = group.scope
    for frame in event.site.frames_inside(group.loop):
        if frame.kind is FrameKind.HELPER:
            return model.call_sites.get(id(frame.node))
        if frame.kind is FrameKind.LOOP and frame.node in scope.loop_spans:
            return scope.sites[scope.loop_spans[frame.node][0]]
    return None
