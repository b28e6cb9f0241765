"""The probe's observers, one module per event family, and what they share.

The families: forward, backward, resets, updates, schedule, gradient operations, epoch
placement, replicas, logged figures and loggers, weight copies. Each observer is a component
(:class:`Observer`) that :class:`runtime_guard.probe.Probe` constructs with the probe's state
(:class:`~runtime_guard.observe.state.ProbeState`, everything observers share), the shared services
(:class:`~runtime_guard.observe.services.ProbeServices`: the entry guard, recording an event, gradient
fingerprints around a call) and the other observers whose public methods it calls. An observer's
private names are its own: ``tests/guard/test_guard_probe_shape.py`` holds that.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from runtime_guard.contain import call_through

if TYPE_CHECKING:
    from runtime_guard.observe.services import ProbeServices
    from runtime_guard.observe.state import ProbeState


def eager(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` kept out of ``torch.compile``'s tracing (it runs eagerly, a graph break) once dynamo is
    loaded: the probe's hooks read and write Python state that a traced copy would freeze or fail on."""
    dynamo = sys.modules.get("torch._dynamo")
    return dynamo.disable(fn) if dynamo is not None else fn


class Observer:
    """An observer of one event family: works on ``state`` through ``services``."""

    def __init__(self, state: ProbeState, services: ProbeServices) -> None:
        self.state = state
        self.services = services


def observed_call(where: str, observe: Callable[..., Any]) -> Callable[..., Any]:
    """``observe(observer, original, args, kwargs)`` for :func:`~runtime_guard.undo.patch_function` (whose
    owner is an :class:`Observer`), run through :func:`~runtime_guard.contain.call_through` (the user's call
    once, its exception unchanged, the guard's failures contained). Holds no observer, as
    ``patch_function`` requires: ``observe`` is an unbound method."""

    def contained(live: Observer, original: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        return call_through(live.services.hook_failed, where, original,
                            lambda call: observe(live, call, args, kwargs), args, kwargs)

    return contained
