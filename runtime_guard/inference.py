"""What the observed trace implies, for the card and the checks alike.

The microbatch size and effective batch, the loss normalization (from per-token weights or the
replay) and what the loop did with the epoch's partial group."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from accumlint.spec import UNAPPLIED_TAIL, WEIGHTED_TAIL
from runtime_guard.events import BACKWARD, RESET
from runtime_guard.record import RunRecord
from runtime_guard.trace import Microbatch, ObservedGroup


def microbatch_size(rec: RunRecord) -> int | None:
    """m: the most common examples-per-microbatch (first dimension of the first input tensor)."""
    sizes = [mb.examples for g in rec.groups for mb in g.microbatches if mb.examples is not None]
    return max(set(sizes), key=sizes.count) if sizes else None


def effective_batch(rec: RunRecord) -> int | None:
    m = microbatch_size(rec)
    a, _ = rec.effective_a()
    d = rec.data_parallel.size if rec.data_parallel else None
    return m * a * d if None not in (m, a, d) else None


def effective_batch_text(rec: RunRecord) -> str:
    a, _ = rec.effective_a()
    d = rec.data_parallel.size if rec.data_parallel else None
    return f"m = {microbatch_size(rec)}, A = {a}, D = {d}"


def normalization_tolerance(rec: RunRecord) -> tuple[float, float]:
    """(ratio tolerance, residual tolerance): fp32 1e-3, bf16/fp16 (params or autocast) 1e-2
    (design notes §3: measured noise 4.8e-8 fp32, 7.2e-4 bf16 autocast)."""
    low = any(d in ("bfloat16", "float16") for d in rec.param_dtypes) or any(
        mb.autocast for g in rec.groups for mb in g.microbatches)
    return (1e-2, 5e-2) if low else (1e-3, 1e-2)


#: How far (relative) a group's weight sum may lie from its convention (and from 1) before a sum that is
#: neither 1/A nor A of it is a finding: 2%. Beyond the precision noise of ``normalization_tolerance``
#: (fp32 1e-3, bf16 1e-2), a denominator off by a token or two in a few hundred (a BOS or EOS counted)
#: changes the effective learning rate by less than a learning-rate schedule does between updates; the
#: shapes found in public code lie far outside it (labels shifted twice 5/6 = 0.83, per-microbatch means
#: over padded positions 0.7-0.9, a double division 1/(1.2 A) = 0.21). Inside it the card shows the factor only.
OFF_SCALE_MARGIN = 0.02


@dataclass
class GroupWeights:
    """One closed group's loss weights as measured, for the card (the ledger's total, observed).

    ``weight_sum``: the sum of the per-token (per-example for a classifier) loss weights over the
    group's supervised tokens, divided by ``loss_scale``; under DDP with every replica's weights the
    mean over the D replicas. ``count``: the supervised tokens it sums over (global / D under DDP).
    ``convention``: ``"mean"`` (expected sum 1) or ``"sum"`` (expected sum ``count``), ``declared``
    when ``loss_convention=`` said so, else assumed. ``factor``: ``weight_sum / expected``, the
    gradient's scale relative to the convention. ``shape``: how the tokens are weighted, or
    ``"not observed: why"`` (then every number is ``None``).
    """

    group: int
    weight_sum: float | None
    count: int | float | None
    convention: str
    declared: bool
    shape: str

    @property
    def expected(self) -> float | None:
        if self.weight_sum is None:
            return None
        return float(self.count) if self.convention == "sum" and self.count else 1.0

    @property
    def factor(self) -> float | None:
        expected = self.expected
        return self.weight_sum / expected if expected else None

    def card(self) -> dict[str, object]:
        """The card's entry: plain JSON types, sums rounded to 8 digits."""
        def rounded(x: float | None) -> float | None:
            return round(x, 8) if x is not None else None
        return {"group": self.group, "weight_sum": rounded(self.weight_sum), "supervised_tokens": self.count,
                "convention": self.convention, "convention_source": "declared" if self.declared else "assumed",
                "expected_sum": rounded(self.expected), "factor": rounded(self.factor), "shape": self.shape}


