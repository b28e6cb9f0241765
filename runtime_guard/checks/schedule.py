"""The LR schedule at run time (ACC304, ACC306): scheduler steps between update attempts, who made them,
and learning rates written into param_groups between microbatches."""

from __future__ import annotations

from collections.abc import Iterator

from runtime_guard.checks.base import finding, trace
from runtime_guard.events import FORWARD, SCHEDULER_STEP
from runtime_guard.record import RunRecord
from runtime_guard.report import RuntimeFinding
from runtime_guard.trace import ObservedGroup


def scheduler_steps(rec: RunRecord) -> Iterator[RuntimeFinding]:
    if not any(g.microbatches for g in rec.groups):
        return  # no microbatch seen (e.g. a compiled module called instead of the probed one): no segments
    events = sorted([e for g in rec.groups for e in g.events] + rec.before_first_forward, key=lambda e: e.seq)
    boundaries = [g.boundary_seq for g in rec.groups if g.closed]
    allowed = rec.scheduler_steps_per_update
    edges = [-1, *boundaries, (events[-1].seq + 1) if events else 0]
    for start, end in zip(edges, edges[1:], strict=False):
        segment = [e for e in events if start < e.seq <= end]
        steps = [e for e in segment if e.kind == SCHEDULER_STEP]
        if rec.scheduler_owner:  # the framework steps it per epoch: only the user's steps count here
            steps, allowed = [e for e in steps if not e.detail.get("by")], 0
        if len(steps) > allowed:
            where = steps[0]
            group = where.group if where.group >= 0 else None
            owners = scheduler_owners(rec)
            by_user = [e for e in steps if not e.detail.get("by")]
            if rec.scheduler_owner and by_user:
                yield finding(
                    "ACC306", group, by_user[0].microbatch,
                    f"the LR scheduler was stepped {len(by_user)}x by the user's code between two optimizer update "
                    f"attempts, while {rec.scheduler_owner}", trace(segment))
                return
            if owners and by_user:  # the framework steps it and the user steps it again
                yield finding(
                    "ACC306", group, by_user[0].microbatch,
                    f"the LR scheduler stepped {len(steps)}x between two optimizer update attempts, "
                    f"{len(by_user)}x by the user's code, while {', '.join(owners)} steps it too (per update)",
                    trace(segment))
                return
            yield finding(
                "ACC304", group, where.microbatch,
                f"the LR scheduler stepped {len(steps)}x between two optimizer update attempts (expected {allowed})",
                trace(segment))
            return


def scheduler_indexed_by_microbatch(rec: RunRecord) -> Iterator[RuntimeFinding]:
    """ACC304 with one scheduler step per update: the step is given a count of microbatches
    (``sched.step(i)`` or ``sched.step(epoch=i)`` with the loop's microbatch index), so the scheduler's
    position (``last_epoch``) moves by the group's microbatch count at every update instead of by one.
    Read from the user's steps in the probed full groups: exactly one each, and every move between
    two consecutive groups' steps equal to the later group's microbatch count, >= 2. A position in
    microbatches by design (the horizon counted in microbatches too) is declared with
    ``lr_in_microbatches=True``."""
    if rec.lr_in_microbatches or rec.scheduler_owner:
        return
    positions: list[tuple[ObservedGroup, int]] = []
    for g in rec.full_groups:
        steps = [e for e in g.events if e.kind == SCHEDULER_STEP and not e.detail.get("by")]
        if len(steps) != 1 or not isinstance(steps[0].detail.get("position"), int):
            return
        positions.append((g, steps[0].detail["position"]))
    moves = [(g, now - before) for (prev, before), (g, now) in zip(positions, positions[1:], strict=False)
             if g.index == prev.index + 1]
    if not moves or any(move != len(g.microbatches) or move < 2 for g, move in moves):
        return
    g, move = moves[0]
    path = " -> ".join(str(position) for _, position in positions)
    yield finding(
        "ACC304", g.index, None,
        f"the LR scheduler was stepped once per update, but its position (last_epoch) moved by {move} at each "
        f"update, the group's microbatch count ({path} over groups {positions[0][0].index}-{positions[-1][0].index}): "
        "it is given a count of microbatches (sched.step(i)), so a schedule built per update runs A times too fast "
        "(if its horizon and warmup count microbatches too, pass lr_in_microbatches=True)",
        trace(g.events))


