"""Everything the guard installs is undone in LIFO order from one list.

The guard is a guest in the user's process: each hook handle, instance wrapper and
module-attribute patch is recorded with the action that removes it, so that exit,
exception and auto-detach all go through the same path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_MISSING = object()


class UndoStack:
    """A LIFO list of removal actions.

    ``run()`` calls every action once, newest first, and keeps going when one raises (the
    first error is re-raised at the end, after everything else was removed).
    """

    def __init__(self) -> None:
        self._actions: list[tuple[str, Callable[[], None]]] = []

    def push(self, what: str, action: Callable[[], None]) -> None:
        """Record ``action`` (no arguments) that removes the thing described by ``what``."""
        self._actions.append((what, action))

    def __len__(self) -> int:
        return len(self._actions)

    def run(self) -> None:
        """Remove everything, newest first. Raises the first error after running all actions."""
        first_error: BaseException | None = None
        while self._actions:
            _, action = self._actions.pop()
            try:
                action()
            except BaseException as error:  # noqa: BLE001 - keep removing the rest
                first_error = first_error or error
        if first_error is not None:
            raise first_error


def wrap_instance_method(
    undo: UndoStack, obj: Any, name: str, make_wrapper: Callable[[Callable[..., Any]], Callable[..., Any]]
) -> None:
    """Replace ``obj.name`` by ``make_wrapper(current bound method)`` on the instance only.

    Restoring puts back the exact previous instance-dict state: the earlier instance
    attribute (e.g. the ``step`` wrapper an LR scheduler installs on its optimizer), or no
    attribute at all, so the class method shows through again.
    """
    previous = obj.__dict__.get(name, _MISSING)
    wrapper = make_wrapper(getattr(obj, name))
    setattr(obj, name, wrapper)

    def restore() -> None:
        if previous is _MISSING:
            if obj.__dict__.get(name) is wrapper:
                delattr(obj, name)
        else:
            setattr(obj, name, previous)

    undo.push(f"{type(obj).__name__}.{name} wrapper", restore)


def patch_module_attribute(undo: UndoStack, module: Any, name: str, replacement: Any) -> None:
    """Set ``module.name = replacement`` and record putting the original back."""
    original = getattr(module, name)
    setattr(module, name, replacement)
    undo.push(f"{module.__name__}.{name} patch", lambda: setattr(module, name, original))
