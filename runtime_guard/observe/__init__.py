"""The probe's observers, one module per event family, and what they share.

The families: forward, backward, resets, updates, schedule, gradient operations, epoch
placement, replicas; each observer is a mixin of :class:`runtime_guard.probe.Probe` working on
its state.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any


def eager(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` kept out of ``torch.compile``'s tracing (it runs eagerly, a graph break) once dynamo is
    loaded: the probe's hooks read and write Python state that a traced copy would freeze or fail on."""
    dynamo = sys.modules.get("torch._dynamo")
    return dynamo.disable(fn) if dynamo is not None else fn
