"""``at="epoch_end"``: watching the loader until the window before the epoch's end, where the
hooks go in, and marking the epoch's end in the trace."""

from __future__ import annotations

from typing import Any

from accumlint import frameworks as fw
from runtime_guard import frameworks
from runtime_guard.epoch import LoaderWatch, loader_length
from runtime_guard.events import EPOCH_END


class PlacementObserver:
    """Mixed into :class:`runtime_guard.probe.Probe` (``at="epoch_end"``); works on the probe's state."""

    def _place_at_epoch_end(self) -> bool:
        """Watch the loader for ``at="epoch_end"``. True: the hooks go in when the loader yields
        the first batch of the window; False: probe from the start (the card says why).

        Raises:
            ValueError: when A is not known.
        """
        rec = self.record
        rec.at_epoch_end = True
        a = rec.accumulation_steps
        if a is None:
            raise ValueError("at='epoch_end' needs A: pass accumulation_steps= (or the Accelerator)")
        n = rec.loader_length = loader_length(self.loader)
        rec.loader_unprepared = not frameworks.is_accelerate(self.loader)
        if n is None:
            rec.epoch_unobserved = "the loader has no len(): the epoch's end cannot be placed; probed from the start"
            return False
        watch = LoaderWatch(self._on_batch, self._on_epoch_end, self._hook_failed)
        why = watch.watch(self._undo, self.loader)
        if why is not None:
            rec.epoch_unobserved = f"the loader cannot be watched: {why}; probed from the start"
            return False
        self._watch = watch
        self._undo.push("loader watch callbacks", lambda: setattr(watch, "active", False))
        full = n // a
        self._window_start = (full - min(self.n_groups, full)) * a
        return True

    def adopt_iterator(self, iterator: Any, yielded: int) -> bool:
        """``at="epoch_end"`` attached after the first epoch began: watch its running iterator
        too, which has already yielded ``yielded`` batches (its class is swapped in place and
        restored on detach). Returns False when it cannot be watched (nothing changed)."""
        if self._watch is None or not self._attached:
            return False
        return self._watch.adopt(self._undo, iterator, yielded)

    def adopt_read_ahead(self, iterator: Any, yielded: int, last: bool) -> bool:
        """As :meth:`adopt_iterator`, where the watched loader reads ``iterator``, its DataLoader's, one batch
        ahead of the loop (``frameworks.reads_ahead_of``; ``last``: ``frameworks.read_ahead_last``): the
        loop's batches are counted a batch behind that iterator's, its epoch end is the loader's own
        (``LoaderWatch.adopt_read_ahead``)."""
        if self._watch is None or not self._attached:
            return False
        return self._watch.adopt_read_ahead(self._undo, self.loader, iterator, yielded, last,
                                            fw.accelerate.READ_AHEAD_END_METHOD)

    def _on_batch(self, epoch: int, index: int) -> None:
        self._position = (epoch, index)
        if not self._hooks_installed and not self._detached and not self._done and index == self._window_start:
            self.record.watched_epoch = epoch
            self._install()

    def _on_epoch_end(self, epoch: int, batches: int) -> None:
        rec = self.record
        if epoch == rec.watched_epoch and rec.epoch_end_seq is None and self._entry():
            rec.epoch_end_seq = self._event(EPOCH_END, epoch=epoch, batches=batches).seq
