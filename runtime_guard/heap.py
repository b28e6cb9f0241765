"""Live objects of given classes: near the loop, else among all the objects the collector tracks.

Near the loop is reachable from the stack; else all the objects the garbage collector tracks.

The guard looks for the loop's optimizer, scheduler, scaler, ``torch.compile`` wrapper and weight
copies inside the script's first forward, where a process that imported transformers holds 300k+
objects: one pass over them costs 50-100 ms and a full ``gc.collect()`` more, as much as a small
model's microbatch (issue 35: the first probed microbatch must stay within 1.2x of the plain one).
:func:`near_the_loop` searches first from the frames of the calling thread (the loop's locals, its
``self``, the script's globals), breadth first and bounded; :func:`live_instances` is the full pass,
for what the stack does not reach (a loader iterator held only by a running ``for``) or when the
search ran over its bound.

Both match an object by its type: :func:`live_instances` expands the wanted classes once to every
loaded subclass (an instance's class is always loaded, and ``type.__subclasses__`` lists them), one set
lookup per object over 300k of them; :func:`near_the_loop` visits far fewer objects of a few hundred
types and decides each type on first sight (:class:`TypeSet`): expanding ``nn.Module`` walks every
module class transformers defines, 5 ms of the first microbatch. Discovery asks for several kinds
in a row (optimizers, a ``torch.compile`` wrapper, weight copies); inside :func:`one_walk` the stack
is walked once and each search filters the same objects. ``isinstance`` also honours a ``__class__``
that differs from ``type(obj)`` (a proxy) and classes registered with an ABC; none of the classes the
guard looks for is an ABC, and a proxy of one of them is not the object the loop trains with.

What the stack search follows: frame locals, the program's globals, dict values, list/tuple/set items,
``__dict__`` and ``__slots__`` values, a function's closure cells and default arguments, what a
``functools.partial`` binds. What it misses (the optimizer is then found by the full pass; a scheduler,
scaler or compiled wrapper reachable only that way is not found while the optimizer is near): objects held
only by another module's globals or by class attributes (modules and classes are leaves), by a container
wider than ``WIDE``, by a ``deque`` or another C container, by the value stack of a running ``for`` (a
loader's iterator: the full pass finds it), and by a bound method kept as a callable (``lr_step =
scheduler.step``): deliberately, since calls through a method bound before the probe attached bypass the
probe's wrapper of that method, so its object found that way would be counted as never stepped.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import sys
import sysconfig
import threading
import types
from collections import deque
from collections.abc import Iterable, Iterator

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
           types.CodeType, types.FrameType, str, bytes, int, float, complex, bool, type(None), functools.partial)
_CONTAINERS = (dict, list, tuple, set, frozenset)
#: ``sys.getrefcount`` of a frame's locals snapshot held by nothing but the frame (see :func:`_locals_of`)
_ONLY_THE_FRAME = 3
#: Modules whose frames' locals and globals are not the program's (the guard's own objects are no candidates).
_NOT_THE_PROGRAM = ("runtime_guard", "accumlint")

#: where the standard library, installed packages and their console scripts (``bin/pytest``) live: their
#: modules' globals (``threading``'s table of every live thread, a test runner's session) hold no training
#: loop's objects, and following them can pass the walk's bound in a long-lived process; their frames'
#: locals are still read, up to the program's outermost frame
_LIBRARY_DIRS = tuple(sorted({path for key in ("stdlib", "platstdlib", "purelib", "platlib", "scripts")
                              if (path := sysconfig.get_paths().get(key))}))


class TypeSet:
    """The types that are one of ``classes`` or a subclass of one, or one of ``exact``: ``kind in types``
    decides each type once (``issubclass``) and remembers it, instead of expanding ``classes`` to every
    loaded subclass up front (:func:`subclasses`)."""

    def __init__(self, classes: Iterable[type], exact: Iterable[type] = ()) -> None:
        self._classes = tuple(classes)
        self._known: dict[type, bool] = dict.fromkeys(exact, True)

    def __contains__(self, kind: type) -> bool:
        known = self._known.get(kind)
        if known is None:
            known = self._known[kind] = issubclass(kind, self._classes)
        return known


#: Per thread, inside :func:`one_walk`: the objects of the first walk from the stack and its limit (``None``:
#: the walk ran over it), shared by the searches made meanwhile; empty outside. Per thread: a walk of
#: another thread's stack (a probe in a worker thread, still inside its block) is not this thread's.
_walks = threading.local()


def _shared_walk() -> list[tuple[list[object] | None, int]]:
    """This thread's shared walk (see :data:`_walks`)."""
    shared = getattr(_walks, "shared", None)
    if shared is None:
        shared = _walks.shared = []
    return shared


