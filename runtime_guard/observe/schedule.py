"""LR scheduler steps: ``scheduler.step`` wrapped on the instance, with the learning rates before and
after, the scheduler's position after (``last_epoch`` of a torch ``LRScheduler``: a step given an
index, ``sched.step(i)``, sets it to that index) and the framework that called it."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from runtime_guard import frameworks
from runtime_guard.events import SCHEDULER_STEP
from runtime_guard.observe import Observer
from runtime_guard.user_frames import caller_outside_guard, warnings_at_caller


class ScheduleObserver(Observer):
    """LR scheduler steps: the wrapper of ``scheduler.step``."""

    def scheduler_wrapper(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """The wrapper of ``scheduler.step``: the learning rates before and after, its position and caller."""
        @functools.wraps(original)
        def step(*args: Any, **kwargs: Any) -> Any:
            if not self.services.entry():
                return original(*args, **kwargs)
            before = self.services.lrs()
            caller = frameworks.scheduler_caller(caller_outside_guard())  # the guard's own frames skipped
            with warnings_at_caller():
                result = original(*args, **kwargs)
            self.services.event(SCHEDULER_STEP, lr_before=before, lr_after=self.services.lrs(), by=caller,
                        position=_position(self.state.scheduler))
            return result

        return step


def _position(scheduler: Any) -> int | None:
    """The scheduler's ``last_epoch`` (its count of steps, or the index a step was given), when an int."""
    position = getattr(scheduler, "last_epoch", None)
    return position if isinstance(position, int) and not isinstance(position, bool) else None
