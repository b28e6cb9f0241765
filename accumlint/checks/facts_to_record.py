"""Facts worth recording about an accumulating run (info, off by default)."""

from __future__ import annotations

from collections.abc import Iterator

from accumlint.checks.base import Hit, Rule
from accumlint.checks.gate import RuleGate, runs_loop
from accumlint.checks.shared.counts import resume_mismatches, throughputs_of_one_microbatch
from accumlint.checks.shared.parallel import data_parallel
from accumlint.model import FileModel


class BatchnormWithAccumulation(Rule):
    """ACC901: a BatchNorm layer built in a module whose training loop accumulates gradients
    (A > 1): its statistics come from each microbatch of m examples, not the effective batch."""

    code = "ACC901"
    #: a BatchNorm layer and a loop
    gate = RuleGate(
        markers=tuple(name.encode() for name in ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm",
                                                 "LazyBatchNorm1d", "LazyBatchNorm2d", "LazyBatchNorm3d")),
        facts=runs_loop)

    def check(self, model: FileModel) -> Iterator[Hit]:
        if not any(group.accumulates is True for group in model.loops):
            return
        for call in data_parallel(model).batchnorm_calls:
            yield Hit(
                call,
                "this BatchNorm layer normalizes with the mean and variance of each microbatch (m examples), "
                "not of the effective batch of m x A: its batch statistics and running estimates differ from "
                "a run with the same effective batch and A = 1",
            )


class ThroughputCountsOneMicrobatch(Rule):
    """ACC903: a rate assigned under the update gate as one microbatch's count over the time
    since the last update.

    Flags ``tokens_per_sec = n_tokens / (time.time() - t0)`` (whatever the target is called) where
    the assignment runs once per group, ``t0`` is read from the clock only under the update
    gate, and ``n_tokens`` is a size (``x.numel()``, ``x.shape[0]``, ``len(batch)``) assigned,
    not summed, on every microbatch. Exempt: a count multiplied by A or a world-named value,
    a count accumulated over the group, a clock reset every microbatch.
    """

    code = "ACC903"

    def check(self, model: FileModel) -> Iterator[Hit]:
        for group in model.loops:
            if group.accumulates is not True:
                continue
            for rate in throughputs_of_one_microbatch(model, group):
                yield Hit(
                    rate.node,
                    f"`{rate.name}` divides one microbatch's count (`{rate.count}`) by the time of a whole group "
                    "of A microbatches: the reported figure is A times too small",
                    f"`n += {rate.count}` on every microbatch, reset after the update",
                )


class ResumeCounterUnitMismatch(Rule):
    """ACC904: a counter of optimizer updates given the value of a counter of microbatches, or the reverse.

    Units come from the loop's increments (``+= 1`` every microbatch, or under the update gate).
    Flags, outside the microbatch loops, ``updates = micro_step`` and ``updates = state["k"]``
    where this module saves a microbatch counter under ``"k"`` (and the reverse). Exempt:
    converted values (``micro_step // A``), counters whose unit the model cannot tell.
    """

    code = "ACC904"

    def check(self, model: FileModel) -> Iterator[Hit]:
        plural = {"microbatch": "microbatches", "update": "optimizer updates"}
        for mismatch in resume_mismatches(model):
            factor = "A times too large" if mismatch.target_unit == "update" else "A times too small"
            yield Hit(
                mismatch.node,
                f"`{mismatch.target}` counts {plural[mismatch.target_unit]} but is set from `{mismatch.source}`, a "
                f"count of {plural[mismatch.source_unit]}: from here on it is {factor}, and the scheduler, logs and "
                "stop condition that read it jump by that factor",
            )
