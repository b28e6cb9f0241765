"""Schedulers a framework steps by itself: an engine that is handed the scheduler (DeepSpeed,
the HF Trainer) or a LightningModule whose ``configure_optimizers`` returns it; a
``scheduler.step()`` the user writes beside such a hand-off steps it twice."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import libcst as cst

from accumlint import frameworks as fw
from accumlint.checks.schedule.schedules import conditional_definition
from accumlint.model import Role, Site
from accumlint.model.names import dotted, keyword, last_segment, positional

if TYPE_CHECKING:
    from accumlint.model import Event, FileModel

#: Counts named in optimizer updates (last segment): ``max_updates``, ``warmup_updates``,
#: ``num_optimizer_steps`` …


@dataclass(frozen=True)
class EngineScheduler:
    """A ``deepspeed.initialize`` call whose engine steps a scheduler at every boundary.

    ``passed``: the dotted name handed as ``lr_scheduler=`` (None when the scheduler comes
    from the config's ``"scheduler"`` section or from an expression).
    """

    call: cst.Call
    site: Site
    passed: str | None


def owned_schedulers(model: FileModel) -> list[EngineScheduler]:
    """The ``deepspeed.initialize`` calls of the module that hand the engine a scheduler
    (``lr_scheduler=`` not None, or a config dict with a ``"scheduler"`` section)."""
    found: list[EngineScheduler] = []
    for scope in model.scopes:
        for site in scope.sites:
            call = site.call
            if call is None or site.in_helper or not model.roles.qualify_call(call).endswith(fw.deepspeed.INITIALIZE):
                continue
            handed = keyword(call, fw.deepspeed.SCHEDULER_KEYWORD)
            if handed is None:
                handed = positional(call, fw.deepspeed.SCHEDULER_POSITION)
            if handed is not None and not (isinstance(handed, cst.Name) and handed.value == "None"):
                found.append(EngineScheduler(call, site, dotted(handed)))
            elif _config_has_scheduler(model, call, site):
                found.append(EngineScheduler(call, site, None))
    return found


def _config_has_scheduler(model: FileModel, call: cst.Call, site: Site) -> bool:
    """Whether the config given to ``deepspeed.initialize`` is a dict literal (directly or
    through one unconditional assignment) with a top-level ``"scheduler"`` key."""
    for name in fw.deepspeed.CONFIG_KEYWORDS:
        value = keyword(call, name)
        if value is None:
            continue
        text = dotted(value)
        if text is not None:
            definition = model.reaching(text, site)
            if definition is None or conditional_definition(definition, site) or definition.augmented is not None:
                return False
            value = definition.value
        return isinstance(value, cst.Dict) and any(
            isinstance(element, cst.DictElement) and isinstance(element.key, cst.SimpleString)
            and element.key.evaluated_value == fw.deepspeed.SCHEDULER_CONFIG_KEY
            for element in value.elements
        )
    return False


def stepped_by_engine(model: FileModel, event: Event, handoffs: list[EngineScheduler]) -> EngineScheduler | None:
    """The hand-off whose engine also steps the scheduler a ``SCHEDULER_STEP`` event steps:
    the scheduler ``deepspeed.initialize`` returned, or the object passed as ``lr_scheduler=``
    (same scope, not rebound after the hand-off). Hand-offs under a branch that does not
    enclose the step (``if args.deepspeed:``) do not count."""
    for handoff in handoffs:
        if conditional_definition(handoff.site, event.site):
            continue
        if event.role.owner == fw.deepspeed.PACKAGE and event.role.origin is handoff.call:
            return handoff
        name = dotted(event.target)
        if (handoff.passed is not None and name == handoff.passed and handoff.site.scope is event.site.scope
                and handoff.site.order < event.order and not event.site.in_helper):
            definition = model.reaching(name, event.site)
            if definition is None or definition.order < handoff.site.order:
                return handoff
    return None


def lightning_configured_schedulers(model: FileModel, class_def: cst.ClassDef) -> set[str] | None:
    """The dotted names of the schedulers a LightningModule's ``configure_optimizers`` returns
    (``return [opt], [self.sched]``; ``{"optimizer": o, "lr_scheduler": {"scheduler": s}}``),
    ``"self.lr_schedulers()"`` standing for all of them. None when it returns no scheduler,
    is not defined in the class, or the class overrides ``lr_scheduler_step`` (then the user
    decides how Lightning steps them)."""
    methods = {name: function for (owner, name), function in model.functions.methods.items() if owner is class_def}
    if fw.lightning.SCHEDULER_STEP_HOOK in methods or fw.lightning.CONFIGURE_OPTIMIZERS not in methods:
        return None
    scope = next((s for s in model.scopes if s.node is methods[fw.lightning.CONFIGURE_OPTIMIZERS]), None)
    if scope is None:
        return None
    names: set[str] = set()
    returned = False
    for site in scope.sites:
        if not site.is_return or site.in_helper or site.value is None:
            continue
        value = site.value
        text = dotted(value)
        if text is not None:
            definition = model.reaching(text, site)
            value = definition.value if definition is not None and definition.value is not None else value
        schedulers = _returned_schedulers(value)
        if schedulers:
            returned = True
            names.update(dotted(s) or "" for s in schedulers)
    if not returned:
        return None
    names.discard("")
    names.update(accessor for accessor, role in fw.lightning.ACCESSORS.items() if role is Role.SCHEDULER)
    return names


@dataclass(frozen=True)
class LightningScheduler:
    """One scheduler a LightningModule's ``configure_optimizers`` returns, and the interval
    Lightning steps it at under automatic optimization.

    ``node``: the scheduler's expression in the returned value; ``constructor``: the call that
    built it (through one unconditional assignment of the same scope), None when out of view;
    ``interval``: ``"step"`` (once per optimizer update) or ``"epoch"``, the framework's default
    (:data:`accumlint.frameworks.lightning.SCHEDULER_DEFAULT_INTERVAL`) when the config does not
    say; None when it says something the code does not fix (a variable, a ``**`` splat, a
    config dict written after it is built); ``explicit``: the config names the interval.
    """

    node: cst.BaseExpression
    constructor: cst.Call | None
    interval: str | None
    explicit: bool


def lightning_scheduler_intervals(model: FileModel, class_def: cst.ClassDef) -> list[LightningScheduler]:
    """The schedulers a LightningModule's ``configure_optimizers`` returns (the shapes of
    :func:`lightning_configured_schedulers`: ``[opt], [s]``, ``[opt], [{"scheduler": s, ...}]``,
    ``{"optimizer": o, "lr_scheduler": s or {...}}``), each with its stepping interval. Empty when
    the class overrides ``lr_scheduler_step`` or has no ``configure_optimizers``; the caller
    decides whether automatic optimization applies."""
    methods = {name: function for (owner, name), function in model.functions.methods.items() if owner is class_def}
    if fw.lightning.SCHEDULER_STEP_HOOK in methods or fw.lightning.CONFIGURE_OPTIMIZERS not in methods:
        return []
    scope = next((s for s in model.scopes if s.node is methods[fw.lightning.CONFIGURE_OPTIMIZERS]), None)
    if scope is None:
        return []
    found: list[LightningScheduler] = []
    for site in scope.sites:
        if site.is_return and not site.in_helper and site.value is not None:
            value, where = _followed(model, site.value, site)
            if isinstance(value, (cst.Tuple, cst.List)) and len(value.elements) == 2 and isinstance(
                    value.elements[1].value, (cst.Tuple, cst.List)):
                for element in value.elements[1].value.elements:  # type: ignore[attr-defined]
                    found.extend(_configured(model, element.value, where, None))
            elif isinstance(value, cst.Dict):
                found.extend(_configured(model, value, where, None))
    return found


def automatic_lightning_schedulers(model: FileModel, interval: str) -> Iterator[tuple[LightningScheduler, str]]:
    """The schedulers built in view that LightningModules under automatic optimization return from
    ``configure_optimizers`` and Lightning steps at ``interval`` (``"step"``: per optimizer update;
    ``"epoch"``), each with its name for a message. Only classes whose one base is the
    LightningModule: another base may override ``lr_scheduler_step`` or turn automatic optimization off."""
    classes = {id(s.class_def): s.class_def for s in model.scopes if s.class_def is not None}
    for class_def in classes.values():
        if len(class_def.bases) != 1 or not model.frameworks.lightning_automatic(class_def):
            continue
        for scheduler in lightning_scheduler_intervals(model, class_def):
            if scheduler.interval == interval and scheduler.constructor is not None:
                name = dotted(scheduler.node) or last_segment(dotted(scheduler.constructor.func)) or "the scheduler"
                yield scheduler, name


def _followed(model: FileModel, value: cst.BaseExpression, site: Site) -> tuple[cst.BaseExpression, Site]:
    """``value`` read at ``site``, or the value of the one unconditional assignment of its name
    that reaches ``site`` (a config dict or a scheduler built before the return), with the site
    its own names are read at (the assignment's: ``sched = {"scheduler": sched}`` reads the
    earlier ``sched``)."""
    text = dotted(value)
    if text is None:
        return value, site
    definitions, on_entry = model.reaching_definitions(text, site)
    if on_entry or len(definitions) != 1 or definitions[0].augmented is not None or definitions[0].value is None \
            or len(definitions[0].targets) != 1 or conditional_definition(definitions[0], site):
        return value, site
    return definitions[0].value, definitions[0]


def _configured(model: FileModel, value: cst.BaseExpression, site: Site,
                interval: tuple[str | None, bool] | None) -> list[LightningScheduler]:
    """The schedulers in one entry of the returned schedulers (a scheduler or a config dict),
    ``interval`` the one an enclosing dict set (value, explicit)."""
    entry, where = _followed(model, value, site)
    if isinstance(entry, cst.Name) and entry.value == "None":
        return []
    if not isinstance(entry, cst.Dict):
        return [LightningScheduler(value, entry if isinstance(entry, cst.Call) else None,
                                   *(interval or (fw.lightning.SCHEDULER_DEFAULT_INTERVAL, False)))]
    written = entry is not value and any(
        target is not None and target.startswith(f"{dotted(value)}[") for s in site.scope.sites for target in s.targets)
    keys = {}
    for element in entry.elements:
        if not isinstance(element, cst.DictElement) or not isinstance(element.key, cst.SimpleString):
            return [LightningScheduler(value, None, None, True)]  # `**defaults`: the interval may be in there
        keys[element.key.evaluated_value] = element.value
    if fw.lightning.SCHEDULER_INTERVAL_KEY in keys:
        given = keys[fw.lightning.SCHEDULER_INTERVAL_KEY]
        interval = (given.evaluated_value if isinstance(given, cst.SimpleString) else None, True)
    if written:
        interval = (None, True)
    inner = next((keys[key] for key in sorted(fw.lightning.SCHEDULER_KEYS) if key in keys), None)
    return _configured(model, inner, where, interval) if inner is not None else []


def _returned_schedulers(value: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The scheduler expressions in a ``configure_optimizers`` return value."""
    if isinstance(value, (cst.Tuple, cst.List)) and len(value.elements) == 2:
        second = value.elements[1].value
        if isinstance(second, (cst.Tuple, cst.List)):
            found: list[cst.BaseExpression] = []
            for element in second.elements:
                found.extend(_scheduler_entry(element.value))
            return found
    if isinstance(value, cst.Dict):
        return _scheduler_entry(value)
    return []


def _scheduler_entry(value: cst.BaseExpression) -> list[cst.BaseExpression]:
    """A scheduler, or a ``{"scheduler": s, "interval": ...}`` / ``{"lr_scheduler": ...}`` dict."""
    if isinstance(value, cst.Dict):
        for element in value.elements:
            if (isinstance(element, cst.DictElement) and isinstance(element.key, cst.SimpleString)
                    and element.key.evaluated_value in fw.lightning.SCHEDULER_KEYS):
                inner = element.value
                if isinstance(inner, cst.Name) and inner.value == "None":
                    return []
                return _scheduler_entry(inner) if isinstance(inner, cst.Dict) else [inner]
        return []
    if isinstance(value, cst.Name) and value.value == "None":
        return []
    return [value]
