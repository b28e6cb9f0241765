"""What the loop reports about itself: the rates it logs (``runtime_guard.log``, or a logger it already calls:
:mod:`runtime_guard.observe.loggers`; ACC903) and the counters a resumed run restored (the optimizer's own
update count and the LR scheduler's position, ACC904).

A logged figure is kept with the time since the previous update the probe saw and the number of the
group's microbatches at that moment; :mod:`runtime_guard.checks.figures` relates the figure times that
time to the examples or tokens of the whole group and of its last microbatch. Only figures whose name
says a rate are kept (:func:`rate_unit`); nothing is read from a figure but its number.
"""

from __future__ import annotations

import numbers
import re
import threading
import time
from collections.abc import Mapping
from typing import Any

import torch

from runtime_guard.contain import describe
from runtime_guard.observe import Observer
from runtime_guard.trace import LoggedFigure

#: The clock of update attempts and logged figures (a test substitutes its own).
clock = time.perf_counter

#: A figure's name that says it is a rate: ``tokens_per_sec``, ``train/samples_per_second``, ``tok/s``,
#: ``examples/sec``, ``throughput``, ``tps`` (tokens) and ``sps`` (samples).
_RATE = re.compile(r"per_?sec|per_?second|/s(ec)?\b|(^|[_/])[ts]ps$|throughput")
#: Words of a name that give the rate's unit.
_TOKENS = re.compile(r"tok|(^|[_/])tps$")
_EXAMPLES = re.compile(r"sample|example|seq|image|img|instance|(^|[_/])sps$")


def rate_unit(name: str) -> str | None:
    """``"tokens"`` or ``"examples"`` for a figure whose name says it is a rate of those, ``""`` for a rate of
    another or no unit (``throughput``, ``it/s``), ``None`` for a figure that is no rate (``loss``)."""
    text = name.lower()
    if not _RATE.search(text):
        return None
    if _TOKENS.search(text):
        return "tokens"
    return "examples" if _EXAMPLES.search(text) else ""


def _number(value: Any) -> float | None:
    """``value`` as a float when it is a real number or a one-element CPU tensor (no device sync), else ``None``."""
    if isinstance(value, bool):
        return None
    if isinstance(value, torch.Tensor):
        return float(value) if value.numel() == 1 and value.device.type == "cpu" else None
    return float(value) if isinstance(value, numbers.Real) else None


def log(figures: Mapping[str, Any] | None = None, /, **more: Any) -> None:
    """Hand the attached probe the figures the loop logs, e.g. ``runtime_guard.log({"tokens_per_sec": tps})``
    next to a logger the guard does not hook (``wandb.log``, TensorBoard's ``add_scalar(s)`` and
    ``Accelerator.log`` are read without it, :mod:`runtime_guard.observe.loggers`): a rate logged after an
    update is checked against the examples or tokens the group processed (ACC903). Names say the unit
    (``tokens`` / ``samples`` / ``examples``, per second); figures that are no rate, or not numbers, are
    ignored. A no-op when no probe is attached, from another
    thread than the loop's, and after the probe detached; it never raises (nor the guard's failures)."""
    from runtime_guard.probe import figures_observers

    for observer in figures_observers(threading.get_ident()):
        merged = {**(figures or {}), **more}
        try:
            observer.on_figures(merged)
        except Exception as error:  # noqa: BLE001 - the guard's failure, never the program's
            observer.services.hook_failed("runtime_guard.log", error)


def _same_point(a: LoggedFigure, b: LoggedFigure) -> bool:
    """The same figure logged twice at one point of the loop (through two loggers)."""
    return (a.name, a.value, a.group, a.microbatches, a.after_update) == \
        (b.name, b.value, b.group, b.microbatches, b.after_update)


class FiguresObserver(Observer):
    """Logged figures (ACC903) and the counters a resumed run restored (ACC904)."""

    def on_figures(self, figures: Mapping[str, Any], source: str = "runtime_guard.log") -> None:
        """Keep the rates among ``figures`` (name -> value) logged through ``source`` now. A rate already kept
        with the same name and value at the same point of the group (the loop hands one dict to
        ``runtime_guard.log`` and to its logger) is kept once."""
        s = self.state
        if not self.services.entry():
            return
        now = clock()
        groups = s.record.groups
        group = groups[-1] if groups else None
        if group is None or not group.microbatches:
            return  # before the first forward: no group to relate it to
        previous = groups[-2] if len(groups) >= 2 else None
        since = now - previous.updated_at if previous is not None and previous.updated_at is not None else None
        for name, value in figures.items():
            number = _number(value)
            unit = rate_unit(str(name))
            if number is None or unit is None:
                continue
            figure = LoggedFigure(str(name), number, unit, group.index, len(group.microbatches), group.closed,
                                  since, source)
            if not any(_same_point(figure, kept) for kept in s.record.figures):
                s.record.figures.append(figure)

    def read_counters(self) -> None:
        """The optimizer's own count of applied updates (``state["step"]`` of Adam-family optimizers, the
        largest over the probed parameters; ``None`` when its state holds none) and the scheduler's position
        (``last_epoch``), as they are when the probe attaches: after a resume, what the program restored."""
        s = self.state
        steps = []
        try:
            for p in s.params:
                state = s.optimizer.state.get(p)
                step = state.get("step") if isinstance(state, dict) else None
                if isinstance(step, torch.Tensor) and step.numel() == 1:
                    steps.append(int(step.item()))
                elif isinstance(step, numbers.Real) and not isinstance(step, bool):
                    steps.append(int(step))
        except Exception as error:  # noqa: BLE001 - the guard's failure: ACC904 not observed, never a raise
            s.record.notes.append(f"the guard could not read the optimizer's update count ({describe(error)})")
            steps = []
        # none: a fresh optimizer (Adam's state is created at its first update), or one that counts nothing (SGD)
        s.record.updates_at_attach = max(steps) if steps else None
        position = getattr(s.scheduler, "last_epoch", None) if s.scheduler is not None else None
        s.record.scheduler_position = position if isinstance(position, int) else None