@dataclass
class Normalization:
    """The inferred loss normalization of the probed groups (for the card and the checks)."""

    inferred: bool
    verdict: str
    weight_sums: list[float]
    tokens: list[list[int]]
    codes: list[tuple[str, int, str]]
    groups: list[GroupWeights] = field(default_factory=list)
    #: what the verdict rests on: "per-token" (cross-entropy weights), "mean-loss" (the factor on each
    #: microbatch's mean-reduced loss: no token counts, so no mean-of-means verdict) or "replay"
    source: str = "per-token"


def _from_replay(rec: RunRecord) -> Normalization | None:
    groups = [g for g in rec.full_groups if g.replay is not None]
    if not groups:
        return None
    ratio_tol, _ = normalization_tolerance(rec)
    cos_tol = ratio_tol / 10  # fp32 1e-4, bf16/fp16 1e-3 (design notes §3)
    verdicts, codes = [], []
    compared = False
    for g in groups:
        r = g.replay
        if isinstance(r, str):
            verdicts.append(r)
            continue
        a = len(g.microbatches)
        token, mean = 1 - r["cos_token"] < cos_tol, 1 - r["cos_mean"] < cos_tol
        compared = True
        evidence = (f"group {g.index}: vs token-weighted 1-cos {1 - r['cos_token']:.2g}, ratio {r['ratio_token']:.6g};"
                    f" vs mean of means 1-cos {1 - r['cos_mean']:.2g}, ratio {r['ratio_mean']:.6g}")
        ref, ratio = ("token-weighted mean over the group", r["ratio_token"]) if token else (
            "mean of microbatch means", r["ratio_mean"])
        if not token and mean:
            codes.append(("ACC102", g.index, f"the accumulated gradient of group {g.index} matches the mean of "
                                             f"microbatch means, not the token-weighted reference ({evidence})"))
        if not token and not mean:
            verdicts.append(f"differs from both references ({evidence})")
            continue
        if abs(ratio - 1) <= ratio_tol:
            verdicts.append(f"{ref} (replay)")
        elif a > 1 and abs(ratio * a - 1) <= ratio_tol:
            verdicts.append(f"{ref}, divided by A again (replay)")
            codes.append(("ACC101", g.index, f"the accumulated gradient of group {g.index} is 1/A of the "
                                             f"reference ({evidence})"))
        elif a > 1 and abs(ratio / a - 1) <= ratio_tol:
            verdicts.append(f"{ref}, not divided by A (replay)")
            codes.append(("ACC103", g.index, f"the accumulated gradient of group {g.index} is A times the "
                                             f"reference ({evidence})"))
        else:
            verdicts.append(f"{ref} scaled by {ratio:.4g} (replay)")
    verdict = verdicts[0] if len(set(verdicts)) == 1 else "; ".join(verdicts)
    tokens = [[mb.ce.tokens for mb in g.microbatches if mb.ce] for g in groups]
    return Normalization(compared, verdict, [], tokens if all(tokens) else [], codes, source="replay")


def infer_normalization(rec: RunRecord) -> Normalization:
    """Classify the loss normalization of every closed group: from the replay when it ran,
    else from the per-token weights (see ``ce_weights``)."""
    replayed = _from_replay(rec)
    weights = _from_weights(rec)
    if replayed is not None and replayed.inferred:
        replayed.groups = weights.groups  # the measured sums still go on the card
        return replayed
    if replayed is not None:  # the replay compared nothing: say why, next to the free inference
        weights.verdict = f"{weights.verdict}; replay {replayed.verdict}"
    return weights


def _not_observed(rec: RunRecord, why: str) -> Normalization:
    """No weights to judge: "not observed" on the card for every closed group, never a finding."""
    groups = [GroupWeights(g.index, None, None, rec.loss_convention, rec.loss_convention != "mean",
                           f"not observed: {why}") for g in rec.full_groups if g.microbatches]
    return Normalization(False, f"not inferred: {why}", [], [], [], groups)


