"""Facts worth recording about an accumulating run (info, off by default)."""

from __future__ import annotations

from collections.abc import Iterator

from accumlint.checks.base import Hit, Rule
from accumlint.model import FileModel


class BatchnormWithAccumulation(Rule):
    """ACC901: a BatchNorm layer built in a module whose training loop accumulates gradients
    (A > 1): its statistics come from each microbatch of m examples, not the effective batch."""

    code = "ACC901"
    markers = tuple(name.encode() for name in ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm",
                                               "LazyBatchNorm1d", "LazyBatchNorm2d", "LazyBatchNorm3d"))

    def check(self, model: FileModel) -> Iterator[Hit]:
        if not any(group.accumulates is True for group in model.loops):
            return
        for call in model.parallel.batchnorm_calls:
            yield Hit(
                call,
                "this BatchNorm layer normalizes with the mean and variance of each microbatch (m examples), "
                "not of the effective batch of m x A: its batch statistics and running estimates differ from "
                "a run with the same effective batch and A = 1",
                "record it; if microbatches are small, consider GroupNorm/LayerNorm or a larger microbatch "
                "(SyncBatchNorm widens the statistics across replicas, not across microbatches)",
            )
