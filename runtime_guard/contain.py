"""The guard's failures stay the guard's: nothing it does may raise into the user's code.

Every hook body, wrapper and discovery step runs inside one of two containers. A hook
(:func:`contained_hook`) that raises reports the error to an ``on_failure(where, error)``
callback and returns ``None`` (the program continues as without the hook; the probe records
"not observed: …" on its card). A wrapper around one of the user's calls
(:func:`call_through`) runs the user's call exactly once: its result is returned and its
exception re-raised unchanged, whatever the guard's code around it did; a failure of that code
is reported instead, and the user's call is made if the guard failed before making it.

:class:`~runtime_guard.report.GuardFindingError` (``on_finding="raise"``, asked for by the
user) and exceptions that are not ``Exception`` (``KeyboardInterrupt``) pass through.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from runtime_guard.report import GuardFindingError

#: ``on_failure(where, error)``: the guard's code at ``where`` raised ``error`` (it must not raise itself).
OnFailure = Callable[[str, Exception], None]


def describe(error: BaseException) -> str:
    """``TypeName: message`` (one line, at most 200 characters) for the card."""
    text = f"{type(error).__name__}: {error}".splitlines()[0] if str(error) else type(error).__name__
    return text if len(text) <= 200 else text[:197] + "..."


def contained_hook(on_failure: OnFailure, where: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn``, whose failures go to ``on_failure(where, error)`` instead of the caller; it then returns
    ``None`` (a hook's "change nothing")."""

    @functools.wraps(fn)
    def hook(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except GuardFindingError:
            raise
        except Exception as error:  # noqa: BLE001 - the guard's failure, never the program's
            on_failure(where, error)
            return None

    return hook


class UserCall:
    """The user's call inside a wrapper body: call it like ``original``; it remembers whether it ran,
    its result and its exception (re-raised by :func:`call_through` however the body ended).

    ``arguments`` are those :func:`call_through` calls ``original`` with when the body failed before
    calling it: the wrapper's, or what a body that derives them sets (a generator it read into a list
    is spent: the user's call gets the list)."""

    __slots__ = ("original", "arguments", "called", "result", "error")

    def __init__(self, original: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.original = original
        self.arguments = (args, kwargs)
        self.called = False
        self.result: Any = None
        self.error: BaseException | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.called = True
        try:
            self.result = self.original(*args, **kwargs)
        except BaseException as error:
            self.error = error
            raise
        return self.result


def call_through(on_failure: OnFailure, where: str, original: Callable[..., Any],
                 body: Callable[[UserCall], Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run ``body(call)``, which observes around ``call(...)`` (``original``, the user's function, called
    with ``args``/``kwargs`` or arguments derived from them), and return the user's result.

    The user's exception is re-raised unchanged (the same object), also when the guard's code raised
    after it (in a ``finally``); a failure of the guard's code goes to ``on_failure`` and ``original``
    is called here (with ``call.arguments``) when the body had not called it yet.
    """
    call = UserCall(original, args, kwargs)
    try:
        return body(call)
    except GuardFindingError:
        raise
    except Exception as error:  # noqa: BLE001 - sorted out below: the user's, or the guard's failure
        if error is call.error:
            raise
        failure = error
    # outside the except block: re-raising the user's exception gives it no __context__ of the guard's
    on_failure(where, failure)
    if call.error is not None:
        raise call.error
    if call.called:
        return call.result
    args, kwargs = call.arguments
    return original(*args, **kwargs)


def contained_wrapper(on_failure: OnFailure, where: str,
                      make_wrapper: Callable[[Callable[..., Any]], Callable[..., Any]]
                      ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A wrapper factory like ``make_wrapper`` (``original -> wrapper``, see
    :func:`runtime_guard.undo.wrap_instance_method`) whose wrappers run through :func:`call_through`:
    each call builds ``make_wrapper``'s wrapper around a fresh :class:`UserCall`."""

    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return call_through(on_failure, where, original, lambda call: make_wrapper(call)(*args, **kwargs),
                                args, kwargs)

        return wrapper

    return make
