"""Watching a data loader's epochs without touching its batches (ACC005 at an epoch end).

The probe placed at an epoch end (``probe(..., loader=train_loader, at="epoch_end")``) needs to
know which batch of which epoch each microbatch is, and when an epoch's iterator is
exhausted. ``for batch in loader`` looks ``__iter__`` up on the *type*, so an instance
attribute cannot observe it: the loader's ``__class__`` is swapped for a subclass (same
layout, ``__slots__ = ()``) whose ``__iter__`` returns the original iterator behind a
forwarding proxy. Nothing else changes: the same iterator yields the same batches in the
same order, the guard draws no random numbers, and ``isinstance(loader, type(loader))``
still holds. Detaching puts the original class back (the instance dict is never touched);
iterators handed out while attached keep forwarding, silently, after detach.

A script probe attaches after the first epoch started: its running ``DataLoader`` iterator
is adopted by swapping *its* class the same way (restored on detach).

An Accelerate-prepared loader (``DataLoaderShard``, accelerate 1.15.0 data_loader.py) answers
``__class__`` with a read-only property that names the wrapped ``DataLoader``'s class; the
swap goes through ``object``'s own ``__class__`` descriptor, so ``loader.__class__`` still
answers as before. Its iteration is a generator one batch behind its DataLoader's iterator: a
running one is counted through that iterator and ends at the loader's ``end()``
(:meth:`LoaderWatch.adopt_read_ahead`). The watch is the guard's code running inside the user's ``for`` loop:
whatever fails in it (a class that cannot be swapped, a callback) is reported to
``on_failure`` and the loop gets its batches as without the watch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from runtime_guard.contain import OnFailure, contained_hook
from runtime_guard.undo import UndoStack

#: ``on_batch(epoch, index)``: batch ``index`` (0-based) of epoch ``epoch`` was just yielded.
OnBatch = Callable[[int, int], None]
#: ``on_end(epoch, batches)``: epoch ``epoch``'s iterator is exhausted after ``batches`` batches.
OnEnd = Callable[[int, int], None]


#: ``object``'s own ``__class__`` setter: a class's ``__class__`` property (Accelerate's) cannot hide it.
_SET_CLASS = object.__dict__["__class__"].__set__


def loader_length(loader: Any) -> int | None:
    """``len(loader)`` (batches per epoch), or ``None`` when the loader has no length
    (an iterable-style dataset, a generator)."""
    try:
        return int(len(loader))
    except (TypeError, NotImplementedError):
        return None


class LoaderWatch:
    """Counts the epochs and batches a loader yields and reports them to two callbacks.

    Epoch ``e`` is the ``e``-th iterator created from the loader while it is watched
    (0-based; an adopted running iterator is epoch 0). Once :attr:`active` is False the
    wrappers only forward.
    """

    def __init__(self, on_batch: OnBatch, on_end: OnEnd, on_failure: OnFailure) -> None:
        # the callbacks run inside the user's loop: their failures go to on_failure
        self.on_batch = contained_hook(on_failure, "loader watch (batch)", on_batch)
        self.on_end = contained_hook(on_failure, "loader watch (epoch end)", on_end)
        self.on_failure = on_failure
        self.active = True
        self.epochs = 0  # iterators started so far

    def _new_epoch(self) -> int:
        epoch = self.epochs
        self.epochs += 1
        return epoch

    def _yielded(self, epoch: int, index: int) -> None:
        if self.active:
            self.on_batch(epoch, index)

    def _exhausted(self, epoch: int, batches: int) -> None:
        if self.active:
            self.on_end(epoch, batches)

    def watch(self, undo: UndoStack, loader: Any) -> str | None:
        """Swap ``loader``'s class for a watching subclass (restored by ``undo``).

        Returns:
            ``None`` on success, else why the loader cannot be watched (e.g. a ``list``,
            whose class cannot be swapped).
        """
        original = type(loader)
        watch = self

        def __iter__(self: Any) -> Iterator[Any]:  # noqa: N807 - the iteration protocol
            iterator = original.__iter__(self)  # the user's: its exceptions are the loop's
            try:
                # the loader's own iterator object, its class swapped back at detach (no guard type left
                # in the program after the probe); a forwarding wrapper only when its class is fixed
                if watch.adopt(undo, iterator, 0):
                    return iterator
                return _Watched(iterator, watch, watch._new_epoch(), 0)
            except Exception as error:  # noqa: BLE001 - the guard's failure: the epoch goes unwatched
                watch.on_failure("loader watch (new epoch)", error)
                return iterator

        try:
            subclass = type(original.__name__, (original,), {"__iter__": __iter__, "__slots__": (),
                                                             "__module__": original.__module__})
            _SET_CLASS(loader, subclass)
        except Exception as error:  # noqa: BLE001 - e.g. a list, a final class, a slots layout
            return f"its class {original.__name__} cannot be wrapped ({type(error).__name__}: {error})"
        undo.push(f"{original.__name__} epoch watch", lambda: _restore_class(loader, subclass, original))
        return None

    def adopt(self, undo: UndoStack, iterator: Any, yielded: int) -> bool:
        """Watch an iterator that already yielded ``yielded`` batches (epoch 0), in place.

        Returns:
            False when its class cannot be swapped (nothing was changed).
        """
        epoch = self._new_epoch()
        if not _swap_next(undo, iterator, yielded, lambda count: self._yielded(epoch, count - 1),
                          lambda count: self._exhausted(epoch, count)):
            self.epochs -= 1
            return False
        if yielded:
            self._yielded(epoch, yielded - 1)
        return True

    def adopt_read_ahead(self, undo: UndoStack, loader: Any, iterator: Any, yielded: int, last: bool,
                         end: str) -> bool:
        """Watch the running epoch (epoch 0) of ``loader``, which reads its DataLoader one batch ahead of
        the loop (``frameworks.reads_ahead_of``) and runs its own iteration, a generator, whose class
        cannot be swapped. ``iterator`` is that DataLoader's iterator, in place: it has yielded
        ``yielded`` batches and ``last`` says whether it ran out (the loop then holds the epoch's last
        batch, else the one before its latest). Each batch it yields means the loop gets the one before;
        its exhaustion, the epoch's last batch; the loop's epoch end is the loader's ``end`` method,
        called when the loop asks for a batch after the last (a subclass of ``loader``'s class, which
        :meth:`watch` may have swapped already; both restored by ``undo``). An ``end`` after a later
        epoch began is not this epoch's. As read in accelerate 1.15.0 ``data_loader.py``
        ``DataLoaderShard.__iter__``: ``next(dataloader_iter)`` before each ``yield current_batch``, then,
        on its ``StopIteration``, the last batch yielded, ``self.end()`` when the loop resumes the
        generator; the names are ``accumlint.frameworks.accelerate``'s ``READ_AHEAD_*``.

        Returns:
            False when a class cannot be swapped (nothing was changed).
        """
        epoch = self._new_epoch()
        held = [yielded if last else None]  # the loop's batches once the inner iterator ran out
        watch = self

        def stopped(count: int) -> None:
            held[0] = count
            watch._yielded(epoch, count - 1)

        def ended(self: Any, *args: Any, **kwargs: Any) -> Any:
            if held[0] is not None and watch.epochs == epoch + 1:
                batches, held[0] = held[0], None
                watch._exhausted(epoch, batches)
            return getattr(super(subclass, self), end)(*args, **kwargs)

        original = type(loader)
        try:
            subclass = type(original.__name__, (original,), {end: ended, "__slots__": (),
                                                             "__module__": original.__module__})
            _SET_CLASS(loader, subclass)
        except Exception:  # noqa: BLE001 - a class that cannot be swapped: the epoch goes unwatched
            self.epochs -= 1
            return False
        undo.push(f"{original.__name__} epoch end watch", lambda: _restore_class(loader, subclass, original))
        if not _swap_next(undo, iterator, yielded, lambda count: self._yielded(epoch, count - 2) if count > 1 else None,
                          stopped):
            _restore_class(loader, subclass, original)
            self.epochs -= 1
            return False
        if yielded > (0 if last else 1):
            self._yielded(epoch, yielded - (1 if last else 2))
        return True


def _swap_next(undo: UndoStack, iterator: Any, yielded: int, on_item: Callable[[int], None],
               on_stop: Callable[[int], None]) -> bool:
    """Swap ``iterator``'s class (restored by ``undo``) for one whose ``__next__`` calls ``on_item(count)``
    after each item and ``on_stop(count)`` at its exhaustion, ``count`` the items it yielded, from
    ``yielded`` on. False when its class cannot be swapped (a generator, a C iterator; nothing changed)."""
    original = type(iterator)
    count = [yielded]

    def __next__(self: Any) -> Any:  # noqa: N807 - the iteration protocol
        try:
            item = original.__next__(self)
        except StopIteration:
            on_stop(count[0])
            raise
        count[0] += 1
        on_item(count[0])
        return item

    try:
        subclass = type(original.__name__, (original,), {"__next__": __next__, "__slots__": (),
                                                         "__module__": original.__module__})
        _SET_CLASS(iterator, subclass)
    except Exception:  # noqa: BLE001 - a generator, a C iterator: the caller falls back
        return False
    undo.push(f"{original.__name__} iterator watch", lambda: _restore_class(iterator, subclass, original))
    return True


def _restore_class(obj: Any, installed: type, original: type) -> None:
    if type(obj) is installed:
        _SET_CLASS(obj, original)


class _Watched:
    """A forwarding iterator: the same items, in the same order; counts them."""

    __slots__ = ("_it", "_watch", "_epoch", "_count")

    def __init__(self, iterator: Iterator[Any], watch: LoaderWatch, epoch: int, count: int) -> None:
        self._it = iterator
        self._watch = watch
        self._epoch = epoch
        self._count = count

    def __iter__(self) -> _Watched:
        return self

    def __next__(self) -> Any:
        try:
            item = next(self._it)
        except StopIteration:
            self._watch._exhausted(self._epoch, self._count)
            raise
        self._count += 1
        self._watch._yielded(self._epoch, self._count - 1)
        return item

    def __len__(self) -> int:
        return len(self._it)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._it, name)
