"""D > 1: the guard's own gloo group, the ranks' probe settings compared at attach, and what is
gathered across replicas (gradient checksums at each update, input hashes and loss weights)."""

from __future__ import annotations

from typing import Any

from runtime_guard import distributed as dist_helpers


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

    def _gather_across_replicas(self) -> None:
        rec = self.record
        local = {
            "hashes": [h for g in rec.groups for mb in g.microbatches for h in mb.input_hashes],
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
        rec.replica_ce = [item["ce"] for item in gathered]
