"""Group structure at run time (ACC004, ACC006; ACC501 where Accelerate's accumulate() drives the loop):
microbatches per observed update attempt against A, and parameters that changed inside a group; a
once-per-update weight average run inside a group (ACC007)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from runtime_guard.checks.base import finding, run_trace, trace
from runtime_guard.record import RunRecord
from runtime_guard.report import RuntimeFinding


def _sizes(rec: RunRecord) -> list[RuntimeFinding]:
    """Microbatches per update attempt against A (ACC004, ACC006; ACC501 under accumulate())."""
    findings: list[RuntimeFinding] = []
    a, source = rec.effective_a()
    # a reset cadence that contradicts the update cadence tells A as firmly as a given one
    given = rec.accumulation_steps is not None or rec.reset_period() is not None
    sizes = rec.group_sizes()
    code_sizes = "ACC501" if rec.accelerate_accumulates else None
    open_groups = [g for g in rec.groups if not g.closed and not g.tail]
    timeline = run_trace(rec)
    # an update after each microbatch, not one update and then a run of microbatches with none (a gate that
    # stopped firing: ACC006 below)
    if given and a is not None and a > 1 and sizes and all(s == 1 for s in sizes) \
            and not any(len(g.microbatches) > 1 for g in open_groups):
        # Accelerate's A configured, nothing gating: accumulate() is missing (ACC501's "missing" case)
        missing = rec.accelerate and (rec.accelerate_num_steps or 1) > 1
        code = "ACC501" if code_sizes or missing else "ACC004"
        findings.append(finding(
            code, 0, 0,
            f"an optimizer update was attempted after every microbatch ({len(sizes)} groups of 1) while A = {a} "
            f"({source})", timeline))
    else:
        irregular = [(g.index, len(g.microbatches)) for g in rec.full_groups if a is not None and len(g.microbatches)
                     != a]
        # the last closed group may be an epoch's final partial group (ACC005, not ACC006)
        if irregular and irregular[-1][0] == rec.full_groups[-1].index and irregular[-1][1] < (a or 0) \
                and len(irregular) == 1 and len(rec.full_groups) > 1:
            rec.notes.append(f"group {irregular[-1][0]} had {irregular[-1][1]} microbatches (< A = {a}): "
                             "an epoch's final partial group?")
            irregular = []
        if irregular and (given or len(set(sizes)) > 1):
            group, size = irregular[0]
            findings.append(finding(
                code_sizes or "ACC006", group, None,
                f"observed group sizes {sizes} (microbatches per update attempt); A = {a} ({source})", timeline))
    if not findings and open_groups and a is not None and len(open_groups[-1].microbatches) > a:
        g = open_groups[-1]
        findings.append(finding(
            code_sizes or "ACC006", g.index, None,
            f"{len(g.microbatches)} microbatches and no optimizer update attempt while A = {a} ({source})", timeline))
    return findings


def structure(rec: RunRecord) -> tuple[list[RuntimeFinding], bool]:
    # forwards that are not one microbatch each (several models, passes on one loaded batch that may be
    # microbatches): the sizes are "not observable" (card)
    findings = [] if rec.several_models() else _sizes(rec)
    # ACC004 from parameter checksums: an update the probed optimizer did not make
    for g in rec.groups:
        for prev, mb in zip(g.microbatches, g.microbatches[1:], strict=False):
            summed = prev.params_at_forward is not None and mb.params_at_forward is not None
            if prev.param_bits != mb.param_bits or (summed and prev.params_at_forward != mb.params_at_forward):
                findings.append(finding(
                    "ACC004", g.index, mb.index,
                    f"parameters changed between microbatch {prev.index} and {mb.index} of group {g.index} "
                    "without an update of the probed optimizer (another optimizer, or an update the probe "
                    "did not see)", trace(g.events)))
                return findings, True
    return findings, bool(findings)


def weight_averages(rec: RunRecord) -> Iterator[RuntimeFinding]:
    """ACC007: a copy of the parameters (weight EMA, averaged model; :mod:`runtime_guard.shadows`) moved
    toward them twice or more inside one probed group, while they did not change: an average defined once
    per optimizer update ran per microbatch. Once inside a group (an average taken just before the update)
    is one per update: silent."""
    for g in rec.full_groups:
        counts = Counter(owner for owner, _ in g.averaged)
        owner, n = counts.most_common(1)[0] if counts else ("", 0)
        if n >= 2:
            factors = ", ".join(f"{c:.4g}" for o, c in g.averaged if o == owner)
            yield finding(
                "ACC007", g.index, None,
                f"a copy of the model's parameters ({owner}) was averaged toward them {n}x inside group {g.index} "
                f"of {len(g.microbatches)} microbatches, with no optimizer update in between (factors {factors}: "
                "s' - p = c (s - p)): a weight average defined once per update runs every microbatch",
                trace(g.events))
            return
