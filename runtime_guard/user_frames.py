"""Warnings attributed to the user's line, not to the guard's wrappers.

A warning that torch raises inside a call the probe wraps (``scheduler.step()`` warns with
``stacklevel=2``, i.e. at its caller, which is then the wrapper) and the guard's own
``GuardWarning`` both belong to the line of the program that made the call: the first frame
outside this package.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections.abc import Iterator
from types import FrameType

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
#: once-per-location bookkeeping for re-emitted warnings whose location is not ours (the "default" action)
_REGISTRY: dict[object, bool] = {}


_CONTEXTLIB = os.path.abspath(contextlib.__file__)


def _ours(filename: str) -> bool:
    """This package's frames, and contextlib's between them (``warnings_at_caller`` exits through it)."""
    path = os.path.abspath(filename)
    return path.startswith(_PACKAGE_DIR) or path == _CONTEXTLIB


def caller_outside_guard() -> FrameType | None:
    """The innermost frame of the call stack that is not in ``runtime_guard``."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and _ours(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def stacklevel_outside_guard() -> int:
    """The ``stacklevel`` that makes ``warnings.warn`` in the calling function point at the first frame
    outside ``runtime_guard``."""
    level, frame = 1, sys._getframe(1)
    while frame is not None and _ours(frame.f_code.co_filename):
        level, frame = level + 1, frame.f_back
    return level


@contextlib.contextmanager
def warnings_at_caller() -> Iterator[None]:
    """Re-emit the warnings raised inside the block (also when it raises), those located in this
    package at the caller's line (the user's filters and once-per-location registry then apply)."""
    caught: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield
    finally:
        _reemit(caught)


def _reemit(caught: list[warnings.WarningMessage]) -> None:
    if not caught:
        return
    frame = caller_outside_guard()
    for w in caught:
        if _ours(w.filename) and frame is not None:
            registry = frame.f_globals.setdefault("__warningregistry__", {})
            warnings.warn_explicit(w.message, w.category, frame.f_code.co_filename, frame.f_lineno,
                                   module=frame.f_globals.get("__name__"), registry=registry)
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, registry=_REGISTRY)
