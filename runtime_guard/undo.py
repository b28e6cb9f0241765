"""Everything the guard installs is undone in LIFO order from one list.

The guard is a guest in the user's process: each hook handle, instance wrapper and
process-wide function patch is recorded with the action that removes it, so that exit,
exception and auto-detach all go through the same path.
"""

from __future__ import annotations

import functools
import inspect
import threading
import weakref
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
    """Make calls of ``obj.name`` go through ``make_wrapper(current bound method)``; other
    instances of its class are untouched.

    Where ``name`` is a plain function of ``obj``'s class, the class gets a dispatcher that sends
    calls on ``obj`` to the wrapper and every other call to the function: ``obj.__dict__`` stays
    as it was, so ``scheduler.state_dict()`` (an LR scheduler's ``__dict__``) still pickles and a
    ``copy.deepcopy(model)`` made while probing does not carry a wrapper bound to ``model``.
    Otherwise (an instance attribute already there, e.g. the ``step`` wrapper an old LR scheduler
    installs on its optimizer; a descriptor) the wrapper goes on the instance. Restoring puts back
    the exact previous state of the class or instance dict, only where it still holds ours.
    """
    cls = type(obj)
    function = inspect.getattr_static(cls, name, None)
    try:
        target = weakref.ref(obj)
    except TypeError:  # no weak references (``__slots__``): the instance it is
        target = None
    if target is None or name in getattr(obj, "__dict__", {}) or not inspect.isfunction(function):
        _wrap_on_the_instance(undo, obj, name, make_wrapper)
        return
    # the object and the wrapper, dropped at restore: a dispatcher a later patch still calls passes through
    cell: list[Any] = [target, make_wrapper(getattr(obj, name))]

    @functools.wraps(function)
    def dispatch(self: Any, *args: Any, **kwargs: Any) -> Any:
        target, wrapper = cell
        if target is not None and self is target():
            return wrapper(*args, **kwargs)
        return function(self, *args, **kwargs)

    previous = cls.__dict__.get(name, _MISSING)
    setattr(cls, name, dispatch)

    def restore() -> None:
        cell[:] = [None, None]
        if cls.__dict__.get(name) is not dispatch:
            return  # the program patched the class meanwhile: its patch stays, ours is inert
        if previous is _MISSING:
            delattr(cls, name)
        else:
            setattr(cls, name, previous)

    undo.push(f"{cls.__name__}.{name} wrapper", restore)


def _wrap_on_the_instance(
    undo: UndoStack, obj: Any, name: str, make_wrapper: Callable[[Callable[..., Any]], Callable[..., Any]]
) -> None:
    """Replace ``obj.name`` by ``make_wrapper(current bound method)`` on the instance only."""
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


def patch_function(
    undo: UndoStack, modules: tuple[Any, ...], name: str, owner: Any, thread: int, observe: Callable[..., Any]
) -> Callable[..., Any]:
    """Replace the function ``modules[0].name`` (and the same function in each other module of
    ``modules`` that holds it) by a wrapper that calls ``observe(owner, original, args, kwargs)`` for
    the calls made on ``thread`` (the loop's) and the plain ``original`` for every other call.

    The function is process-wide: the wrapper holds ``owner`` only weakly (a reference to it kept by
    the program keeps neither the probe nor its model alive), and after undo it is a plain
    pass-through holding nothing but ``original``. Undo puts ``original`` back only where the module
    still holds the wrapper: a patch the program made meanwhile stays (over the now inert wrapper).
    ``observe`` must not hold ``owner`` itself (an unbound method). Returns the wrapper.
    """
    original = getattr(modules[0], name)
    target: list[weakref.ref[Any] | None] = [weakref.ref(owner)]

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        ref = target[0]
        live = ref() if ref is not None else None
        if live is None or threading.get_ident() != thread:
            return original(*args, **kwargs)
        return observe(live, original, args, kwargs)

    patched = [m for m in modules if getattr(m, name, None) is original]
    for module in patched:
        setattr(module, name, wrapper)

    def restore() -> None:
        target[0] = None
        for module in patched:
            if getattr(module, name, None) is wrapper:
                setattr(module, name, original)

    undo.push(f"{modules[0].__name__}.{name} patch", restore)
    return wrapper
