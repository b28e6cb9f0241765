"""Data parallelism at run time (ACC401, ACC402 from DDP's sync flags and replica checksums; ACC403 from
row hashes of the loaded examples across replicas; ACC404 from the observed effective batch)."""

from __future__ import annotations

from collections.abc import Iterator

from runtime_guard.checks.base import finding
from runtime_guard.inference import effective_batch, effective_batch_text
from runtime_guard.record import RunRecord
from runtime_guard.report import RuntimeFinding
from runtime_guard.trace import ObservedGroup


def data_parallel(rec: RunRecord) -> Iterator[RuntimeFinding]:
    if rec.ddp and replicated(rec):  # with D = 1 a misplaced no_sync costs nothing and changes no update
        for g in rec.groups:
            for mb in g.microbatches:
                if mb.sync_at_forward and mb.sync_in_backward is False:
                    yield finding(
                        "ACC401", g.index, mb.index,
                        f"microbatch {mb.index} of group {g.index}: sync flag True at forward, False during "
                        "backward — no_sync() covered only the backward, DDP all-reduced anyway",
                        _flags(g))
                    break
                if (mb is g.microbatches[-1] and g.closed and mb.sync_at_forward is False
                        and mb.sync_in_backward):
                    yield finding(
                        "ACC401", g.index, mb.index,
                        f"the last microbatch of group {g.index} ran its forward with sync off and set it on only "
                        "after: DDP armed no all-reduce, so the update used unsynchronized gradients", _flags(g))
                    break
            else:
                continue
            break
        yield from _never_synced(rec)
    if rec.replica_hashes and len(rec.replica_hashes) > 1:
        mine = rec.replica_hashes[0]
        others = set().union(*map(set, rec.replica_hashes[1:]))
        overlap = sum(h in others for h in mine)
        if mine and overlap >= len(mine) / 2:
            yield finding(
                "ACC403", None, None,
                f"{overlap} of {len(mine)} examples rank 0 processed in the probed groups were also processed by "
                f"another replica (hashes of {rec.replica_hashes_of or 'the model input rows'})",
                f"overlap {overlap}/{len(mine)}")
    observed = effective_batch(rec)
    if rec.expected_effective_batch is not None and observed is not None and observed != rec.expected_effective_batch:
        yield finding("ACC404", None, None,
                       f"configured effective batch {rec.expected_effective_batch}, observed m x A x D = {observed}",
                       effective_batch_text(rec))


def _never_synced(rec: RunRecord) -> Iterator[RuntimeFinding]:
    """ACC402: a group none of whose microbatches ran its forward with sync on, else one whose replica
    gradient checksums differed at the update (the caller runs it only with more than one replica).
    A group whose checksums were compared and agreed at the update was synchronized some other way (the
    loop all-reduces the gradients by hand after its ``no_sync`` microbatches): no finding for it."""
    for g in rec.full_groups:
        if g.replicas_equal:
            continue
        if g.microbatches and all(mb.sync_at_forward is False for mb in g.microbatches):
            extra = "; replica gradient checksums differed at the update" if g.replicas_equal is False else ""
            yield finding(
                "ACC402", g.index, None,
                f"no microbatch of group {g.index} ran its forward with gradient sync on: nothing was "
                f"all-reduced before the update{extra}", _flags(g))
            return
    for g in rec.full_groups:
        if g.replicas_equal is False:
            yield finding("ACC402", g.index, None,
                          f"replica gradient checksums differed at the update of group {g.index}", _flags(g))
            return


def replicated(rec: RunRecord) -> bool:
    """More than one replica, or a count not known: with D = 1 (a DDP wrapper over a one-process group)
    there is nothing to all-reduce, so a group that never syncs is the same update (no ACC402)."""
    dp = rec.data_parallel
    return dp is None or dp.size != 1


def _flags(g: ObservedGroup) -> str:
    def f(v: bool | None) -> str:
        return "-" if v is None else ("T" if v else "f")

    return ("sync at forward / in backward: "
            + " ".join(f(mb.sync_at_forward) for mb in g.microbatches) + " / "
            + " ".join(f(mb.sync_in_backward) for mb in g.microbatches))
