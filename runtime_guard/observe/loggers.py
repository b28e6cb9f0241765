"""The loggers a loop already calls, read for the rates it logs (ACC903), so that no
``runtime_guard.log(...)`` line is needed next to them.

Each logger is hooked only where the script already imported the module that defines it (looked up in
``sys.modules``, never imported: discovery must not load wandb or TensorBoard), on its class, so that
every instance, made before or after the probe attached, goes through the hook. ``sys.modules`` is read
at install and again at each update while probing (``LoggersObserver.hook_loggers``): a module the script
imports later (lazily, inside its loop) is hooked from its next update on.

- **wandb**: ``wandb.sdk.wandb_run.Run._log(self, data, step, commit)``. In wandb 0.31.0
  (``wandb/sdk/wandb_run.py``) ``Run.log`` ends in ``self._log(data=..., ...)``, and ``wandb.init`` sets the
  module's ``wandb.log`` to the run's bound ``run.log`` (``wandb/sdk/wandb_init.py``, ``_set_global_run``
  -> ``wandb/sdk/lib/module.py``, ``set_global``): a bound method taken before the probe attached would
  bypass a patch of ``Run.log``, while its lookup of ``self._log`` happens at each call. Where ``_log`` is
  absent (another version), ``Run.log`` itself.
- **TensorBoard**: ``SummaryWriter.add_scalar(self, tag, scalar_value, ...)`` and
  ``add_scalars(self, main_tag, tag_scalar_dict, ...)`` of ``torch.utils.tensorboard.writer`` (torch 2.13.0,
  ``torch/utils/tensorboard/writer.py``; ``add_scalars`` writes its own summaries, it does not call
  ``add_scalar``) and of ``tensorboardX.writer`` (tensorboardX 2.6.5, ``tensorboardX/writer.py``, the same
  argument names). A figure of ``add_scalars`` is named ``main_tag/tag``.
- **Accelerate**: ``Accelerator.log(self, values, step=None, log_kwargs=None)`` (accelerate 1.15.0,
  ``accelerate/accelerator.py``; decorated ``@on_main_process``: the hook sits outside the decorator and
  sees every rank's call). Its trackers then call the loggers above (``accelerate/tracking.py``:
  ``WandBTracker.log`` -> ``run.log``, ``TensorBoardTracker.log`` -> ``writer.add_scalar``): a logger called
  from inside another hooked one is not read again.

A figure is recorded when the logger is called, before the logger runs (its own time is not in the
figure's interval); what is recorded, and which figures count as rates, is
:meth:`runtime_guard.observe.figures.FiguresObserver.on_figures`'s. Reading a call's arguments never
raises: a call whose figures cannot be read is passed on unread.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from runtime_guard.observe import Observer, observed_call
from runtime_guard.observe.figures import FiguresObserver
from runtime_guard.observe.services import ProbeServices
from runtime_guard.observe.state import ProbeState
from runtime_guard.undo import patch_function

#: Figures read from one logger call: (name, value) pairs.
Figures = list[tuple[str, Any]]


def _argument(args: tuple[Any, ...], kwargs: Mapping[str, Any], position: int, name: str) -> Any:
    """The argument at ``position`` (0 is ``self``) or passed as ``name``; ``None`` when neither."""
    return args[position] if len(args) > position else kwargs.get(name)


def _flat(values: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """The leaves of a (nested) mapping as ``("outer/inner", value)``: wandb logs nested dicts as sections."""
    if not isinstance(values, Mapping):
        return
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            yield from _flat(value, f"{name}/")
        else:
            yield name, value


def _mapping_at(position: int, name: str) -> Callable[[tuple[Any, ...], Mapping[str, Any]], Figures]:
    """A reader of a call whose figures are one mapping argument (wandb's ``data``, Accelerate's ``values``)."""
    return lambda args, kwargs: list(_flat(_argument(args, kwargs, position, name)))


def _scalar(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Figures:
    """``add_scalar(tag, scalar_value, ...)``: one figure."""
    tag = _argument(args, kwargs, 1, "tag")
    return [(tag, _argument(args, kwargs, 2, "scalar_value"))] if isinstance(tag, str) else []


def _scalars(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Figures:
    """``add_scalars(main_tag, tag_scalar_dict, ...)``: each figure as ``main_tag/tag``."""
    main = _argument(args, kwargs, 1, "main_tag")
    return list(_flat(_argument(args, kwargs, 2, "tag_scalar_dict"), f"{main}/")) if isinstance(main, str) else []


@dataclass(frozen=True)
class Logger:
    """A logging method: the module that defines its class, the class, the method names to hook (the first
    the class has), the name the card gives it, and the reader of a call's figures."""

    module: str
    cls: str
    methods: tuple[str, ...]
    name: str
    figures: Callable[[tuple[Any, ...], Mapping[str, Any]], Figures]

    def read(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Figures:
        """The call's figures; ``[]`` when its arguments are not what this logger takes."""
        try:
            return self.figures(args, kwargs)
        except Exception:  # noqa: BLE001 - arguments the logger will refuse itself: nothing to read
            return []


LOGGERS = (
    Logger("wandb.sdk.wandb_run", "Run", ("_log", "log"), "wandb.log", _mapping_at(1, "data")),
    Logger("torch.utils.tensorboard.writer", "SummaryWriter", ("add_scalar",), "SummaryWriter.add_scalar", _scalar),
    Logger("torch.utils.tensorboard.writer", "SummaryWriter", ("add_scalars",), "SummaryWriter.add_scalars",
           _scalars),
    Logger("tensorboardX.writer", "SummaryWriter", ("add_scalar",), "tensorboardX add_scalar", _scalar),
    Logger("tensorboardX.writer", "SummaryWriter", ("add_scalars",), "tensorboardX add_scalars", _scalars),
    Logger("accelerate.accelerator", "Accelerator", ("log",), "Accelerator.log", _mapping_at(1, "values")),
)


def loaded_loggers() -> list[tuple[Logger, type, str]]:
    """The :data:`LOGGERS` whose module the program imported: (logger, its class, the method to hook)."""
    from runtime_guard.discover import class_of

    found = []
    for logger in LOGGERS:
        cls = class_of(logger.module, logger.cls)
        method = next((m for m in logger.methods if callable(getattr(cls, m, None))), None) if cls else None
        if cls is not None and method is not None:
            found.append((logger, cls, method))
    return found


class LoggersObserver(Observer):
    """The hooked loggers' calls on the loop's thread: their figures go to ``figures`` (ACC903)."""

    def __init__(self, state: ProbeState, services: ProbeServices, figures: FiguresObserver) -> None:
        super().__init__(state, services)
        self.figures = figures
        self._modules_seen = -1  # len(sys.modules) when the loggers were last looked up
        self._logger_depth = 0  # hooked logger calls in progress (Accelerator.log -> wandb Run.log: read once)

    def hook_loggers(self) -> None:
        """Hook the loggers the program has imported and that are not hooked yet: at install, then at each
        update while probing, since a script may import its logger after the probe attached (inside the loop,
        after its first group). Looked up again only when ``sys.modules`` changed size: nothing is imported
        here."""
        s = self.state
        if len(sys.modules) == self._modules_seen:
            return
        self._modules_seen = len(sys.modules)
        record = s.record
        for logger, cls, method in loaded_loggers():
            if logger.name in record.loggers:
                continue
            patch_function(s.undo, (cls,), method, self, s.thread,
                           observed_call(f"{logger.name} wrapper",
                                         functools.partial(LoggersObserver.observe_logger, logger=logger)))
            record.loggers.append(logger.name)

    def observe_logger(self, call: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], *,
                       logger: Logger) -> Any:
        """A call of ``logger`` (``undo.patch_function``): its figures, then the user's call, unchanged."""
        if self._logger_depth == 0 and self.services.entry():
            figures = logger.read(args, kwargs)
            if figures:
                self.figures.on_figures(dict(figures), source=logger.name)
        self._logger_depth += 1
        try:
            return call(*args, **kwargs)
        finally:
            self._logger_depth -= 1
