"""``at="epoch_end"``: watching the loader until the window before the epoch's end, where the
hooks go in, and marking the epoch's end in the trace."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from accumlint import frameworks as fw
from runtime_guard import frameworks
from runtime_guard.epoch import LoaderWatch, loader_length
from runtime_guard.events import EPOCH_END
from runtime_guard.observe import Observer
from runtime_guard.observe.services import ProbeServices
from runtime_guard.observe.state import ProbeState


class PlacementObserver(Observer):
    """``at="epoch_end"``: the loader watch; ``install()`` puts the hooks in at the window's first batch."""

    def __init__(self, state: ProbeState, services: ProbeServices, install: Callable[[], None]) -> None:
        super().__init__(state, services)
        self.install = install

    def place_at_epoch_end(self) -> bool:
        """Watch the loader for ``at="epoch_end"``. True: the hooks go in when the loader yields
        the first batch of the window; False: probe from the start (the card says why).

        Raises:
            ValueError: when A is not known.
        """
        s = self.state
        rec = s.record
        rec.at_epoch_end = True
        a = rec.accumulation_steps
        if a is None:
            raise ValueError("at='epoch_end' needs A: pass accumulation_steps= (or the Accelerator)")
        n = rec.loader_length = loader_length(s.loader)
        rec.loader_unprepared = not frameworks.is_accelerate(s.loader)
        if n is None:
            rec.epoch_unobserved = "the loader has no len(): the epoch's end cannot be placed; probed from the start"
            return False
        watch = LoaderWatch(self._on_batch, self._on_epoch_end, self.services.hook_failed)
        why = watch.watch(s.undo, s.loader)
        if why is not None:
            rec.epoch_unobserved = f"the loader cannot be watched: {why}; probed from the start"
            return False
        s.watch = watch
        s.undo.push("loader watch callbacks", lambda: setattr(watch, "active", False))
        full = n // a
        s.window_start = (full - min(s.n_groups, full)) * a
        return True

    def adopt_iterator(self, iterator: Any, yielded: int) -> bool:
        """``at="epoch_end"`` attached after the first epoch began: watch its running iterator
        too, which has already yielded ``yielded`` batches (its class is swapped in place and
        restored on detach). Returns False when it cannot be watched (nothing changed)."""
        s = self.state
        if s.watch is None or not s.attached:
            return False
        return s.watch.adopt(s.undo, iterator, yielded)

    def adopt_read_ahead(self, iterator: Any, yielded: int, last: bool) -> bool:
        """As :meth:`adopt_iterator`, where the watched loader reads ``iterator``, its DataLoader's, one batch
        ahead of the loop (``frameworks.reads_ahead_of``; ``last``: ``frameworks.read_ahead_last``): the
        loop's batches are counted a batch behind that iterator's, its epoch end is the loader's own
        (``LoaderWatch.adopt_read_ahead``)."""
        s = self.state
        if s.watch is None or not s.attached:
            return False
        return s.watch.adopt_read_ahead(s.undo, s.loader, iterator, yielded, last,
                                            fw.accelerate.READ_AHEAD_END_METHOD)

    def _on_batch(self, epoch: int, index: int) -> None:
        s = self.state
        s.position = (epoch, index)
        if not s.hooks_installed and not s.detached and not s.done and index == s.window_start:
            s.record.watched_epoch = epoch
            self.install()

    def _on_epoch_end(self, epoch: int, batches: int) -> None:
        rec = self.state.record
        if epoch == rec.watched_epoch and rec.epoch_end_seq is None and self.services.entry():
            rec.epoch_end_seq = self.services.event(EPOCH_END, epoch=epoch, batches=batches).seq
