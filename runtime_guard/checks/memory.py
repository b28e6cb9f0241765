"""Graph lifetime at run time (ACC201, ACC202): graph sentinels, saved-activation and output bytes alive
at each forward (runtime_guard.graphs records them)."""

from __future__ import annotations

from collections.abc import Iterator

from runtime_guard.checks.base import finding, trace
from runtime_guard.events import BACKWARD
from runtime_guard.record import RunRecord
from runtime_guard.report import RuntimeFinding
from runtime_guard.trace import Microbatch


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


def graphs(rec: RunRecord) -> Iterator[RuntimeFinding]:
    a, _ = rec.effective_a()
    mbs = [mb for g in rec.groups for mb in g.microbatches]
    counts = " ".join(str(len(mb.graphs_alive)) for mb in mbs)
    for g in rec.full_groups:
        if len(g.microbatches) >= 2 and g.count(BACKWARD) == 1 and g.microbatches[-1].backwards == 1:
            peak = g.saved_peak_bytes
            yield finding(
                "ACC201", g.index, None,
                f"{len(g.microbatches)} forwards and one backward in group {g.index}: all {len(g.microbatches)} "
                f"graphs were alive at once (saved activations peak {peak:,} B)", trace(g.events))
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
                yield finding(
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
            yield finding(
                "ACC202", mb.group, mb.index,
                f"{mb.retained_saved_bytes:,} B of saved activations unpacked by the backward of microbatch "
                f"{mb.serial} were still alive at the next forward (backward(retain_graph=True))",
                f"saved bytes alive at each forward: {' '.join(str(m.saved_bytes_at_forward) for m in mbs)}")
            break


def _kept_across_groups(a: int | None, mbs: list[Microbatch], counts: str) -> Iterator[RuntimeFinding]:
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
            yield finding(
                "ACC201", mb.group, mb.index,
                f"at the forward of probed microbatch {mb.serial} {which} still alive, more than "
                f"A + 1 = {a + 1} microbatches after their forward{kept}",
                f"graphs alive at each forward: {counts}")
            return


def graph_findings(rec: RunRecord) -> list[RuntimeFinding]:
    """The ACC201/ACC202 findings of ``rec`` (the card asks whether ACC201 was decided)."""
    return list(graphs(rec))