def _from_weights(rec: RunRecord) -> Normalization:
    """Judge each closed group's per-token weights against the convention (``rec.loss_convention``).

    Silent when the sum is the convention's (1, or the supervised-token count under ``"sum"``) or 1
    within the precision tolerance. Otherwise, relative to the convention: 1/A is ACC101 (the loss
    divided by A once too often), A is ACC103 (never divided; ACC105 when a framework contract leaves it
    to the loss, in ``checks/normalization.py``). Any other sum further than ``OFF_SCALE_MARGIN`` from
    both, where the loss is plain cross entropy, nothing rescaled the gradients after the last backward,
    A was given and every replica was seen:

    - uniform per-token weights (one denominator for the whole group that counts the wrong tokens,
      e.g. labels shifted twice): ACC101 below the convention (a denominator counts more than the
      supervised tokens: double normalization in the issue-16 sense, "any denominator applied twice"
      or too large), ACC103 above it (too little division);
    - weights uniform inside each microbatch but different between them (each microbatch divided by
      its own count, and those counts are not its supervised tokens: a per-microbatch mean over padded
      positions divided by A): ACC102, the mean-of-means family, whose runtime counterpart is exactly
      per-microbatch weighting that differs from the token-weighted reference; ACC101 / ACC103 instead
      when the sum lies nearer (in log) to 1/A / A of the convention than to it. Only under the mean
      convention and when every microbatch's weight implies a whole count (``_counts_per_microbatch``).

    Class-weighted losses are summed exactly and judged only at 1/A and A (a class-weighted sum divided
    by a token count is a legitimate convention).
    """
    if not rec.ce_possible:
        return _from_loss_weights(rec, rec.ce_reason)
    if any(mb.passes > 1 for g in rec.full_groups for mb in g.microbatches):
        # the per-token weights of several passes add up in one microbatch over its first pass's tokens
        return _from_loss_weights(rec, "several forward/backward passes per microbatch")
    ratio_tol, residual_tol = normalization_tolerance(rec)
    groups = [g for g in rec.full_groups if g.microbatches and all(mb.ce for mb in g.microbatches)]
    if not groups:
        return _from_loss_weights(rec, "no closed group with cross-entropy gradients observed")
    worst = max(mb.ce.residual for g in groups for mb in g.microbatches)
    if worst > residual_tol:
        return _from_loss_weights(rec, f"the loss is not plain softmax cross entropy (residual {worst:.2g})")
    d = rec.data_parallel.size if rec.data_parallel and rec.data_parallel.size else 1
    expected_a, _ = rec.effective_a()
    declared_sum = rec.loss_convention == "sum"
    sums, tokens, codes, measured = [], [], [], []
    verdicts = []
    for g in groups:
        # the update's weights: the last backward's, times a rescale of the gradients after it (p.grad.div_(A))
        rescale = _rescale(g)
        factor = rescale or 1.0
        rescaled = _rescaled_note(factor)
        n = [mb.ce.tokens for mb in g.microbatches]
        w = [mb.ce.weight_sum / rec.loss_scale * factor for mb in g.microbatches]
        total = sum(w)
        count: int | float = sum(n)
        index = rec.full_groups.index(g)
        if rec.replica_ce and d > 1:
            total = sum(r[index][0] for r in rec.replica_ce if index < len(r)) / d / rec.loss_scale * factor
            count = sum(r[index][1] for r in rec.replica_ce if index < len(r)) / d
        a = len(g.microbatches)
        sums.append(total)
        tokens.append(n)
        means = [wk / nk for wk, nk in zip(w, n, strict=False) if nk]
        spread = max(mb.ce.spread for mb in g.microbatches)

        def near(x: float, target: float) -> bool:
            return target != 0 and abs(x / target - 1) <= ratio_tol

        shape_of = partial(GroupWeights, g.index, total, count, rec.loss_convention, declared_sum)

        if spread > ratio_tol * 10:
            verdicts.append("per-token weights vary inside a microbatch (e.g. per-sequence means)")
            measured.append(shape_of(verdicts[-1]))
            continue
        # class weights (weight= of the loss): only the group's sum is judged, not how tokens are weighted
        by_class = any(mb.ce.by_class for mb in g.microbatches)
        uniform = not by_class and bool(means) and max(means) / min(means) - 1 <= ratio_tol
        equal_microbatches = bool(w) and all(near(wk, total * d / a) for wk in w) if total else False
        unit = ("class-weighted mean" if by_class else
                "token-weighted mean over the group" if uniform else "mean of microbatch means") + rescaled
        if not by_class and not uniform and equal_microbatches and len(set(n)) > 1:
            codes.append(("ACC102", g.index,
                          f"each microbatch of group {g.index} carries weight {w[0]:.4g} whatever its supervised "
                          f"tokens {n}: per-token weights {', '.join(f'{m:.3g}' for m in means)}"))
        elif not by_class and not uniform:
            unit = "per-token weights differ between microbatches" + rescaled
        expected = float(count) if declared_sum and count else 1.0
        ratio = total / expected
        convention = (f"{expected:.6g} (the declared sum over the group's supervised tokens)" if declared_sum
                      else "1 (the group's token mean)")
        scale_of = "the declared sum" if declared_sum else "the token mean"
        measured.append(shape_of(f"{unit}; every token weighs 1 (a summed loss)" if _summed(rec, means) else unit))
        if near(total, 1.0) or near(ratio, 1.0):
            verdicts.append(f"{unit}, summed (declared sum convention)" if declared_sum and not near(total, 1.0)
                            else unit)
        elif a > 1 and (near(ratio, 1.0 / a) or near(ratio, float(a))) and rescale is None:
            # the gradients changed after the last backward, not by a rescale of every grad: the weights the
            # backward left are not the update's, as for a sum off the scale below
            verdicts.append(f"{unit}, weights sum to {total:.4g} at the last backward, then the gradients were "
                            "changed before the update: not judged")
        elif _clipped_by_hand(factor, ratio):
            verdicts.append(f"{unit}, weights sum to {total:.4g}, below {convention} after the rescale, as a clip "
                            "by hand leaves them: not judged")
        elif a > 1 and near(ratio, 1.0 / a):
            verdicts.append(f"{unit}, divided by A again (weights sum to 1/A)")
            codes.append(("ACC101", g.index, f"per-token weights of group {g.index} sum to {total:.4g} = "
                                             f"{'N/A' if declared_sum else '1/A'} (A = {a}){rescaled}: the loss "
                                             "was divided by A once too often"))
        elif a > 1 and near(ratio, float(a)):
            verdicts.append(f"{unit}, not divided by A (weights sum to A)")
            codes.append(("ACC103", g.index, f"per-token weights of group {g.index} sum to {total:.4g} = "
                                             f"{'A N' if declared_sum else 'A'} (A = {a}){rescaled}: the loss "
                                             "was not divided by A"))
        elif not declared_sum and d == 1 and uniform and _per_example_sum(g, means, near):
            # every token weighs 1/(group examples): token losses summed per sequence, then averaged over the
            # group's sequences (DPO's SFT loss): a normalization over the group, in its own unit
            verdicts.append(f"{unit}, summed per example and averaged over the group's examples "
                            f"(every token weighs 1/{round(1 / means[0])})")
        else:
            reference = "the declared sum" if declared_sum else "the group's token mean"
            verdicts.append(f"{unit}, weights sum to {total:.4g}: gradients {ratio:.4g}x {reference}")
            # neither the convention, 1/A nor A of it: a denominator off by a factor (a double division by
            # something other than A, labels shifted twice, padded positions counted). Only decidable with
            # every replica's weights, and not where a framework quirk the card names explains it.
            # groups of the wrong size are the structure checks' matter (ACC004/ACC006); an inferred A may be wrong
            # and only for plain cross entropy beyond doubt (label smoothing fits within residual_tol but biases
            # the weights by 1 - eps) and gradients not rescaled after the last backward (a sum-reduced loss
            # divided at the boundary: p.grad /= tokens)
            plain = max(mb.ce.residual for mb in g.microbatches) <= residual_tol / 100
            off = abs(ratio - 1) > OFF_SCALE_MARGIN and abs(total - 1) > OFF_SCALE_MARGIN
            code = _off_scale_code(ratio, a, uniform)
            counted = uniform or (not declared_sum and _counts_per_microbatch(means, code, a))
            if (off and counted and not by_class and plain and rescale is not None
                    and not rec.weight_sum_explained and (d == 1 or rec.replica_ce) and a == expected_a
                    and rec.accumulation_steps is not None):
                if uniform or not total:
                    text = (f"per-token weights of group {g.index} sum to {total:.4g}, neither {convention}, 1/A nor "
                            f"A (A = {a}) of it: the gradient is {ratio:.4g}x {scale_of}, as if the denominator "
                            f"counted {1 / ratio:.4g}x the supervised tokens{rescaled}{_summed_hint(rec, means)}"
                            if total else
                            f"per-token weights of group {g.index} sum to 0")
                else:
                    divisors = ", ".join(f"{1 / m:.4g}" for m in means)
                    text = (f"per-token weights of group {g.index} sum to {total:.4g}, neither {convention}, 1/A nor "
                            f"A (A = {a}) of it: the gradient is {ratio:.4g}x {scale_of}; each microbatch's "
                            f"token losses are divided by their own count ({divisors}) where the group has "
                            f"{count:.6g} supervised tokens ({n} per microbatch){rescaled}")
                codes.append((code, g.index, text))
    verdict = verdicts[0] if len(set(verdicts)) == 1 else "; ".join(f"group {i}: {v}" for i, v in enumerate(verdicts))
    return Normalization(True, verdict, sums, tokens, codes, measured)


