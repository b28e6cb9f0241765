"""D > 1: the guard's own gloo group, the ranks' probe settings compared at attach, and what is
gathered across replicas (gradient checksums at each update, row hashes of the examples and loss weights).

The examples are fingerprinted as the loader yielded them (ACC403 asks whether the replicas *load* the
same samples): the loop may change them before the model (augmentation noise seeded by the rank), which
would make duplicated samples look distinct at the model's input. Where the model's input is not shaped
like a tensor of the batch the loader last yielded on the loop's thread (a batch split into microbatches
or sliced by rank, sequences generated from loaded prompts; no ``DataLoader``; a forward without grad,
an evaluation, consumed that batch), the model's input rows are hashed instead.
"""

from __future__ import annotations

from typing import Any

import torch

from runtime_guard import distributed as dist_helpers
from runtime_guard.contain import UserCall
from runtime_guard.graphs import batch_shapes
from runtime_guard.trace import Microbatch
from runtime_guard.user_frames import warnings_at_caller


class ReplicaObserver:
    """Mixed into :class:`runtime_guard.probe.Probe` (d > 1); works on the probe's state."""

    def _open_guard_group(self) -> None:
        """D > 1: the guard's own gloo group with a timeout, and the ranks' A, groups and ``at``
        compared once (collectives at update attempts only line up when these agree)."""
        dp = self.record.data_parallel
        if dp is None or (dp.size or 1) <= 1 or dp.group is None:
            return
        self._xrank = dist_helpers.GuardGroup(dp.group, self.collective_timeout)
        mine = {"A": self.record.accumulation_steps, "groups": self.n_groups, "at": self.at}
        ranks = self._xrank.all_gather(mine, "comparing the probe's settings at attach")
        if ranks is not None and any(r != mine for r in ranks):
            settings = "; ".join(f"rank {i}: " + ", ".join(f"{k}={v}" for k, v in r.items())
                                 for i, r in enumerate(ranks))
            self._xrank.fail(f"the ranks disagree on the probe's settings ({settings})")

    def _close_guard_group(self) -> None:
        xrank, self._xrank = self._xrank, None
        if xrank is None:
            return
        if xrank.failure is not None:
            self.record.notes.append(f"not compared across ranks: {xrank.failure}")

    def _gather(self, value: Any, what: str) -> list[Any] | None:
        return self._xrank.all_gather(value, what) if self._xrank is not None else None

    def _compares_replicas(self) -> bool:
        dp = self.record.data_parallel
        return dp is not None and (dp.size or 1) > 1 and dp.group is not None and not dp.sharded

    def _hashes_rows(self) -> bool:
        """D > 1 (or unknown above 1): the examples each microbatch processes are fingerprinted (ACC403)."""
        dp = self.record.data_parallel
        return dp is not None and (dp.size or 1) > 1

    def _observe_loaded(self, original: UserCall, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A ``DataLoader`` iterator's ``__next__`` on the loop's thread (``undo.patch_function``, through
        :func:`~runtime_guard.contain.call_through`): counts the batch it yields and the shapes of its tensors
        (a microbatch is one such batch, :mod:`runtime_guard.observe.forward`); D > 1: fingerprints it, and the
        next microbatch compares it with its own input."""
        with warnings_at_caller():
            batch = original(*args, **kwargs)
        if self._attached and not self._done:
            self._yields += 1
            self._yield_shapes = batch_shapes(batch)
            if self._hashes_rows():
                self._loaded = dist_helpers.loaded_row_hashes(batch)
        return batch

    def _record_rows(self, mb: Microbatch, batch: torch.Tensor) -> None:
        """The row hashes of ``mb``: those of the batch the loader last yielded when one of its tensors has
        the shape of ``mb``'s input (the microbatch is that batch, maybe changed element-wise on its way to
        the model), else those of its input."""
        loaded, self._loaded = self._loaded, None
        if loaded is not None and tuple(batch.shape) in loaded.shapes:
            mb.input_hashes, mb.hashes_as_loaded = loaded.hashes, True
        else:
            mb.input_hashes = dist_helpers.row_hashes(batch)

    def _gather_across_replicas(self) -> None:
        rec = self.record
        local = {
            "hashes": [h for g in rec.groups for mb in g.microbatches for h in mb.input_hashes],
            "as_loaded": {mb.hashes_as_loaded for g in rec.groups for mb in g.microbatches if mb.input_hashes},
            "ce": [
                (sum(mb.ce.weight_sum for mb in g.microbatches if mb.ce), sum(mb.ce.tokens for mb in g.microbatches
                                                                            if mb.ce))
                for g in rec.groups
            ],
        }
        gathered = self._gather(local, "input hashes and loss weights at detach")
        if gathered is None:
            return
        rec.replica_hashes = [item["hashes"] for item in gathered]
        kinds = set().union(*(item["as_loaded"] for item in gathered))
        rec.replica_hashes_of = ("the rows the DataLoader yielded" if kinds == {True} else
                                 "the model's input rows" if kinds == {False} else
                                 "the rows the DataLoader yielded, or the model's input rows where a microbatch "
                                 "was not a whole loaded batch")
        rec.replica_ce = [item["ce"] for item in gathered]
