"""Which training event a site performs: backward, gradient reset, optimizer update,
scheduler step, clipping, unscale, scaler update.

A method call counts only when its receiver's role makes it unambiguous: ``x.step()`` is
an optimizer update for an optimizer, a scheduler step for a scheduler, and nothing for
an object we cannot place.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import libcst as cst

from accumlint.model.kinds import EventKind, Role
from accumlint.model.names import dotted, keyword, last_segment, method_name, positional, receiver
from accumlint.model.roles import UNKNOWN, RoleInfo, Roles
from accumlint.model.sites import Site

#: Lightning's backward under manual optimization (lightning 2.6.6 ``core/module.py``)
MANUAL_BACKWARD = "manual_backward"
#: the calls that make a backward event (:func:`classify`): a file that calls none of them has
#: no microbatch loop and no backward for a rule to read
BACKWARD_CALLS = frozenset({"backward", MANUAL_BACKWARD, "update_params"})
#: the methods that make a scheduler step (on a receiver in the scheduler role)
SCHEDULER_STEP_METHODS = frozenset({"step", "step_update"})
#: the calls that clip gradients (a function such as ``torch.nn.utils.clip_grad_norm_`` or a method)
CLIP_CALLS = frozenset({"clip_grad_norm_", "clip_grad_value_", "clip_grad_norm", "clip_gradients"})
#: unscale methods and the receiver roles they unscale for: ``GradScaler.unscale_(optimizer)``
#: (torch 2.13.0 amp/grad_scaler.py) and ``Accelerator.unscale_gradients(optimizer=None)``
#: (accelerate 1.15.0 accelerator.py, a no-op unless fp16 with native AMP)
_UNSCALE = {"unscale_": (Role.SCALER, Role.UNKNOWN), "unscale_gradients": (Role.ACCELERATOR, Role.UNKNOWN)}
# `owner.backward(loss)`: these roles take the loss as argument (apex/colossalai optimizers do too)
_BACKWARD_OWNERS = frozenset(
    {Role.ACCELERATOR, Role.ENGINE, Role.FABRIC, Role.MODEL, Role.OPTIM_WRAPPER, Role.OPTIMIZER}
)
#: every method name :func:`classify` turns into an event: any other method call is none, and
#: its receiver's role (the costly part) is never looked up
_EVENT_METHODS = frozenset(
    {"zero_grad", "zero_", "detach_", "update"}
) | BACKWARD_CALLS | SCHEDULER_STEP_METHODS | CLIP_CALLS | frozenset(_UNSCALE)


@dataclass(frozen=True, eq=False)
class Event:
    """A site classified as a training event.

    ``target``: the object acted on (the optimizer stepped, the model reset …) and its role;
    ``loss``: for a backward, the expression whose gradient is taken.
    """

    kind: EventKind
    site: Site
    target: cst.BaseExpression | None
    role: RoleInfo
    method: str
    loss: cst.BaseExpression | None = None

    @property
    def node(self) -> cst.CSTNode:
        """Where a finding about this event is reported (see :attr:`Site.report`)."""
        return self.site.report

    @property
    def order(self) -> int:
        return self.site.order


def classify(site: Site, roles: Roles) -> Event | None:
    """The event ``site`` performs, or ``None`` (not an event, or not decidable). In an
    inlined helper, the target and the loss are read in the caller's names where the
    helper's parameters bind them (``opt.step()`` in ``helper(optimizer)`` steps ``optimizer``)."""
    event = _classify(site, roles)
    if event is None or site.inline is None:
        return event
    changes: dict = {}
    if event.target is not None:
        target, where = site.inline.resolve(event.target)
        if where is None:
            changes["target"] = target
    # the loss stays in the helper's names: the data flow follows the bindings (dataflow.py)
    return replace(event, **changes) if changes else event


def _classify(site: Site, roles: Roles) -> Event | None:
    if site.call is None:
        return _classify_assignment(site)
    call = site.call
    method = method_name(call)
    if (dotted(call.func) or "").endswith("autograd.backward") or site.alias is not None:
        method = None  # torch.autograd.backward(loss), a partial of a clip: functions
    if method is None:
        if site.followed:
            return None  # the project's own `optimizer_step(...)`: its body's events count instead
        name = site.alias or dotted(call.func) or ""
        if name.endswith("autograd.backward"):
            return Event(EventKind.BACKWARD, site, None, UNKNOWN, "backward", positional(call, 0))
        if last_segment(name) in CLIP_CALLS:
            return Event(EventKind.CLIP, site, positional(call, 0), UNKNOWN, last_segment(name))
        if last_segment(name) == "optimizer_step":  # torch_xla xm.optimizer_step(optimizer)
            target = positional(call, 0)
            return Event(EventKind.UPDATE, site, target, roles.of(target, site), "optimizer_step")
        return None
    if method not in _EVENT_METHODS:
        return None
    target = receiver(call)
    role = roles.of(target, site)
    if method in ("backward", MANUAL_BACKWARD):
        if method == MANUAL_BACKWARD or (positional(call, 0) is not None and role.role in _BACKWARD_OWNERS):
            return Event(EventKind.BACKWARD, site, target, role, method, positional(call, 0))
        loss = target
        if isinstance(loss, cst.Call) and method_name(loss) == "scale":  # scaler.scale(loss).backward()
            loss = positional(loss, 0)
        return Event(EventKind.BACKWARD, site, target, role, method, loss)
    if method == "update_params" and role.role is Role.OPTIM_WRAPPER:
        return Event(EventKind.BACKWARD, site, target, role, method, positional(call, 0))
    if method == "zero_grad":
        return Event(EventKind.RESET, site, target, role, method) if role.role is not Role.SCHEDULER else None
    if method in ("zero_", "detach_") and target is not None and (dotted(target) or "").endswith(".grad"):
        return Event(EventKind.RESET, site, target, role, method)
    if method == "step":
        if role.role in (Role.OPTIMIZER, Role.ENGINE, Role.OPTIM_WRAPPER):
            return Event(EventKind.UPDATE, site, target, role, method)
        if role.role is Role.SCALER:
            return Event(EventKind.UPDATE, site, positional(call, 0), role, "scaler.step")
        if role.role is Role.SCHEDULER:
            return Event(EventKind.SCHEDULER_STEP, site, target, role, method)
        return None
    if method == "step_update" and role.role is Role.SCHEDULER:
        return Event(EventKind.SCHEDULER_STEP, site, target, role, method)
    if method in CLIP_CALLS:
        return Event(EventKind.CLIP, site, target, role, method)
    if method in _UNSCALE and role.role in _UNSCALE[method]:
        # an unscale we cannot place (unknown receiver) still counts: rules use it to stay silent
        return Event(EventKind.UNSCALE, site, positional(call, 0) or keyword(call, "optimizer"), role, method)
    if method == "update" and role.role is Role.SCALER:
        return Event(EventKind.SCALER_UPDATE, site, target, role, method)
    return None


def _classify_assignment(site: Site) -> Event | None:
    if not site.targets or site.is_return or site.augmented is not None:
        return None
    if isinstance(site.value, cst.Name) and site.value.value == "None":
        for name in site.targets:
            if name and name.endswith(".grad"):
                return Event(EventKind.RESET, site, None, UNKNOWN, "grad = None")
    return None