def _per_example_sum(group: ObservedGroup, means: list[float], near: Callable[[float, float], bool]) -> bool:
    """Whether each token of ``group`` weighs 1 over the group's example count (rows of the model's inputs):
    a loss summed over each sequence's tokens and averaged over the group's sequences, ``means`` being the
    per-token weight of each microbatch; False when a microbatch's example count is unknown."""
    examples = [mb.examples for mb in group.microbatches]
    if not means or any(not m for m in examples):
        return False
    total = sum(m for m in examples if m)
    return all(near(mean * total, 1.0) for mean in means)


def _from_loss_weights(rec: RunRecord, why: str) -> Normalization:
    """Judge each closed group by the factors on its microbatches' mean-reduced losses (``loss_weight``: a
    backward rooted at ``mse_loss(...) / A``, a cross entropy over a similarity matrix, a model's own mean
    loss), where no per-token weights can be (``why``). Each microbatch's mean weighs 1/A in a group mean,
    so the factors sum to 1; 1/A is ACC101, A is ACC103. Only those two: without token counts neither a
    mean of means (ACC102) nor a denominator off by another factor can be told from a deliberate weight.
    Judged only under the mean convention, when every microbatch of every closed group had one backward
    per pass that reached the model's output from one such root (several losses backpropagated apart in one
    pass are not a group mean of one loss), its passes' factors equal and as many passes in each (a GAN
    discriminator's real and fake passes on one loaded batch: each pass's loss is judged, its factors summed
    over the group are divided by the passes), and only in groups of A microbatches: a group of the wrong size
    is the structure checks' matter (ACC004, ACC006, ACC501), and its factors sum to its size over A."""
    expected_a, _ = rec.effective_a()
    groups = [g for g in rec.full_groups
              if g.microbatches and (expected_a is None or len(g.microbatches) == expected_a)]
    ratio_tol, _ = normalization_tolerance(rec)
    mbs = [mb for g in groups for mb in g.microbatches]
    if (not groups or rec.loss_convention != "mean" or len({mb.passes for mb in mbs}) != 1
            or not all(mb.loss_weights == mb.backwards == mb.passes and mb.output_reached
                       and _equal_terms(mb.loss_terms, ratio_tol) for mb in mbs)):
        return _not_observed(rec, why)
    terms = mbs[0].passes
    unit = "mean-reduced loss per microbatch" if terms == 1 else \
        f"mean-reduced loss per pass, {terms} passes per microbatch (factors summed per pass)"
    sums, codes, measured, verdicts = [], [], [], []
    for g in groups:
        rescale = _rescale(g)  # the update's factors: the backward's times a rescale of the gradients after it
        factor = rescale or 1.0
        rescaled = _rescaled_note(factor)
        a = len(g.microbatches)
        total = sum(mb.loss_weight for mb in g.microbatches) / rec.loss_scale / terms * factor
        sums.append(total)
        measured.append(GroupWeights(g.index, total, None, "mean", False, f"{unit} (factor on each microbatch's mean)"))
        where = f"the factors on the mean-reduced losses of group {g.index}'s microbatches sum to {total:.4g}{rescaled}"
        unit_of = unit + rescaled
        if rescale is None:
            verdicts.append(f"{unit_of}, the gradients changed after the last backward before the update: not judged")
        elif abs(total - 1) <= ratio_tol:
            verdicts.append(f"{unit_of}, averaged over the group")
        elif _clipped_by_hand(factor, total):
            verdicts.append(f"{unit_of}, factors sum to {total:.4g}, below 1 after the rescale, as a clip by hand "
                            "leaves them: not judged")
        elif a > 1 and abs(total * a - 1) <= ratio_tol:
            verdicts.append(f"{unit_of}, divided by A again (factors sum to 1/A)")
            codes.append(("ACC101", g.index, f"{where} = 1/A (A = {a}): the loss was divided by A once too often"))
        elif a > 1 and abs(total / a - 1) <= ratio_tol:
            verdicts.append(f"{unit_of}, not divided by A (factors sum to A)")
            codes.append(("ACC103", g.index, f"{where} = A (A = {a}): the loss was not divided by A"))
        else:
            verdicts.append(f"{unit_of}, factors sum to {total:.4g}")
    verdict = verdicts[0] if len(set(verdicts)) == 1 else "; ".join(f"group {i}: {v}" for i, v in enumerate(verdicts))
    return Normalization(True, f"{verdict} ({why}: per-token weights not inferred)", sums, [], codes, measured,
                         source="mean-loss")


