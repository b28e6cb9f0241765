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
from runtime_guard.observe import Observer
from runtime_guard.trace import Microbatch
from runtime_guard.user_frames import warnings_at_caller


class ReplicaObserver(Observer):
    """D > 1: the guard's gloo group, what is gathered across replicas and the row hashes of the examples."""

    def open_guard_group(self) -> None:
        """D > 1: the guard's own gloo group with a timeout, and the ranks' A, groups and ``at``
        compared once (collectives at update attempts only line up when these agree)."""
        s = self.state
        dp = s.record.data_parallel
        if dp is None or (dp.size or 1) <= 1 or dp.group is None:
            return
        s.xrank = dist_helpers.GuardGroup(dp.group, s.collective_timeout)
        mine = {"A": s.record.accumulation_steps, "groups": s.n_groups, "at": s.at}
        ranks = s.xrank.all_gather(mine, "comparing the probe's settings at attach")
        if ranks is not None and any(r != mine for r in ranks):
            settings = "; ".join(f"rank {i}: " + ", ".join(f"{k}={v}" for k, v in r.items())
                                 for i, r in enumerate(ranks))
            s.xrank.fail(f"the ranks disagree on the probe's settings ({settings})")

    def close_guard_group(self) -> None:
        """Close the guard's gloo group (at detach, or where attach failed); a failure of its gathers goes to
        the card's notes."""
        s = self.state
        xrank, s.xrank = s.xrank, None
        if xrank is None:
            return
        if xrank.failure is not None:
            s.record.notes.append(f"not compared across ranks: {xrank.failure}")

    def gather(self, value: Any, what: str) -> list[Any] | None:
        """``value`` from every rank (``what``: the gather's name for a failure note), or ``None`` without the
        guard's group or once it failed."""
        return self.state.xrank.all_gather(value, what) if self.state.xrank is not None else None

    def compares_replicas(self) -> bool:
        """D > 1, the guard's group open and the grads not sharded: gradient checksums are compared across
        replicas at each update."""
        dp = self.state.record.data_parallel
        return dp is not None and (dp.size or 1) > 1 and dp.group is not None and not dp.sharded

    def hashes_rows(self) -> bool:
        """D > 1 (or unknown above 1): the examples each microbatch processes are fingerprinted (ACC403)."""
        dp = self.state.record.data_parallel
        return dp is not None and (dp.size or 1) > 1

    def observe_loaded(self, original: UserCall, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A ``DataLoader`` iterator's ``__next__`` on the loop's thread (``undo.patch_function``, through
        :func:`~runtime_guard.contain.call_through`): counts the batch it yields and the shapes of its tensors
        (a microbatch is one such batch, :mod:`runtime_guard.observe.forward`); D > 1: fingerprints it, and the
        next microbatch compares it with its own input."""
        s = self.state
        with warnings_at_caller():
            batch = original(*args, **kwargs)
        if s.attached and not s.done:
            s.yields += 1
            s.yield_shapes = batch_shapes(batch)
            if self.hashes_rows():
                s.loaded = dist_helpers.loaded_row_hashes(batch)
        return batch

    def record_rows(self, mb: Microbatch, batch: torch.Tensor) -> None:
        """The row hashes of ``mb``: those of the batch the loader last yielded when one of its tensors has
        the shape of ``mb``'s input (the microbatch is that batch, maybe changed element-wise on its way to
        the model), else those of its input."""
        loaded, self.state.loaded = self.state.loaded, None
        if loaded is not None and tuple(batch.shape) in loaded.shapes:
            mb.input_hashes, mb.hashes_as_loaded = loaded.hashes, True
        else:
            mb.input_hashes = dist_helpers.row_hashes(batch)

    def gather_across_replicas(self) -> None:
        """At a clean detach: the row hashes and the cross-entropy weights of every rank, into the record."""
        rec = self.state.record
        local = {
            "hashes": [h for g in rec.groups for mb in g.microbatches for h in mb.input_hashes],
            "as_loaded": {mb.hashes_as_loaded for g in rec.groups for mb in g.microbatches if mb.input_hashes},
            "ce": [
                (sum(mb.ce.weight_sum for mb in g.microbatches if mb.ce), sum(mb.ce.tokens for mb in g.microbatches
                                                                            if mb.ce))
                for g in rec.groups
            ],
        }
        gathered = self.gather(local, "input hashes and loss weights at detach")
        if gathered is None:
            return
        rec.replica_hashes = [item["hashes"] for item in gathered]
        kinds = set().union(*(item["as_loaded"] for item in gathered))
        rec.replica_hashes_of = ("the rows the DataLoader yielded" if kinds == {True} else
                                 "the model's input rows" if kinds == {False} else
                                 "the rows the DataLoader yielded, or the model's input rows where a microbatch "
                                 "was not a whole loaded batch")
        rec.replica_ce = [item["ce"] for item in gathered]
