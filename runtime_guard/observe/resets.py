"""Gradient resets: ``zero_grad`` of the optimizer, the model and a prepared optimizer, wrapped on
the instances; a reset is judged by fingerprints before and after."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from runtime_guard.events import RESET
from runtime_guard.observe import Observer


class ResetObserver(Observer):
    """Gradient resets: the wrappers of ``zero_grad`` on the optimizer, the model and a prepared optimizer."""

    def zero_grad_wrapper(self, source: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """A wrapper maker for a ``zero_grad`` method: each call is a reset event from ``source``, judged by the
        grads' fingerprints before and after."""
        def make(original: Callable[..., Any]) -> Callable[..., Any]:
            @functools.wraps(original)
            def zero_grad(*args: Any, **kwargs: Any) -> Any:
                if not self.services.entry():
                    return original(*args, **kwargs)
                before, result, after = self.services.around_grads(original, args, kwargs)
                self.services.event(
                    RESET, source=source, prepared=self.state.prepared_zero_depth > 0,
                    zeroed=not before.all_zero and after.all_zero, changed=not before.same_values(after),
                )
                return result

            return zero_grad

        return make

    def prepared_zero_wrapper(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """The wrapper of an Accelerate-prepared optimizer's ``zero_grad``: the reset it makes is marked
        ``prepared`` (it may skip off the boundary)."""
        @functools.wraps(original)
        def zero_grad(*args: Any, **kwargs: Any) -> Any:
            self.state.prepared_zero_depth += 1
            try:
                return original(*args, **kwargs)
            finally:
                self.state.prepared_zero_depth -= 1

        return zero_grad