def _equal_terms(terms: list[float], tol: float) -> bool:
    """The factors of one microbatch's passes are equal (within ``tol``): each pass's loss was weighted alike,
    so their mean is the factor on the microbatch's losses."""
    return bool(terms) and all(abs(t - terms[0]) <= tol * abs(terms[0]) for t in terms)


def _summed(rec: RunRecord, means: list[float]) -> bool:
    """Every token weighted 1 under the assumed mean convention: a summed loss, maybe on purpose
    (the card names it; the finding says how to declare it)."""
    return rec.loss_convention == "mean" and bool(means) and all(abs(m - 1) <= 1e-3 for m in means)


def _summed_hint(rec: RunRecord, means: list[float]) -> str:
    return (" (every token weighs 1: a summed loss; if deliberate, declare it with loss_convention='sum')"
            if _summed(rec, means) else "")


def _counts_per_microbatch(means: list[float], code: str, a: int) -> bool:
    """Weights that differ between microbatches are judged only when each microbatch's implies a whole
    count: its per-token weight is ``1 / (count_k x c)`` with ``count_k`` an integer (padded positions,
    tokens before a shift) and ``c`` what the code says divided it (A for ACC102, A x A for ACC101, 1 for
    ACC103). Per-microbatch task weights (0.3 and 0.7 by dataset) imply no whole counts: silent."""
    c = {"ACC101": a * a, "ACC102": a, "ACC103": 1}[code]
    implied = [1 / (m * c) for m in means if m > 0]
    return len(implied) == len(means) and all(x >= 0.5 and abs(x - round(x)) <= max(0.05, 1e-3 * x)
                                              for x in implied)


