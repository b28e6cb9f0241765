"""Live objects of given classes: near the loop (reachable from the stack), else among all the objects
the garbage collector tracks.

The guard looks for the loop's optimizer, scheduler, scaler, ``torch.compile`` wrapper and weight
copies inside the script's first forward, where a process that imported transformers holds 300k+
objects: one pass over them costs 50-100 ms and a full ``gc.collect()`` more, as much as a small
model's microbatch (issue 35: the first probed microbatch must stay within 1.2x of the plain one).
:func:`near_the_loop` searches first from the frames of the calling thread (the loop's locals, its
``self``, the script's globals), breadth first and bounded; :func:`live_instances` is the full pass,
for what the stack does not reach (a loader iterator held only by a running ``for``) or when the
search ran over its bound.

Both match an object by its exact type: the wanted classes are expanded once to every loaded
subclass (an instance's class is always loaded, and ``type.__subclasses__`` lists them), one set
lookup per object. ``isinstance`` also honours a ``__class__`` that differs from ``type(obj)`` (a
proxy) and classes registered with an ABC; none of the classes the guard looks for is an ABC, and a
proxy of one of them is not the object the loop trains with.
"""

from __future__ import annotations

import gc
import sys
import types
from collections import deque
from collections.abc import Iterable

import torch


def subclasses(cls: type) -> set[type]:
    """``cls`` and every subclass of it loaded now (recursively)."""
    found = {cls}
    todo = [cls]
    while todo:
        for sub in type.__subclasses__(todo.pop()):
            if sub not in found:
                found.add(sub)
                todo.append(sub)
    return found


def live_instances(classes: Iterable[type], *, exact: Iterable[type] = (), collect: bool = False) -> list[object]:
    """The objects the garbage collector tracks whose type is one of ``classes`` or a subclass of one,
    or one of ``exact`` (not their subclasses), in the collector's order. ``collect``: run a full
    collection first, so that objects only unreachable cycles hold (an earlier run's) are gone (about
    0.1-0.3 s with 300k objects)."""
    wanted = set(exact)
    for cls in classes:
        wanted |= subclasses(cls)
    if collect:
        gc.collect()
    return [obj for obj in gc.get_objects() if type(obj) in wanted]


#: Objects visited at most by :func:`near_the_loop` before it gives up (a few ms per thousand).
NEAR_LIMIT = 50_000
#: Containers with more items than this are data (an in-memory dataset), not followed by :func:`near_the_loop`:
#: the loop's objects are not among them (a list of weight copies has one item per parameter tensor).
WIDE = 10_000
_LEAVES = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType,
           types.CodeType, types.FrameType, str, bytes, int, float, complex, bool, type(None))
_CONTAINERS = (dict, list, tuple, set, frozenset)
#: ``sys.getrefcount`` of a frame's locals snapshot held by nothing but the frame (see :func:`_locals_of`)
_ONLY_THE_FRAME = 3
#: Modules whose frames' locals and globals are not the program's (the guard's own objects are no candidates).
_NOT_THE_PROGRAM = ("runtime_guard", "accumlint")


def near_the_loop(classes: Iterable[type], *, exact: Iterable[type] = (),
                  limit: int = NEAR_LIMIT) -> list[object] | None:
    """The objects of ``classes`` (or a subclass) or of ``exact`` types reachable from the calling thread's
    stack: the locals of every frame and the globals of the program's frames, then, breadth first, the
    values of dicts, the items of lists, tuples and sets (of at most ``WIDE`` items), a closure's cells
    and the ``__dict__`` of other objects (not into modules, classes, tensors or a function's globals).
    Every object found is alive (reachable), so no collection is needed. ``None`` when more than
    ``limit`` objects were visited: the caller then falls back to :func:`live_instances`."""
    wanted = set(exact)
    for cls in classes:
        wanted |= subclasses(cls)
    queue: deque[object] = deque()
    globals_seen: set[int] = set()
    frame = sys._getframe(1)
    while frame is not None:
        module = str(frame.f_globals.get("__name__", ""))
        if not module.startswith(_NOT_THE_PROGRAM):
            queue.extend(_locals_of(frame))
            if not module.startswith("torch") and id(frame.f_globals) not in globals_seen:
                globals_seen.add(id(frame.f_globals))
                queue.extend(frame.f_globals.values())
        frame = frame.f_back
    seen: set[int] = set()
    found: list[object] = []
    while queue:
        obj = queue.popleft()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if len(seen) > limit:
            return None
        kind = type(obj)
        if kind in wanted:
            found.append(obj)
        if kind is types.FunctionType:  # a closure's cells (a step function that calls the model)
            queue.extend(cell.cell_contents for cell in obj.__closure__ or () if _filled(cell))  # type: ignore[attr-defined]
            continue
        if issubclass(kind, _LEAVES) or issubclass(kind, torch.Tensor):
            continue
        base = next((b for b in _CONTAINERS if issubclass(kind, b)), None)
        if base is not None:  # the base class's own length and items: no user __len__ or __iter__ runs
            if base.__len__(obj) <= WIDE:  # type: ignore[attr-defined]
                queue.extend(dict.values(obj) if base is dict else base.__iter__(obj))  # type: ignore[arg-type,attr-defined]
        else:
            try:
                attributes = object.__getattribute__(obj, "__dict__")
            except Exception:  # noqa: BLE001 - no __dict__ (slots, C objects) or one that fails: not followed
                continue
            if type(attributes) is dict:
                queue.extend(attributes.values())
    return found


def _filled(cell: types.CellType) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True


def _locals_of(frame: types.FrameType) -> list[object]:
    """The values of ``frame``'s locals. Before Python 3.13, ``frame.f_locals`` of a function's frame is a
    snapshot dict the frame keeps until it returns: it would hold this moment's values (the model, a batch,
    a loss with its graph) after the loop dropped them. When nothing but the frame holds that dict (no
    ``locals()`` result kept by the program: its reference count is the frame's, this function's and
    ``getrefcount``'s own), it is emptied again; the next reader of ``f_locals`` refills it from the frame.
    A module's or a class body's namespace, and 3.13's write-through proxy, are left alone."""
    snapshot = frame.f_locals
    values = list(snapshot.values())
    if type(snapshot) is dict and snapshot is not frame.f_globals and sys.getrefcount(snapshot) <= _ONLY_THE_FRAME:
        snapshot.clear()
    return values
