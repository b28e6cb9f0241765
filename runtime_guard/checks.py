"""The rules of the catalogue, evaluated on the observed trace (same codes as the linter).

``RUNTIME_CHECKS`` says, per code, what the guard needs to observe it; the catalogue test
uses it to decide which expected codes of a ``bad_*.py`` example a run must reproduce.
Each check stays silent where the evidence is ambiguous (precision over recall): resets are
judged by fingerprints before and after (a framework no-op ``zero_grad`` is not a reset),
and group-structure findings switch off the checks that assume the groups are right.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

from accumlint.spec import RULES, Runtime, spec_of
from runtime_guard.record import RunRecord
from runtime_guard.report import Finding
from runtime_guard.trace import Event, Group, Microbatch

RuntimeCheck = Runtime
"""How the guard observes one code: the ``runtime`` entry of its spec (``accumlint/spec.py``)."""

#: The codes the guard checks, and how (every spec with a ``runtime`` entry).
RUNTIME_CHECKS: dict[str, Runtime] = {rule.code: rule.runtime for rule in RULES if rule.runtime is not None}
#: The fix and the meaning printed with a finding: the same words as the linter's (the spec's).
FIXES = {code: spec_of(code).fix for code in RUNTIME_CHECKS}
MEANINGS = {code: spec_of(code).meaning for code in RUNTIME_CHECKS}
#: The fix for a partial group applied but weighted r/A (the linter's wording).
FIX_WEIGHTED = "divide the tail's losses by its true size r (or make the epoch length a multiple of A)"


def _finding(code: str, group: int | None, microbatch: int | None, observed: str, evidence: str = "",
             fix: str | None = None) -> Finding:
    return Finding(code, group, microbatch, observed, MEANINGS[code], fix or FIXES[code], evidence)


def _trace(events: list[Event]) -> str:
    return " ".join(e.kind for e in events)


def _run_trace(rec: RunRecord) -> str:
    return " ‖ ".join(_trace(g.events) + ("*" if g.tail else "") for g in rec.groups)


def _between(group: Group, start: int, end: int, kind: str) -> list[Event]:
    return [e for e in group.events if e.kind == kind and start < e.seq < end]


def _forward_seq(group: Group, index: int) -> int:
    return [e.seq for e in group.events if e.kind == "F"][index]


def _backward_end_seq(group: Group, mb: Microbatch) -> int | None:
    seqs = [e.seq for e in group.events if e.kind == "B" and e.microbatch == mb.index]
    return seqs[-1] if seqs else None


# -- group structure (ACC004, ACC006, ACC501) ------------------------------------------------
def _structure(rec: RunRecord) -> tuple[list[Finding], bool]:
    findings: list[Finding] = []
    a, source = rec.effective_a()
    # a reset cadence that contradicts the update cadence tells A as firmly as a given one
    given = rec.accumulation_steps is not None or rec.reset_period() is not None
    sizes = rec.group_sizes()
    code_sizes = "ACC501" if rec.accelerate_accumulates else None
    open_groups = [g for g in rec.groups if not g.closed and not g.tail]
    trace = _run_trace(rec)
    if given and a is not None and a > 1 and sizes and all(s == 1 for s in sizes):
        # Accelerate's A configured, nothing gating: accumulate() is missing (ACC501's "missing" case)
        missing = rec.accelerate and (rec.accelerate_num_steps or 1) > 1
        code = "ACC501" if code_sizes or missing else "ACC004"
        findings.append(_finding(
            code, 0, 0,
            f"an optimizer update was attempted after every microbatch ({len(sizes)} groups of 1) while A = {a} "
            f"({source})", trace))
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
            findings.append(_finding(
                code_sizes or "ACC006", group, None,
                f"observed group sizes {sizes} (microbatches per update attempt); A = {a} ({source})", trace))
    if not findings and open_groups and a is not None and len(open_groups[-1].microbatches) > a:
        g = open_groups[-1]
        findings.append(_finding(
            code_sizes or "ACC006", g.index, None,
            f"{len(g.microbatches)} microbatches and no optimizer update attempt while A = {a} ({source})", trace))
    # ACC004 from parameter checksums: an update the probed optimizer did not make
    for g in rec.groups:
        for prev, mb in zip(g.microbatches, g.microbatches[1:], strict=False):
            if prev.params_at_forward != mb.params_at_forward:
                findings.append(_finding(
                    "ACC004", g.index, mb.index,
                    f"parameters changed between microbatch {prev.index} and {mb.index} of group {g.index} "
                    "without an update of the probed optimizer (another optimizer, or an update the probe "
                    "did not see)", _trace(g.events)))
                return findings, True
    return findings, bool(findings)


# -- resets (ACC001, ACC002, ACC003; ACC501 for prepared resets) -------------------------
def _resets(rec: RunRecord, structure_bad: bool) -> Iterator[Finding]:
    reported: set[str] = set()
    for g in rec.groups:
        first_b, last_b = g.first_backward_seq(), g.last_backward_seq()
        if first_b is not None and last_b is not None and first_b < last_b:
            inside = [e for e in _between(g, first_b, last_b, "Z") if e.detail.get("zeroed")]
            # a prepared reset is Accelerate's matter only while its accumulation drives the loop
            prepared = [e for e in inside if e.detail.get("prepared") and rec.accelerate_accumulates]
            plain = [e for e in inside if e not in prepared]
            if prepared and "ACC501" not in reported:
                reported.add("ACC501")
                yield _finding(
                    "ACC501", g.index, prepared[0].microbatch,
                    f"the prepared optimizer's zero_grad() reset the gradients before microbatch "
                    f"{prepared[0].microbatch + 1} of group {g.index}: inside accumulate() a reset before the "
                    "backward runs for real on the sync microbatch and wipes the group", _trace(g.events))
            unobserved = []
            for prev, mb in zip(g.microbatches, g.microbatches[1:], strict=False):
                before = prev.grads_after_backward
                if before is None or before.all_zero:
                    continue
                start = _backward_end_seq(g, prev) or 0
                end = _backward_end_seq(g, mb) or 0
                if _between(g, start, end, "Z"):
                    continue
                # reset at the forward (grads gone) or between forward and backward (grads replaced)
                if mb.grads_at_forward.all_zero or mb.grads_replaced_before_backward:
                    unobserved.append(mb.index)
            if (plain or unobserved) and "ACC001" not in reported:
                reported.add("ACC001")
                how = (f"{len(plain)}x by {plain[0].detail['source']}()" if plain
                       else f"before microbatch(es) {unobserved} by an operation the probe did not see "
                            "(e.g. p.grad = None)")
                yield _finding(
                    "ACC001", g.index, (plain[0].microbatch + 1 if plain else unobserved[0]),
                    f"gradients reset inside group {g.index}, between its microbatches: {how}", _trace(g.events))
        if g.closed and g.grads_at_update is not None and g.microbatches and "ACC003" not in reported:
            last = g.microbatches[-1].grads_after_backward
            if last is not None and not last.all_zero and g.grads_at_update.all_zero:
                zs = [e for e in g.events if e.kind == "Z" and (last_b or -1) < e.seq < (g.boundary_seq or 0)
                      and e.detail.get("zeroed")]
                how = f"by {zs[0].detail['source']}()" if zs else "by an operation the probe did not see"
                reported.add("ACC003")
                yield _finding(
                    "ACC003", g.index, None,
                    f"the update of group {g.index} was attempted with all-zero or None gradients: they were "
                    f"reset after the last backward {how}", _trace(g.events))
    if structure_bad:
        return
    # a loop that resets late in its groups (before the update, e.g. a prepared reset on the sync
    # microbatch) would reset the watched tail later too: the tail alone proves nothing then
    late_resets = any(
        e.kind == "Z" and e.detail.get("zeroed") and e.seq < (g.boundary_seq or 0)
        for g in rec.full_groups for e in g.events)
    for prev_group, g in zip(rec.groups, rec.groups[1:], strict=False):
        if not g.microbatches or "ACC002" in reported or not prev_group.closed or (g.tail and late_resets):
            continue
        if prev_group.role == "partial":
            continue  # what happens to the partial group's gradients is ACC005's business
        mb0 = g.microbatches[0]
        if mb0.backwards == 0 or mb0.grads_at_forward.all_zero:
            continue
        first_b = g.first_backward_seq() or 0
        end = g.boundary_seq if g.closed else first_b
        resets = [e for e in prev_group.events if e.kind == "Z" and e.seq > (prev_group.boundary_seq or 0)]
        # a reset later in the group (before its update) also keeps the leak out of the update
        resets += [e for e in g.events if e.kind == "Z" and e.seq < max(end, first_b)]
        if any(e.detail.get("zeroed") or e.detail.get("changed") for e in resets):
            continue
        if mb0.grads_replaced_before_backward:
            continue  # grads were replaced (set to None) between the forward and the backward
        reported.add("ACC002")
        yield _finding(
            "ACC002", g.index, 0,
            f"the gradients of group {prev_group.index} were still in .grad (norm {mb0.grads_at_forward.norm:.3g}) "
            f"when the first backward of group {g.index} added to them: no reset after the update",
            _trace(prev_group.events) + " ‖ " + _trace(g.events))


# -- graph lifetime (ACC201, ACC202) -----------------------------------------------------
def kept_graph_unobservable(rec: RunRecord) -> str | None:
    """Why the probed microbatches cannot show a graph kept across microbatches (ACC201), or ``None``.

    A graph counts as kept when, at the last forward of a group of 3 or more, every earlier
    microbatch's graph of that group but the previous one (the loop variable) is alive (a list or
    running sum of the group's losses, also one cleared at the update: rules-spec ACC201 and shared
    case 024), or when it is alive at a forward more than A + 1 microbatches after its own (a
    container that outlives the groups); without a group of 3 the probe must see A + 3 forwards;
    short or irregular groups (an update every microbatch, ``groups=1``) may see fewer."""
    a, _ = rec.effective_a()
    seen = sum(len(g.microbatches) for g in rec.groups)
    if a is None:
        return f"not observable: {seen} microbatches, A unknown (no update attempt observed)"
    if any(len(g.microbatches) >= 3 for g in rec.full_groups):
        return None
    if seen < a + 3:
        return (f"not observable: {seen} microbatches, needs A + 3 = {a + 3} (a kept graph shows A + 2 forwards "
                "after its own)")
    return None


def _graphs(rec: RunRecord) -> Iterator[Finding]:
    a, _ = rec.effective_a()
    mbs = [mb for g in rec.groups for mb in g.microbatches]
    counts = " ".join(str(len(mb.graphs_alive)) for mb in mbs)
    for g in rec.full_groups:
        if len(g.microbatches) >= 2 and g.count("B") == 1 and g.microbatches[-1].backwards == 1:
            peak = g.saved_peak_bytes
            yield _finding(
                "ACC201", g.index, None,
                f"{len(g.microbatches)} forwards and one backward in group {g.index}: all {len(g.microbatches)} "
                f"graphs were alive at once (saved activations peak {peak:,} B)", _trace(g.events))
            break
    else:
        for g in rec.full_groups:
            # the group's last forward: the previous microbatch's graph may be the loop variable's; all
            # the earlier ones alive means the loop keeps each microbatch's loss (or output) for the group
            earlier = [mb.serial for mb in g.microbatches[:-2]]
            if len(g.microbatches) >= 3 and set(earlier) <= set(g.microbatches[-1].graphs_alive):
                last = g.microbatches[-1]
                which = (f"microbatch {g.microbatches[0].index}" if len(earlier) == 1
                         else f"microbatches {g.microbatches[0].index}-{g.microbatches[-3].index}")
                yield _finding(
                    "ACC201", g.index, last.index,
                    f"at the forward of microbatch {last.index} of group {g.index} the graphs of its {which} were "
                    "still alive, beyond the previous microbatch's: every microbatch's loss (or output) is kept with "
                    "its graph at least until the group ends" + (
                        f"; outputs of earlier microbatches alive: {last.kept_output_bytes:,} B"
                        if last.kept_output_bytes else ""),
                    f"graphs alive at each forward: {counts}")
                break
        else:
            yield from _kept_across_groups(a, mbs, counts)
    for mb in mbs:
        if mb.retained_saved_bytes and mb.saved_alive_at_next_forward:
            yield _finding(
                "ACC202", mb.group, mb.index,
                f"{mb.retained_saved_bytes:,} B of saved activations unpacked by the backward of microbatch "
                f"{mb.serial} were still alive at the next forward (backward(retain_graph=True))",
                f"saved bytes alive at each forward: {' '.join(str(m.saved_bytes_at_forward) for m in mbs)}")
            break


def _kept_across_groups(a: int | None, mbs: list[Microbatch], counts: str) -> Iterator[Finding]:
    """ACC201 from a graph alive more than A + 1 microbatches after its forward (a stale loop variable
    keeps at most about one group; a container that outlives the groups keeps more)."""
    if a is None:
        return
    for mb in mbs:
        old = [s for s in mb.graphs_alive if mb.serial - s > a + 1]
        if old:
            kept = (f"; outputs of earlier microbatches alive: {mb.kept_output_bytes:,} B"
                    if mb.kept_output_bytes else "")
            which = (f"the graph of probed microbatch {old[0]} was" if len(old) == 1
                     else f"the graphs of probed microbatches {old[0]}-{old[-1]} were")
            yield _finding(
                "ACC201", mb.group, mb.index,
                f"at the forward of probed microbatch {mb.serial} {which} still alive, more than "
                f"A + 1 = {a + 1} microbatches after their forward{kept}",
                f"graphs alive at each forward: {counts}")
            return


# -- gradient operations and GradScaler (ACC301, ACC302, ACC303) ------------------------
def _grad_ops(rec: RunRecord) -> Iterator[Finding]:
    reported: set[str] = set()
    for g in rec.groups:
        last_b = g.last_backward_seq()
        first_f = g.events[0].seq if g.events else 0
        end = g.boundary_seq if g.closed else (g.events[-1].seq + 1 if g.events else 0)
        clips = [e for e in g.events if e.kind == "C" and first_f < e.seq < end]
        early = [e for e in clips if last_b is not None and e.seq < last_b]
        if "ACC301" not in reported and (early or len(clips) > 1):
            reported.add("ACC301")
            yield _finding("ACC301", g.index, clips[0].microbatch,
                           f"gradients clipped {len(clips)}x in group {g.index}"
                           + (f", {len(early)}x before its last backward" if early else ""), _trace(g.events))
        if "ACC301" not in reported:
            for prev, mb in zip(g.microbatches, g.microbatches[1:], strict=False):
                before = prev.grads_after_backward
                after = mb.grads_at_forward
                if before is None or after.all_zero or before.same_values(after):
                    continue
                start = _backward_end_seq(g, prev) or 0
                seen = [e for e in g.events if start < e.seq < _forward_seq(g, mb.index) and e.kind in "ZCXsU"]
                if not seen:  # an in-place rescale of .grad (ACC307); a clip the probe saw is ACC301 above
                    reported.add("ACC307")
                    yield _finding("ACC307", g.index, mb.index,
                                   f"gradients were rescaled in place between microbatch {prev.index} and {mb.index} "
                                   f"of group {g.index} by an operation the probe did not see (`p.grad.mul_`, "
                                   "`scale_grads`, or a clip function bound before the probe attached)",
                                   _trace(g.events))
                    break
        if not rec.scaler_given:
            continue
        scales = {mb.scale for mb in g.microbatches if mb.scale is not None}
        if "ACC302" not in reported:
            for c in clips:
                unscaled = [e for e in g.events if e.kind == "X" and e.seq < c.seq]
                if not unscaled and any(s != 1.0 for s in scales):
                    reported.add("ACC302")
                    yield _finding("ACC302", g.index, c.microbatch,
                                   f"gradients clipped before scaler.unscale_ while the scale was {max(scales):g}",
                                   _trace(g.events))
                    break
        if "ACC303" not in reported and last_b is not None:
            early_ops = [e for e in g.events if e.kind in "XUs" and e.seq < last_b
                         and not e.detail.get("inside_scaler_step")]
            orphans = _updates_without_step(g)
            if early_ops or len(scales) > 1 or orphans:
                reported.add("ACC303")
                if early_ops:
                    what = ", ".join(sorted({_SCALER_WORDS[e.kind] for e in early_ops})) + " before the last backward"
                elif len(scales) > 1:
                    what = f"the scale changed inside the group ({sorted(scales)})"
                else:
                    raised = " (torch raised: no inf checks were recorded)" if orphans[0].detail.get("raised") else ""
                    what = (f"scaler.update() after microbatch {orphans[0].microbatch} with no scaler.step() since "
                            f"the previous update{raised}")
                first = (early_ops or orphans or [None])[0]
                yield _finding("ACC303", g.index, first.microbatch if first else None,
                               f"group {g.index}: {what}", _trace(g.events))


def _updates_without_step(group: Group) -> list[Event]:
    """``scaler.update()`` calls of an enabled scaler with no ``scaler.step()`` between them and the
    previous update (or the group's start): always a per-microbatch update (torch raises on them)."""
    orphans, stepped = [], False
    for e in group.events:
        if e.kind == "s":
            stepped = True
        elif e.kind == "U":
            if not stepped and e.detail.get("enabled", True):
                orphans.append(e)
            stepped = False
    return orphans


_SCALER_WORDS = {"X": "scaler.unscale_", "U": "scaler.update", "s": "scaler.step"}


# -- scheduler (ACC304) ------------------------------------------------------------------
def _scheduler(rec: RunRecord) -> Iterator[Finding]:
    if not any(g.microbatches for g in rec.groups):
        return  # no microbatch seen (e.g. a compiled module called instead of the probed one): no segments
    events = sorted([e for g in rec.groups for e in g.events] + rec.before_first_forward, key=lambda e: e.seq)
    boundaries = [g.boundary_seq for g in rec.groups if g.closed]
    allowed = rec.scheduler_steps_per_update
    edges = [-1, *boundaries, (events[-1].seq + 1) if events else 0]
    for start, end in zip(edges, edges[1:], strict=False):
        segment = [e for e in events if start < e.seq <= end]
        steps = [e for e in segment if e.kind == "L"]
        if rec.scheduler_owner:  # the framework steps it per epoch: only the user's steps count here
            steps, allowed = [e for e in steps if not e.detail.get("by")], 0
        if len(steps) > allowed:
            where = steps[0]
            group = where.group if where.group >= 0 else None
            owners = scheduler_owners(rec)
            by_user = [e for e in steps if not e.detail.get("by")]
            if rec.scheduler_owner and by_user:
                yield _finding(
                    "ACC306", group, by_user[0].microbatch,
                    f"the LR scheduler was stepped {len(by_user)}x by the user's code between two optimizer update "
                    f"attempts, while {rec.scheduler_owner}", _trace(segment))
                return
            if owners and by_user:  # the framework steps it and the user steps it again
                yield _finding(
                    "ACC306", group, by_user[0].microbatch,
                    f"the LR scheduler stepped {len(steps)}x between two optimizer update attempts, "
                    f"{len(by_user)}x by the user's code, while {', '.join(owners)} steps it too (per update)",
                    _trace(segment))
                return
            yield _finding(
                "ACC304", group, where.microbatch,
                f"the LR scheduler stepped {len(steps)}x between two optimizer update attempts (expected {allowed})",
                _trace(segment))
            return


def _lr_written_each_microbatch(rec: RunRecord) -> Iterator[Finding]:
    """ACC304 without a scheduler object: the learning rate in ``param_groups`` (read at every forward)
    changed between every two microbatches of each probed group, with no update attempt and no probed
    scheduler step in between (timm's ``step_update`` fed a microbatch count, a hand-written schedule
    stepped per microbatch). Only the value at the update is ever used, so a per-update schedule
    advanced every microbatch runs A times too fast."""
    if rec.lr_in_microbatches:
        return
    groups = [g for g in rec.full_groups if len(g.microbatches) >= 2]
    if not groups:
        return
    for g in groups:
        forwards = [e.seq for e in g.events if e.kind == "F"]
        for k, (prev, mb) in enumerate(zip(g.microbatches, g.microbatches[1:], strict=False)):
            stepped = any(e.kind == "L" and forwards[k] < e.seq < forwards[k + 1] for e in g.events)
            if stepped or not prev.lrs or prev.lrs == mb.lrs:
                return
    g = groups[0]
    values = " -> ".join(f"{mb.lrs[0]:.6g}" for mb in g.microbatches)
    yield _finding(
        "ACC304", g.index, 1,
        f"the learning rate in optimizer.param_groups changed between every two microbatches of each probed group "
        f"({len(groups)} group(s); group {g.index}: {values}) with no optimizer update attempt and no scheduler step "
        "the probe saw in between: the schedule is advanced once per microbatch while the update runs once per "
        "group (if its horizon and warmup count microbatches too, litgpt style, pass lr_in_microbatches=True)",
        _trace(g.events))


def scheduler_owners(rec: RunRecord) -> list[str]:
    """The frameworks seen stepping the probed scheduler (``frameworks.scheduler_caller``)."""
    events = [e for g in rec.groups for e in g.events] + rec.before_first_forward
    return sorted({e.detail["by"] for e in events if e.kind == "L" and e.detail.get("by")})


# -- data parallel (ACC401, ACC402, ACC403, ACC404) ---------------------------------------
def _data_parallel(rec: RunRecord) -> Iterator[Finding]:
    if rec.ddp:
        for g in rec.groups:
            for mb in g.microbatches:
                if mb.sync_at_forward and mb.sync_in_backward is False:
                    yield _finding(
                        "ACC401", g.index, mb.index,
                        f"microbatch {mb.index} of group {g.index}: sync flag True at forward, False during "
                        "backward — no_sync() covered only the backward, DDP all-reduced anyway",
                        _flags(g))
                    break
                if (mb is g.microbatches[-1] and g.closed and mb.sync_at_forward is False
                        and mb.sync_in_backward):
                    yield _finding(
                        "ACC401", g.index, mb.index,
                        f"the last microbatch of group {g.index} ran its forward with sync off and set it on only "
                        "after: DDP armed no all-reduce, so the update used unsynchronized gradients", _flags(g))
                    break
            else:
                continue
            break
        for g in rec.full_groups:
            if g.microbatches and all(mb.sync_at_forward is False for mb in g.microbatches):
                extra = "; replica gradient checksums differed at the update" if g.replicas_equal is False else ""
                yield _finding(
                    "ACC402", g.index, None,
                    f"no microbatch of group {g.index} ran its forward with gradient sync on: nothing was "
                    f"all-reduced before the update{extra}", _flags(g))
                break
        else:
            for g in rec.full_groups:
                if g.replicas_equal is False:
                    yield _finding("ACC402", g.index, None,
                                   f"replica gradient checksums differed at the update of group {g.index}", _flags(g))
                    break
    if rec.replica_hashes and len(rec.replica_hashes) > 1:
        mine = rec.replica_hashes[0]
        others = set().union(*map(set, rec.replica_hashes[1:]))
        overlap = sum(h in others for h in mine)
        if mine and overlap >= len(mine) / 2:
            yield _finding(
                "ACC403", None, None,
                f"{overlap} of {len(mine)} examples rank 0 processed in the probed groups were also processed by "
                "another replica (input-row hashes)", f"overlap {overlap}/{len(mine)}")
    observed = _effective_batch(rec)
    if rec.expected_effective_batch is not None and observed is not None and observed != rec.expected_effective_batch:
        yield _finding("ACC404", None, None,
                       f"configured effective batch {rec.expected_effective_batch}, observed m x A x D = {observed}",
                       _effective_batch_text(rec))


def _flags(g: Group) -> str:
    def f(v: bool | None) -> str:
        return "-" if v is None else ("T" if v else "f")

    return ("sync at forward / in backward: "
            + " ".join(f(mb.sync_at_forward) for mb in g.microbatches) + " / "
            + " ".join(f(mb.sync_in_backward) for mb in g.microbatches))


def microbatch_size(rec: RunRecord) -> int | None:
    """m: the most common examples-per-microbatch (first dimension of the first input tensor)."""
    sizes = [mb.examples for g in rec.groups for mb in g.microbatches if mb.examples is not None]
    return max(set(sizes), key=sizes.count) if sizes else None


def _effective_batch(rec: RunRecord) -> int | None:
    m = microbatch_size(rec)
    a, _ = rec.effective_a()
    d = rec.data_parallel.size if rec.data_parallel else None
    return m * a * d if None not in (m, a, d) else None


def _effective_batch_text(rec: RunRecord) -> str:
    a, _ = rec.effective_a()
    d = rec.data_parallel.size if rec.data_parallel else None
    return f"m = {microbatch_size(rec)}, A = {a}, D = {d}"


# -- loss normalization (ACC101, ACC102, ACC103) ------------------------------------------
def normalization_tolerance(rec: RunRecord) -> tuple[float, float]:
    """(ratio tolerance, residual tolerance): fp32 1e-3, bf16/fp16 (params or autocast) 1e-2
    (design notes §3: measured noise 4.8e-8 fp32, 7.2e-4 bf16 autocast)."""
    low = any(d in ("bfloat16", "float16") for d in rec.param_dtypes) or any(
        mb.autocast for g in rec.groups for mb in g.microbatches)
    return (1e-2, 5e-2) if low else (1e-3, 1e-2)


@dataclass
class Normalization:
    """The inferred loss normalization of the probed groups (for the card and the checks)."""

    inferred: bool
    verdict: str
    weight_sums: list[float]
    tokens: list[list[int]]
    codes: list[tuple[str, int, str]]


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
    return Normalization(compared, verdict, [], tokens if all(tokens) else [], codes)


def infer_normalization(rec: RunRecord) -> Normalization:
    """Classify the loss normalization of every closed group: from the replay when it ran,
    else from the per-token weights (see ``ce_weights``)."""
    replayed = _from_replay(rec)
    if replayed is not None and replayed.inferred:
        return replayed
    weights = _from_weights(rec)
    if replayed is not None:  # the replay compared nothing: say why, next to the free inference
        weights.verdict = f"{weights.verdict}; replay {replayed.verdict}"
    return weights


def _from_weights(rec: RunRecord) -> Normalization:
    if not rec.ce_possible:
        return Normalization(False, f"not inferred: {rec.ce_reason}", [], [], [])
    ratio_tol, residual_tol = normalization_tolerance(rec)
    groups = [g for g in rec.full_groups if g.microbatches and all(mb.ce for mb in g.microbatches)]
    if not groups:
        return Normalization(False, "not inferred: no closed group with cross-entropy gradients observed", [], [], [])
    worst = max(mb.ce.residual for g in groups for mb in g.microbatches)
    if worst > residual_tol:
        return Normalization(False, f"not inferred: the loss is not plain softmax cross entropy (residual "
                                    f"{worst:.2g})", [], [], [])
    d = rec.data_parallel.size if rec.data_parallel and rec.data_parallel.size else 1
    expected_a, _ = rec.effective_a()
    sums, tokens, codes = [], [], []
    verdicts = []
    for g in groups:
        n = [mb.ce.tokens for mb in g.microbatches]
        w = [mb.ce.weight_sum / rec.loss_scale for mb in g.microbatches]
        total = sum(w)
        if rec.replica_ce and d > 1:
            index = rec.full_groups.index(g)
            total = sum(r[index][0] for r in rec.replica_ce if index < len(r)) / d / rec.loss_scale
        a = len(g.microbatches)
        sums.append(total)
        tokens.append(n)
        means = [wk / nk for wk, nk in zip(w, n, strict=False) if nk]
        spread = max(mb.ce.spread for mb in g.microbatches)

        def near(x: float, target: float) -> bool:
            return abs(x / target - 1) <= ratio_tol

        if spread > ratio_tol * 10:
            verdicts.append("per-token weights vary inside a microbatch (e.g. per-sequence means)")
            continue
        # class weights (weight= of the loss): only the group's sum is judged, not how tokens are weighted
        by_class = any(mb.ce.by_class for mb in g.microbatches)
        uniform = not by_class and bool(means) and max(means) / min(means) - 1 <= ratio_tol
        equal_microbatches = bool(w) and all(near(wk, total * d / a) for wk in w) if total else False
        unit = ("class-weighted mean" if by_class else
                "token-weighted mean over the group" if uniform else "mean of microbatch means")
        if not by_class and not uniform and equal_microbatches and len(set(n)) > 1:
            codes.append(("ACC102", g.index,
                          f"each microbatch of group {g.index} carries weight {w[0]:.4g} whatever its supervised "
                          f"tokens {n}: per-token weights {', '.join(f'{m:.3g}' for m in means)}"))
        elif not by_class and not uniform:
            unit = "per-token weights differ between microbatches"
        if near(total, 1.0):
            verdicts.append(unit)
        elif a > 1 and near(total, 1.0 / a):
            verdicts.append(f"{unit}, divided by A again (weights sum to 1/A)")
            codes.append(("ACC101", g.index, f"per-token weights of group {g.index} sum to {total:.4g} = 1/A "
                                             f"(A = {a}): the loss was divided by A once too often"))
        elif a > 1 and near(total, float(a)):
            verdicts.append(f"{unit}, not divided by A (weights sum to A)")
            codes.append(("ACC103", g.index, f"per-token weights of group {g.index} sum to {total:.4g} = A "
                                             f"(A = {a}): the loss was not divided by A"))
        else:
            verdicts.append(f"{unit}, weights sum to {total:.4g}: gradients {total:.4g}x the group's token mean")
            # neither 1, 1/A nor A: a denominator off by a factor (a double division by something other than
            # A, labels shifted twice). Only decidable with every replica's weights, and not where a framework
            # quirk the card names explains it.
            # groups of the wrong size are the structure checks' matter (ACC004/ACC006); an inferred A may be wrong
            # and only for plain cross entropy beyond doubt (label smoothing fits within residual_tol but biases
            # the weights by 1 - eps) and gradients not rescaled after the last backward (a sum-reduced loss
            # divided at the boundary: p.grad /= tokens)
            plain = max(mb.ce.residual for mb in g.microbatches) <= residual_tol / 100
            if (uniform and plain and not _rescaled_after_backward(g) and not rec.weight_sum_explained
                    and (d == 1 or rec.replica_ce) and a == expected_a and rec.accumulation_steps is not None):
                code = "ACC101" if total < 1 else "ACC103"
                codes.append((code, g.index, (
                    f"per-token weights of group {g.index} sum to {total:.4g}, neither 1 (the group's token mean), "
                    f"1/A nor A (A = {a}): the gradient is {total:.4g}x the token mean, as if the denominator counted "
                    f"{1 / total:.4g}x the supervised tokens" if total else
                    f"per-token weights of group {g.index} sum to 0")))
    verdict = verdicts[0] if len(set(verdicts)) == 1 else "; ".join(f"group {i}: {v}" for i, v in enumerate(verdicts))
    return Normalization(True, verdict, sums, tokens, codes)


def _rescaled_after_backward(g: Group) -> bool:
    """The group's gradients changed between its last backward and its update attempt by something
    other than a clip or an unscale the probe saw (a division of ``p.grad`` by a token count)."""
    last = g.microbatches[-1].grads_after_backward if g.microbatches else None
    if last is None or g.grads_at_update is None or last.same_values(g.grads_at_update):
        return False
    end = g.boundary_seq if g.boundary_seq is not None else -1
    return not any(e.kind in "CX" and (g.last_backward_seq() or 0) < e.seq < end for e in g.events)


def _normalization(rec: RunRecord) -> Iterator[Finding]:
    norm = infer_normalization(rec)
    seen: set[str] = set()
    sums = dict(zip([g.index for g in rec.full_groups if g.microbatches and all(mb.ce for mb in g.microbatches)],
                    norm.weight_sums, strict=False))
    sizes = {g.index: len(g.microbatches) for g in rec.full_groups}

    def divided(group: int) -> bool:  # the weights sum nearer to 1 than to A: the framework divided by A
        total, a = sums.get(group), sizes.get(group, 1)
        return total is not None and total > 0 and abs(math.log(total)) < abs(math.log(total / a))

    for code, group, text in norm.codes:
        if rec.user_normalizes and code == "ACC102" and divided(group):
            # the weights sum to 1: the framework did divide by A after all (transformers 5.24.0
            # training_step: no num_items_in_batch, e.g. no "labels" in the batch), so this is a mean of means
            text = f"{text}; the weights sum to 1: the framework divided each microbatch loss by A"
        elif rec.user_normalizes and code in ("ACC102", "ACC103"):
            # weights summing to A: the framework left the group normalization to this loss and did not divide
            code, text = "ACC105", f"{text}; {rec.user_normalizes}"
        if code not in seen:
            seen.add(code)
            yield _finding(code, group, None, text, f"weights sum per group {[round(s, 6) for s in norm.weight_sums]}; "
                                                    f"supervised tokens per microbatch {norm.tokens}")


# -- the epoch's partial group (ACC005) -----------------------------------------------------
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
    fix: str | None = None

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
    return any(e.kind == "Z" and start < e.seq < end and (e.detail.get("zeroed") or e.detail.get("changed"))
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
    tail = [mb for g in partial for mb in g.microbatches if mb.epoch == rec.watched_epoch and (mb.batch or 0) >= n - r]
    if not tail:
        return LastGroup("not observed", f"no forward of the partial group's {size} was seen")
    group = partial[-1]
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
                group.index, FIX_WEIGHTED)
        return LastGroup("applied", f"{size}, weighted {ratio:.4g} of a full group ({how})")
    last_b = max((e.seq for g in partial for e in g.events if e.kind == "B"), default=rec.epoch_end_seq)
    following = next((g for g in rec.groups if g.role == "next" and g.microbatches), None)
    if following is None:
        return LastGroup(
            "never applied", f"{size} backpropagated, no update before the probe detached after the epoch end",
            f"never applied: the epoch's last {r} microbatches were backpropagated but no update followed "
            "before the probe "
            "detached after the epoch's end: their examples were never learned from", group.index)
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
        following.index)


def _last_group(rec: RunRecord) -> Iterator[Finding]:
    lg = last_group(rec)
    if lg.finding is not None:
        yield _finding("ACC005", lg.group, None, lg.finding, _run_trace(rec), lg.fix)


def graph_findings(rec: RunRecord) -> list[Finding]:
    """The ACC201/ACC202 findings of ``rec`` (the card asks whether ACC201 was decided)."""
    return list(_graphs(rec))


def evaluate(rec: RunRecord) -> list[Finding]:
    """Every runtime check on the record, in code order."""
    findings, structure_bad = _structure(rec)
    findings += list(_last_group(rec))
    findings += list(_resets(rec, structure_bad))
    findings += list(_graphs(rec))
    findings += list(_grad_ops(rec))
    scheduled = list(_scheduler(rec))
    findings += scheduled or list(_lr_written_each_microbatch(rec))
    findings += list(_data_parallel(rec))
    findings += list(_normalization(rec))
    return sorted(findings, key=lambda f: (f.code, f.group if f.group is not None else -1))
