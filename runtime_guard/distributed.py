"""torch.distributed helpers: input-row hashes, all-gathers of small values, comm counting.

Collectives run only on the user's thread at points every rank reaches in the same order
(an update attempt, a clean detach), never on the exception path.
"""

from __future__ import annotations

from typing import Any

import torch


def row_hashes(batch: torch.Tensor, limit: int = 4096) -> list[int]:
    """One 64-bit integer per example (first dimension) of ``batch``, from its raw bits.

    The bits of each row times a fixed index weight, summed (wrapping); equal rows give equal
    hashes on every rank, with no user IDs needed (design notes §4). At most ``limit`` rows.
    """
    with torch.no_grad():
        rows = batch.detach()[:limit].reshape(min(batch.shape[0], limit), -1)
        if rows.shape[1] == 0:
            return []
        size = rows.element_size()
        view = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.int8}[size]
        bits = rows.contiguous().view(view).to(torch.int64)
        weight = torch.arange(1, bits.shape[1] + 1, dtype=torch.int64, device=bits.device) * 2654435761
        return (bits * weight).sum(dim=1).cpu().tolist()


def all_gather_objects(value: Any, group: Any = None) -> list[Any]:
    """``value`` from every rank of ``group``, in rank order."""
    dist = torch.distributed
    out: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(out, value, group=group)
    return out


class CommCounter:
    """A DDP communication hook that counts all-reduce buckets, then does the default all-reduce.

    DDP offers no way to unregister a comm hook: after the probe detaches it keeps
    forwarding to the default all-reduce (weights stay bitwise equal, design notes §7), so it
    is opt-in (``count_comm=True``).
    """

    def __init__(self) -> None:
        self.active = True
        self.buckets = 0

    def make_hook(self) -> Any:
        """The hook for ``ddp.register_comm_hook(None, hook)`` (DDP checks its annotations)."""
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        def hook(process_group, bucket):  # type: ignore[no-untyped-def]
            if self.active:
                self.buckets += 1
            return allreduce_hook(process_group, bucket)

        hook.__annotations__ = {
            "process_group": object, "bucket": torch.distributed.GradBucket,
            "return": torch.futures.Future[torch.Tensor],
        }
        return hook