def _off_scale_code(ratio: float, a: int, uniform: bool) -> str:
    """The code of a weight sum ``ratio`` x the convention, neither 1, 1/A nor A of it (see ``_from_weights``)."""
    if uniform:
        return "ACC101" if ratio < 1 else "ACC103"
    distance = abs(math.log(ratio))
    if ratio < 1 and abs(math.log(ratio * a)) < distance:
        return "ACC101"
    if ratio > 1 and abs(math.log(ratio / a)) < distance:
        return "ACC103"
    return "ACC102"


def _rescale(g: ObservedGroup) -> float | None:
    """The factor the group's gradients were multiplied by between its last backward and its update attempt,
    apart from the clips and unscales the probe saw (``p.grad.div_(A)`` or a division by a token count,
    before or after a clip): 1.0 when unchanged, ``None`` when some change was not an in-place rescale of
    every grad (a reset, a replaced grad)."""
    factor = 1.0
    for c in g.rescaled_by:
        if c is None:
            return None
        factor *= c
    return factor


def _clipped_by_hand(factor: float, ratio: float) -> bool:
    """A rescale after the last backward (``factor``) left the update's weights at ``ratio`` x the convention,
    below it (1 within the tolerance is decided before): a clip by hand (``p.grad.mul_(max_norm / norm)``,
    fairseq's and Megatron's own clips) shrinks them too, after a correct normalization or after a
    division by A, so only a rescale that leaves them at or above the convention is judged."""
    return factor < 1 and ratio < 1


