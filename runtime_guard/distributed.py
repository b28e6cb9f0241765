"""torch.distributed helpers: row hashes of inputs and loaded batches, all-gathers of small values, comm counting.

Collectives run only on the user's thread at points every rank reaches in the same order
(an update attempt, a clean detach), never on the exception path. They go through a
:class:`GuardGroup`: a gloo group of the data-parallel ranks of the guard's own, with a
timeout (``collective_timeout``, default :data:`DEFAULT_TIMEOUT_S` seconds, or the
``RUNTIME_GUARD_COLLECTIVE_TIMEOUT`` environment variable). The user's process group is
never used by the guard's gathers (its collective sequence stays the program's), and a rank
that raised, or that disagrees on A, makes the others give up after the timeout with a note
on the card instead of hanging.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any, NamedTuple

import torch

from runtime_guard.fingerprint import INT_VIEW
from runtime_guard.graphs import tensors_in

_MASK64 = (1 << 64) - 1

#: rows hashed per batch at most
ROW_LIMIT = 4096


def row_hashes(batch: torch.Tensor, limit: int = ROW_LIMIT) -> list[int]:
    """One 64-bit integer per example (first dimension) of ``batch``, from its raw bits.

    The bits of each row times a fixed index weight, summed (wrapping); equal rows give equal
    hashes on every rank, with no user IDs needed (design notes §4). At most ``limit`` rows.
    """
    with torch.no_grad():
        rows = batch.detach()[:limit].reshape(min(batch.shape[0], limit), -1)
        if rows.shape[1] == 0:
            return []
        bits = rows.contiguous().view(INT_VIEW[rows.element_size()]).to(torch.int64)
        weight = torch.arange(1, bits.shape[1] + 1, dtype=torch.int64, device=bits.device) * 2654435761
        return (bits * weight).sum(dim=1).cpu().tolist()


def _hashable(t: torch.Tensor) -> bool:
    """A tensor whose rows :func:`row_hashes` can read (strided, an integer view of its element size)."""
    return (t.layout == torch.strided and not t.is_quantized and t.device.type != "meta"
            and t.element_size() in INT_VIEW and t.dim() >= 1)


class LoadedRows(NamedTuple):
    """A fingerprint of a batch as a loader yielded it (:func:`loaded_row_hashes`)."""

    shapes: frozenset[tuple[int, ...]]  # of its tensors with the batch's first dimension
    hashes: list[int]  # one per example (at most ROW_LIMIT)


def loaded_row_hashes(batch: Any) -> LoadedRows | None:
    """A fingerprint of a batch as a loader yielded it: the shapes of its tensors and one 64-bit integer
    per example.

    The examples are the first dimension of its first tensor; each example's integer combines the
    :func:`row_hashes` of every tensor of the batch (a tuple, list or mapping of tensors) with that
    first dimension, so that a column shared by every example (an all-ones attention mask) does not
    make distinct examples equal. ``None`` when the batch holds no tensor it can read.
    """
    tensors = [t for t in tensors_in(batch) if _hashable(t)]
    if not tensors:
        return None
    examples = tensors[0].shape[0]
    rows = [t for t in tensors if t.shape[0] == examples]
    per_tensor = [h for h in map(row_hashes, rows) if h]
    if not per_tensor:
        return None
    # odd factors by position: one tensor's hashes do not cancel another's
    combined = [sum((2 * i + 1) * h for i, h in enumerate(row)) & _MASK64 for row in zip(*per_tensor, strict=True)]
    return LoadedRows(frozenset(tuple(t.shape) for t in rows), combined)


def all_gather_objects(value: Any, group: Any = None) -> list[Any]:
    """``value`` from every rank of ``group``, in rank order."""
    dist = torch.distributed
    out: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(out, value, group=group)
    return out


#: seconds one of the guard's own collectives waits for the other ranks before giving up
DEFAULT_TIMEOUT_S = 60.0


def collective_timeout(seconds: float | None = None) -> float:
    """``seconds``, else ``RUNTIME_GUARD_COLLECTIVE_TIMEOUT`` from the environment, else the default."""
    if seconds is None:
        seconds = float(os.environ.get("RUNTIME_GUARD_COLLECTIVE_TIMEOUT", DEFAULT_TIMEOUT_S))
    if seconds <= 0:
        raise ValueError(f"collective_timeout must be > 0 seconds, got {seconds}")
    return seconds


#: (default group, data-parallel ranks) -> (default group, the guard's gloo group or why it was retired); the
#: default group is kept alive with the entry, so that its id stays unique
_GROUPS: dict[tuple[int, tuple[int, ...]], tuple[Any, Any]] = {}


class GuardGroup:
    """The guard's own gloo group over the ranks of the data-parallel ``group``, with a timeout.

    Made at the first attach of a probe with D > 1 (every rank enters the probe at the same point
    of its program) and kept for the later probes of the process: torch names such a group after
    its ranks, and a group destroyed and made again under the same name can meet its
    predecessor's rendezvous keys in the store. Its timeout is the first probe's. Each gather
    waits at most that long. The first failure (a timeout, a lost peer, ranks that disagree) is
    kept in ``failure`` and turns every later gather of this probe into ``None``: the guard then
    compares nothing across ranks instead of waiting again. A timeout or a lost peer also retires
    the group for the process (its ranks' collectives may no longer line up): later probes
    compare nothing across ranks and say why.
    """

    def __init__(self, group: Any, timeout_s: float) -> None:
        dist = torch.distributed
        self.timeout_s = timeout_s
        self.failure: str | None = None
        self.group: Any = None
        world = dist.group.WORLD
        ranks = tuple(dist.get_process_group_ranks(group))
        self._key = (id(world), ranks)
        self._world = world
        cached = _GROUPS.get(self._key)
        if cached is not None and isinstance(cached[1], str):
            self.failure = f"an earlier gather of the guard in this process failed, its group is retired ({cached[1]})"
            return
        if cached is None:
            try:
                made = dist.new_group(list(ranks), timeout=timedelta(seconds=timeout_s), backend="gloo",
                                      use_local_synchronization=True)
            except Exception as error:  # noqa: BLE001 - a store timeout or a missing rank: compare nothing
                self._retire(f"the guard's process group could not be made within {timeout_s:g} s "
                             f"({_short(error)})")
                return
            cached = (world, made)
            _GROUPS[self._key] = cached
        self.group = cached[1]

    def _retire(self, why: str) -> None:
        self.failure = self.failure or why
        self.group = None
        _GROUPS[self._key] = (self._world, why)

    def all_gather(self, value: Any, what: str) -> list[Any] | None:
        """``value`` from every rank in rank order, or ``None`` once anything failed (then ``failure`` says why)."""
        if self.failure is not None or self.group is None:
            return None
        try:
            return all_gather_objects(value, self.group)
        except Exception as error:  # noqa: BLE001 - gloo raises RuntimeError on a timeout or a lost peer
            self._retire(f"{what}: the other ranks did not answer (timeout {self.timeout_s:g} s; a rank "
                         f"raised or stopped, or the ranks reached different updates) ({_short(error)})")
            return None

    def fail(self, why: str) -> None:
        """Stop gathering for this probe (the group stays usable for later probes)."""
        self.failure = self.failure or why


def _short(error: BaseException) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return text if len(text) <= 160 else text[:157] + "..."


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