def lr_written_each_microbatch(rec: RunRecord) -> Iterator[RuntimeFinding]:
    """ACC304 without a scheduler object: the learning rate in ``param_groups`` (read at every forward)
    changed between every two microbatches of a probed group, with no update attempt and no probed
    scheduler step in between (timm's ``step_update`` fed a microbatch count, a hand-written schedule
    stepped per microbatch). Only the value at the update is ever used, so a per-update schedule
    advanced every microbatch runs A times too fast. Groups where it stayed constant (a schedule
    that ran out: its end comes A times too early) do not count against it, nor groups where it
    changed at the first or the last gaps only (a phase of the schedule, its warmup or the start of
    its decay, began or ended inside the group); a group where it changed at other gaps only is
    another pattern, left alone."""
    if rec.lr_in_microbatches:
        return
    groups = [g for g in rec.full_groups if len(g.microbatches) >= 2]
    every: list[ObservedGroup] = []
    phase = 0  # groups where a phase of the schedule began or ended
    for g in groups:
        forwards = [e.seq for e in g.events if e.kind == FORWARD]
        changed = []
        for k, (prev, mb) in enumerate(zip(g.microbatches, g.microbatches[1:], strict=False)):
            stepped = any(e.kind == SCHEDULER_STEP and forwards[k] < e.seq < forwards[k + 1] for e in g.events)
            if stepped or not prev.lrs:
                return  # a scheduler step the probe saw: the scheduler check's matter
            changed.append(prev.lrs != mb.lrs)
        if all(changed):
            every.append(g)
        elif _one_run_at_an_end(changed):
            phase += 1
        elif any(changed):
            return
    if not every:
        return
    g = every[0]
    values = " -> ".join(f"{mb.lrs[0]:.6g}" for mb in g.microbatches)
    constant = len(groups) - len(every) - phase
    others = ([f"changed at the first or last gaps only in {phase}"] if phase else []) + (
        [f"constant in {constant if phase else 'the others'}"] if constant else [])
    yield finding(
        "ACC304", g.index, 1,
        f"the learning rate in optimizer.param_groups changed between every two microbatches of {len(every)} of "
        f"{len(groups)} probed group(s) (group {g.index}: {values}"
        + ("; " + ", ".join(others) if others else "")
        + ") with no optimizer update attempt and no scheduler step the probe saw in between: the schedule is "
        "advanced once per microbatch while the update runs once per group (if its horizon and warmup count "
        "microbatches too, litgpt style, pass lr_in_microbatches=True)",
        trace(g.events))


def _one_run_at_an_end(changed: list[bool]) -> bool:
    """``changed`` (per gap between microbatches) is one run of changes that starts at the first gap or
    ends at the last, and not every gap: ``[T, T, F]``, ``[F, T, T]``, not ``[F, T, F]`` or ``[T, F, T]``."""
    if all(changed) or not any(changed):
        return False
    at = [i for i, c in enumerate(changed) if c]
    return at[-1] - at[0] + 1 == len(at) and (changed[0] or changed[-1])


def scheduler_owners(rec: RunRecord) -> list[str]:
    """The frameworks seen stepping the probed scheduler (``frameworks.scheduler_caller``)."""
    events = [e for g in rec.groups for e in g.events] + rec.before_first_forward
    return sorted({e.detail["by"] for e in events if e.kind == SCHEDULER_STEP and e.detail.get("by")})