def _rescaled_note(factor: float) -> str:
    """What the verdicts and findings add for a group whose gradients were rescaled by ``factor``."""
    return "" if factor == 1 else f" (the gradients multiplied by {factor:.4g} after the last backward)"


@dataclass
class LastGroup:
    """What the loop did with the epoch's last partial group (probe at an epoch end).

    "Dropped" (a reset before the next epoch, accumulation guide P9) and Accelerate's documented
    "applied, weighted r/A" (gradient_state known, loader prepared or unknown) are card facts only.
    ``treatment`` uses the linter's terms: "applied, true denominator", "applied, weighted
    r/A", "applied" (weighting not inferred), "dropped", "leaks into the next epoch", "merged
    into the next epoch" (groups of exactly A span the boundary), "never applied" (the probe
    detached after the epoch end before any update or reset), "no partial group"
    (``len(loader) % A == 0``) or "not observed". ``finding`` is the observed text of an
    ACC005 finding, ``None`` for none.
    """

    treatment: str
    detail: str
    finding: str | None = None
    group: int | None = None
    site_fix: str = ""

    @property
    def card(self) -> str:
        """``"treatment: detail"`` for the card."""
        return f"{self.treatment}: {self.detail}" if self.detail else self.treatment


def _microbatch_weights(rec: RunRecord, mbs: list[Microbatch]) -> tuple[list[float] | None, str]:
    """Weight of each microbatch's loss (unitless; a full group's sum is 1 when normalized over the
    group): per-token cross-entropy weights when inferred, else dL/d(mean loss); or why not."""
    _, residual_tol = normalization_tolerance(rec)
    if mbs and rec.ce_possible and all(mb.ce is not None and mb.ce.residual <= residual_tol for mb in mbs):
        return [mb.ce.weight_sum for mb in mbs], "per-token cross-entropy weights"
    if mbs and all(mb.loss_weight is not None for mb in mbs):
        return [mb.loss_weight for mb in mbs], "the factor on each microbatch's mean loss"
    return None, ("neither cross-entropy weights nor a scaled mean loss (a loss / constant backward) "
                  "were observed")


def _tail_ratio(rec: RunRecord, tail: list[Microbatch]) -> tuple[float | None, str]:
    """The partial group's weight relative to a full group's in the window (1.0 when none closed)."""
    weights, how = _microbatch_weights(rec, tail)
    if weights is None:
        return None, how
    full = [w for g in rec.full_groups if g.attempted for w in [_microbatch_weights(rec, g.microbatches)[0]]
            if w is not None]
    reference = sum(map(sum, full)) / len(full) if full else 1.0
    if not reference:
        return None, "a full group's weights sum to 0"
    where = f"a full group's weights sum to {reference:.4g}" if full else "no full group observed, 1 assumed"
    return sum(weights) / reference, f"{how}: the partial group's sum to {sum(weights):.4g}, {where}"


def _reset_between(rec: RunRecord, start: int, end: int) -> bool:
    return any(e.kind == RESET and start < e.seq < end and (e.detail.get("zeroed") or e.detail.get("changed"))
               for g in rec.groups for e in g.events)