@contextlib.contextmanager
def one_walk() -> Iterator[None]:
    """Inside the block, :func:`near_the_loop` walks the stack once (at its first call) and every later
    search filters the objects of that walk (the caller's frames are the same). The walk's objects are
    dropped at the end of the block. Nested blocks share the outermost one's walk."""
    shared = _shared_walk()
    if shared:
        yield
        return
    shared.append((None, -1))  # no walk yet
    try:
        yield
    finally:
        shared.clear()


def near_the_loop(classes: Iterable[type], *, exact: Iterable[type] = (),
                  limit: int = NEAR_LIMIT) -> list[object] | None:
    """The objects of ``classes`` (or a subclass) or of ``exact`` types reachable from the calling thread's
    stack: the locals of every frame and the globals of the program's frames, then, breadth first, the
    values of dicts, the items of lists, tuples and sets (of at most ``WIDE`` items), a closure's cells
    and the ``__dict__`` of other objects (not into modules, classes, tensors or a function's globals).
    Every object found is alive (reachable), so no collection is needed. ``None`` when more than
    ``limit`` objects were visited: the caller then falls back to :func:`live_instances`. Inside
    :func:`one_walk` the walk is made once."""
    shared = _shared_walk()
    if shared:
        objects, walked_limit = shared[0]
        if walked_limit != limit:
            objects = _reachable(sys._getframe(1), limit)
            shared[0] = (objects, limit)
    else:
        objects = _reachable(sys._getframe(1), limit)
    if objects is None:
        return None
    wanted = TypeSet(classes, exact)
    matching = {kind for kind in {type(obj) for obj in objects} if kind in wanted}  # each type decided once
    return [obj for obj in objects if type(obj) in matching]


