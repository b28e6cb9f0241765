"""Gradient resets at run time (ACC001, ACC002, ACC003; ACC501 for a prepared reset inside accumulate()),
judged by gradient fingerprints before and after (a framework no-op zero_grad is not a reset)."""

from __future__ import annotations

from collections.abc import Iterator

from runtime_guard.checks.base import backward_end_seq, between, finding, trace
from runtime_guard.events import RESET
from runtime_guard.record import RunRecord
from runtime_guard.report import RuntimeFinding


def resets(rec: RunRecord, structure_bad: bool) -> Iterator[RuntimeFinding]:
    reported: set[str] = set()
    for g in rec.groups:
        first_b, last_b = g.first_backward_seq(), g.last_backward_seq()
        if first_b is not None and last_b is not None and first_b < last_b:
            inside = [e for e in between(g, first_b, last_b, RESET) if e.detail.get("zeroed")]
            # a prepared reset is Accelerate's matter only while its accumulation drives the loop
            prepared = [e for e in inside if e.detail.get("prepared") and rec.accelerate_accumulates]
            plain = [e for e in inside if e not in prepared]
            if prepared and "ACC501" not in reported:
                reported.add("ACC501")
                yield finding(
                    "ACC501", g.index, prepared[0].microbatch,
                    f"the prepared optimizer's zero_grad() reset the gradients before microbatch "
                    f"{prepared[0].microbatch + 1} of group {g.index}: inside accumulate() a reset before the "
                    "backward runs for real on the sync microbatch and wipes the group", trace(g.events))
            unobserved = []
            for prev, mb in zip(g.microbatches, g.microbatches[1:], strict=False):
                before = prev.grads_after_backward
                if before is None or before.all_zero:
                    continue
                start = backward_end_seq(g, prev) or 0
                end = backward_end_seq(g, mb) or 0
                if between(g, start, end, RESET):
                    continue
                # reset at the forward (grads gone) or between forward and backward (grads replaced)
                if mb.grads_at_forward.all_zero or mb.grads_replaced_before_backward:
                    unobserved.append(mb.index)
            if (plain or unobserved) and "ACC001" not in reported:
                reported.add("ACC001")
                how = (f"{len(plain)}x by {plain[0].detail['source']}()" if plain
                       else f"before microbatch(es) {unobserved} by an operation the probe did not see "
                            "(e.g. p.grad = None)")
                yield finding(
                    "ACC001", g.index, (plain[0].microbatch + 1 if plain else unobserved[0]),
                    f"gradients reset inside group {g.index}, between its microbatches: {how}", trace(g.events))
        if g.closed and g.grads_at_update is not None and g.microbatches and "ACC003" not in reported:
            last = g.microbatches[-1].grads_after_backward
            if last is not None and not last.all_zero and g.grads_at_update.all_zero:
                zs = [e for e in g.events if e.kind == RESET and (last_b or -1) < e.seq < (g.boundary_seq or 0)
                      and e.detail.get("zeroed")]
                how = f"by {zs[0].detail['source']}()" if zs else "by an operation the probe did not see"
                reported.add("ACC003")
                yield finding(
                    "ACC003", g.index, None,
                    f"the update of group {g.index} was attempted with all-zero or None gradients: they were "
                    f"reset after the last backward {how}", trace(g.events))
    if structure_bad:
        return
    # a loop that resets late in its groups (before the update, e.g. a prepared reset on the sync
    # microbatch) would reset the watched tail later too: the tail alone proves nothing then
    late_resets = any(
        e.kind == RESET and e.detail.get("zeroed") and e.seq < (g.boundary_seq or 0)
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
        resets = [e for e in prev_group.events if e.kind == RESET and e.seq > (prev_group.boundary_seq or 0)]
        # a reset later in the group (before its update) also keeps the leak out of the update
        resets += [e for e in g.events if e.kind == RESET and e.seq < max(end, first_b)]
        if any(e.detail.get("zeroed") or e.detail.get("changed") for e in resets):
            continue
        if mb0.grads_replaced_before_backward:
            continue  # grads were replaced (set to None) between the forward and the backward
        reported.add("ACC002")
        yield finding(
            "ACC002", g.index, 0,
            f"the gradients of group {prev_group.index} were still in .grad (norm {mb0.grads_at_forward.norm:.3g}) "
            f"when the first backward of group {g.index} added to them: no reset after the update",
            trace(prev_group.events) + " ‖ " + trace(g.events))