def last_group(rec: RunRecord) -> LastGroup:
    """Classify the epoch's last partial group from the events of a probe at an epoch end."""
    if not rec.at_epoch_end:
        return LastGroup("not observed", "the probe ran at the start; an epoch's final partial group needs the "
                                         "probe at the epoch end (at=\"epoch_end\", loader=...)")
    if rec.epoch_unobserved:
        return LastGroup("not observed", rec.epoch_unobserved)
    a, n = rec.accumulation_steps or 1, rec.loader_length or 0
    r = n % a
    if r == 0:
        return LastGroup("no partial group", f"len(loader) = {n} is a multiple of A = {a}")
    if rec.epoch_end_seq is None:
        return LastGroup("not observed", "the probe detached before the watched epoch ended")
    size = f"r = {r} microbatches (len(loader) = {n}, A = {a})"
    partial = [g for g in rec.groups if g.role == "partial"]
    # a forward never backpropagated (an evaluation forward with autograd on, after the epoch's last update and
    # before the next epoch's first batch) is no microbatch of the tail
    tail = [mb for g in partial for mb in g.microbatches
            if mb.epoch == rec.watched_epoch and (mb.batch or 0) >= n - r and mb.backwards]
    if not tail:
        return LastGroup("not observed", f"no backpropagated forward of the partial group's {size} was seen")
    group = next(g for g in reversed(partial) if any(mb is tail[-1] for mb in g.microbatches))
    if group.attempted:
        ratio, how = _tail_ratio(rec, tail)
        ratio_tol, _ = normalization_tolerance(rec)
        if ratio is None:
            return LastGroup("applied", f"{size}, updated by group {group.index}'s step; weighting not inferred "
                                        f"({how})")
        if abs(ratio - 1) <= ratio_tol:
            return LastGroup("applied, true denominator", f"{size}, weighted like a full group ({how})")
        if abs(ratio / (r / a) - 1) <= ratio_tol:
            if ((rec.accelerate_num_steps or 0) > 1 or rec.accumulate_seen) and not rec.loader_unprepared:
                # Accelerate's documented weighting of its prepared loader's last group (sync_with_dataloader;
                # rules-spec exemption): a card fact, not a finding
                return LastGroup("applied, weighted r/A", f"{size}, weighted {ratio:.4g} = r/A of a full group "
                                                          f"({how}); Accelerate's documented treatment")
            return LastGroup(
                "applied, weighted r/A", f"{size}, weighted {ratio:.4g} = r/A of a full group ({how})",
                f"applied, weighted r/A: the epoch's last partial group of {r} microbatches was applied, but each "
                f"of its microbatches is still divided by A: that update weighs r/A = {r}/{a} of a full group ({how})",
                group.index, WEIGHTED_TAIL)
        return LastGroup("applied", f"{size}, weighted {ratio:.4g} of a full group ({how})")
    last_b = max((e.seq for g in partial for e in g.events if e.kind == BACKWARD), default=rec.epoch_end_seq)
    following = next((g for g in rec.groups if g.role == "next" and g.microbatches), None)
    if following is None:
        return LastGroup(
            "never applied", f"{size} backpropagated, no update before the probe detached after the epoch end",
            f"never applied: the epoch's last {r} microbatches were backpropagated but no update followed "
            "before the probe "
            "detached after the epoch's end: their examples were never learned from", group.index, UNAPPLIED_TAIL)
    mb0 = following.microbatches[0]
    first_b = following.first_backward_seq() or following.events[-1].seq + 1
    if _reset_between(rec, last_b, first_b) or mb0.grads_at_forward.all_zero or mb0.grads_replaced_before_backward:
        # an explicit choice (accumulation guide P9; the linter is silent on it): a card fact, not a finding
        return LastGroup(
            "dropped", f"{size} backpropagated, no update; gradients reset before the next epoch's first backward "
                       "(their examples are not learned from this epoch)")
    if following.closed and len(following.microbatches) + r == a:
        return LastGroup("merged into the next epoch", f"{size}; the group spanning the epoch boundary holds "
                                                       f"exactly A = {a} microbatches")
    held = len(following.microbatches) + r
    return LastGroup(
        "leaks into the next epoch", f"{size} not applied, not reset: the next epoch's first group holds {held} "
                                     "microbatches' gradients",
        f"leaks into the next epoch: no update and no reset after the epoch's last {r} microbatches, so "
        f"the next epoch's first update (group {following.index}) applies a group of A + r = {held} "
        f"microbatches' gradients (grads norm {mb0.grads_at_forward.norm:.3g} at its first forward)",
        following.index, UNAPPLIED_TAIL)
