"""Loss normalization at run time (ACC101, ACC102, ACC103, ACC105) from the inferred per-token weights,
the factors on mean-reduced losses or the replay (runtime_guard.inference), mapped to the code a
framework contract implies. The measured sum of each group's weights and its factor relative to the
convention are on the card (``normalization_groups``) whether or not a finding follows. As in the
linter, weights summing to A are no ACC103 under an optimizer that ignores a constant factor on the
gradients (Adam and its kin) unless a gradient clip sees them."""

from __future__ import annotations

import math
from collections.abc import Iterator

from runtime_guard.checks.base import finding
from runtime_guard.events import CLIP
from runtime_guard.inference import OFF_SCALE_MARGIN, infer_normalization
from runtime_guard.record import RunRecord
from runtime_guard.report import RuntimeFinding


def normalization(rec: RunRecord) -> Iterator[RuntimeFinding]:
    norm = infer_normalization(rec)
    seen: set[str] = set()
    sums = dict(zip([g.index for g in rec.full_groups if g.microbatches and all(mb.ce for mb in g.microbatches)],
                    norm.weight_sums, strict=False))
    sizes = {g.index: len(g.microbatches) for g in rec.full_groups}
    clipped = any(e.kind == CLIP for g in rec.full_groups for e in g.events)

    def divided(group: int) -> bool:  # the weights sum nearer to 1 than to A: the framework divided by A
        total, a = sums.get(group), sizes.get(group, 1)
        return total is not None and total > 0 and abs(math.log(total)) < abs(math.log(total / a))

    for code, group, text in norm.codes:
        if rec.user_normalizes and code == "ACC102" and divided(group):
            # the weights sum to 1: the framework did divide by A after all (transformers 5.24.0
            # training_step: no num_items_in_batch, e.g. no "labels" in the batch), so this is a mean of means;
            # a sum off 1 (per-microbatch denominators counting padding) keeps its own text
            if abs(sums[group] - 1) <= OFF_SCALE_MARGIN:
                text = f"{text}; the weights sum to 1: the framework divided each microbatch loss by A"
        elif rec.user_normalizes and code in ("ACC102", "ACC103"):
            # weights summing to A: the framework left the group normalization to this loss and did not divide
            code, text = "ACC105", f"{text}; {rec.user_normalizes}"
        if code == "ACC103" and rec.optimizer_scale_invariant:
            if not clipped:
                continue  # the update is the one the mean would give (the card keeps the weights), as the linter
            text = (f"{text}; {rec.optimizer_scale_invariant} takes the same update from the sum as from the mean, "
                    "but the gradient clip sees A times the mean gradient: its threshold acts A times lower")
        if code not in seen:
            seen.add(code)
            tokens = f"; supervised tokens per microbatch {norm.tokens}" if norm.tokens else ""
            yield finding(code, group, None, text,
                          f"weights sum per group {[round(s, 6) for s in norm.weight_sums]}{tokens}")