def _reachable(frame: types.FrameType | None, limit: int) -> list[object] | None:
    """Every object :func:`near_the_loop` visits from ``frame`` outwards, breadth first, or ``None`` beyond
    ``limit`` of them."""
    queue: deque[object] = deque()
    globals_seen: set[int] = set()
    for read in _the_programs_frames(frame):
        queue.extend(_locals_of(read))
        if _is_the_programs(read) and id(read.f_globals) not in globals_seen:
            globals_seen.add(id(read.f_globals))
            # the import system's names (``__loader__``: under pytest its assertion rewriter, which holds the
            # session and every test report) are not the program's
            queue.extend(value for name, value in read.f_globals.items() if not _is_dunder(name))
    seen: set[int] = set()
    visited: list[object] = []
    # per type: how to follow it ("leaf", "function", "partial", "object": its __dict__, or its container
    # base) and its __slots__' member descriptors
    how: dict[type, tuple[type | str, tuple[types.MemberDescriptorType, ...]]] = {}
    while queue:
        obj = queue.popleft()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if len(seen) > limit:
            return None
        visited.append(obj)
        kind = type(obj)
        known = how.get(kind)
        if known is None:
            known = how[kind] = (_how_to_follow(kind), _slots_of(kind))
        base, slots = known
        if base == "leaf":
            continue
        if base == "function":  # a closure's cells and the defaults (a step function that calls the model)
            queue.extend(cell.cell_contents for cell in obj.__closure__ or () if _filled(cell))  # type: ignore[attr-defined]
            queue.extend(obj.__defaults__ or ())  # type: ignore[attr-defined]
            queue.extend((obj.__kwdefaults__ or {}).values())  # type: ignore[attr-defined]
            continue
        if base == "partial":  # ``functools.partial(train_step, model, optimizer=opt)``: what it binds
            queue.append(obj.func)  # type: ignore[attr-defined]
            queue.extend(obj.args)  # type: ignore[attr-defined]
            queue.extend(obj.keywords.values())  # type: ignore[attr-defined]
            continue
        for slot in slots:  # ``__slots__`` values (a slotted dataclass holding the train state); unset ones raise
            try:
                queue.append(slot.__get__(obj, kind))
            except AttributeError:
                pass
        if base != "object":  # the base class's own length and items: no user __len__ or __iter__ runs
            if base.__len__(obj) <= WIDE:  # type: ignore[attr-defined]
                queue.extend(dict.values(obj) if base is dict else base.__iter__(obj))  # type: ignore[arg-type,attr-defined]
        else:
            try:
                attributes = object.__getattribute__(obj, "__dict__")
            except Exception:  # noqa: BLE001 - no __dict__ (slots, C objects) or one that fails: not followed
                continue
            if type(attributes) is dict:
                queue.extend(attributes.values())
    return visited


def _the_programs_frames(frame: types.FrameType | None) -> list[types.FrameType]:
    """The frames whose locals :func:`_reachable` reads, innermost first: not the guard's own, and none
    above the outermost frame of the program (a test runner, ``runpy``, a notebook kernel: the launcher
    holds no training loop's objects but can hold a lot, e.g. every test report of a long pytest session).
    When no frame is the program's (a framework's loop run from its own command line), every frame is read."""
    frames: list[types.FrameType] = []
    while frame is not None:
        if not str(frame.f_globals.get("__name__", "")).startswith(_NOT_THE_PROGRAM):
            frames.append(frame)
        frame = frame.f_back
    outermost = max((i for i, f in enumerate(frames) if _is_the_programs(f)), default=len(frames) - 1)
    return frames[:outermost + 1]


def _is_the_programs(frame: types.FrameType) -> bool:
    """Whether ``frame`` runs the program's code: not torch's, the standard library's or an installed
    package's (their modules' globals, e.g. ``threading``'s table of every live thread, hold no loop's objects)."""
    package = str(frame.f_globals.get("__name__", "")).partition(".")[0]
    return package != "torch" and package not in sys.stdlib_module_names \
        and not frame.f_code.co_filename.startswith(_LIBRARY_DIRS + ("<frozen ",))  # frozen: runpy, importlib


def _is_dunder(name: object) -> bool:
    return isinstance(name, str) and name.startswith("__") and name.endswith("__")


def _how_to_follow(kind: type) -> type | str:
    """How :func:`_reachable` follows an object of type ``kind``: "leaf" (not at all), "function" (its closure
    and defaults), "partial" (what it binds), the container base class whose items it reads, or "object" (its
    ``__dict__``; slots are read apart)."""
    if kind is types.FunctionType:
        return "function"
    if kind is functools.partial:
        return "partial"
    if issubclass(kind, _LEAVES) or issubclass(kind, torch.Tensor):
        return "leaf"
    return next((b for b in _CONTAINERS if issubclass(kind, b)), "object")


def _slots_of(kind: type) -> tuple[types.MemberDescriptorType, ...]:
    """The member descriptors of the ``__slots__`` that ``kind`` and its bases declare (read through the
    descriptor: no ``__getattr__`` or property of the program runs)."""
    return tuple(value for cls in kind.__mro__ if "__slots__" in vars(cls)  # (mangled private names included)
                 for value in vars(cls).values() if type(value) is types.MemberDescriptorType)


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
