"""The group-structure rules as properties of simulated traces (ACC001, ACC002, ACC003,
ACC006): the same properties the runtime guard checks on an observed run, read off
the simulator's runs (``accumlint.model.simulation``) whatever the spelling of the loop.

A property is judged on the runs that can show it (``shared/docs/semantic-core.md`` section 5):
A ≥ 2 with whole groups (N = 2A); it holds a verdict only when every run of that configuration
fails it (each run-level choice is a run), no run of the entry is undecided, and one optimizer
updates (which model each backward reaches is not tracked yet, so two optimizers' groups
cannot be told apart). The tail (ACC005) waits for the values: its exemptions are about what the
tail is weighted with.

In ``check``, each of the four rules reports its pattern findings and, where they are silent
on the file, the verdicts of the traces (:func:`with_traces`): the simulator finds the spellings
the patterns miss. Moving a family wholly onto traces (and deleting its patterns) waits for the
traces to find everything the patterns do (frameworks' own loops are not simulated yet).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from accumlint.checks.base import Hit
from accumlint.model.simulation import Simulation
from accumlint.model.trace import Place, Trace, TraceEvent
from accumlint.vocabulary import EventKind

if TYPE_CHECKING:
    from accumlint.checks.base import Rule
    from accumlint.model import FileModel

B, Z, S = EventKind.BACKWARD, EventKind.RESET, EventKind.UPDATE


@dataclass(frozen=True)
class TraceVerdict:
    """A property that fails: ``code``, the ``site`` to change (``node`` in the simulated
    module, None when the event has no call there) and the run that shows it."""

    code: str
    site: Place
    configuration: str
    why: str
    node: object = None


def _one_cadence(trace: Trace) -> bool:
    """Whether every optimizer of the run updates at the same microbatches (one group structure
    for all of them); several optimizers on different cadences (a GAN's discriminator updated
    every microbatch, its generator accumulated) need to know which backward reaches which
    model, which the traces do not hold yet."""
    cadences: dict[str, list[tuple[int, int | None]]] = {}
    for event in trace.events:
        if event.kind is S:
            cadences.setdefault(event.target, []).append((event.epoch, event.microbatch))
    return len({tuple(c) for c in cadences.values()}) <= 1


def _pending_groups(trace: Trace) -> list[list[TraceEvent]]:
    """The events of each group up to (and with) its last update: what happens while gradients
    accumulate (two optimizers updated together close one group)."""
    groups: list[list[TraceEvent]] = [[]]
    for i, event in enumerate(trace.events):
        groups[-1].append(event)
        following = trace.events[i + 1] if i + 1 < len(trace.events) else None
        if event.kind is S and not (following is not None and following.kind is S):
            groups.append([])
    return groups


def _zero_inside(trace: Trace) -> TraceVerdict | None:
    """ACC001: a reset between two backwards of one group (the group's earlier gradients are lost)."""
    for group in _pending_groups(trace)[:-1]:
        seen_backward = False
        for i, event in enumerate(group):
            if event.kind is B:
                seen_backward = True
            elif event.kind is Z and seen_backward and any(e.kind is B for e in group[i + 1:]):
                return TraceVerdict("ACC001", event.site, trace.configuration.describe(),
                                    "a gradient reset between two backwards of one group", event.node)
    return None


def _never_reset(trace: Trace) -> TraceVerdict | None:
    """ACC002: several updates and no reset anywhere in the run (every update also applies the
    gradients of all the groups before it)."""
    updates = [e for e in trace.events if e.kind is S]
    if len(updates) < 2 or any(e.kind is Z for e in trace.events):
        return None
    return TraceVerdict("ACC002", updates[1].site, trace.configuration.describe(),
                        f"{len(updates)} optimizer updates and no gradient reset", updates[1].node)


def _zero_before_step(trace: Trace) -> TraceVerdict | None:
    """ACC003: a reset after the group's last backward and before its update (it updates on zeros)."""
    for group in _pending_groups(trace)[:-1]:
        backwards = [i for i, e in enumerate(group) if e.kind is B]
        if backwards and any(e.kind is Z for e in group[backwards[-1] + 1:-1]):
            reset = next(e for e in group[backwards[-1] + 1:-1] if e.kind is Z)
            return TraceVerdict("ACC003", reset.site, trace.configuration.describe(),
                                "a gradient reset between the group's last backward and its update", reset.node)
    return None


def _irregular(trace: Trace) -> TraceVerdict | None:
    """ACC006: with whole groups (N = 2A), a group of the first epoch that does not hold A
    microbatches (those a forward or a backward of the group ran on; an update with nothing
    pending, a flush after the loop, is no group)."""
    a = trace.configuration.accumulation
    sizes = []
    for group in _pending_groups(trace)[:-1]:
        microbatches = {(e.epoch, e.microbatch) for e in group if e.kind in (B, EventKind.FORWARD)}
        if group and group[-1].epoch == 0 and microbatches:
            sizes.append(len(microbatches))
    if sizes and any(size != a for size in sizes) and any(size > 1 for size in sizes):  # all 1: ACC004's
        update = next(e for e in trace.events if e.kind is S)
        return TraceVerdict("ACC006", update.site, trace.configuration.describe(),
                            f"groups of {sizes} microbatches where A is {a}", update.node)
    return None


#: each property, and which runs show it: (A, N) as a function of A
PROPERTIES: dict[str, tuple[Callable[[Trace], TraceVerdict | None], Callable[[int], int]]] = {
    "ACC001": (_zero_inside, lambda a: 2 * a),
    "ACC002": (_never_reset, lambda a: 2 * a),
    "ACC003": (_zero_before_step, lambda a: 2 * a),
    "ACC006": (_irregular, lambda a: 2 * a),
}


def verdicts(simulation: Simulation) -> list[TraceVerdict]:
    """The properties that fail on every run of a configuration with A ≥ 2 that shows them
    (none when the entry is undecided, or when A is not bound to the code's gate)."""
    if not simulation.decided or not (simulation.symbols or simulation.literal):
        return []
    if not all(_one_cadence(t) for t in simulation.traces):
        return []
    found = []
    for check, size in PROPERTIES.values():
        for a in sorted({t.configuration.accumulation for t in simulation.traces if t.configuration.accumulation > 1}):
            runs = [t for t in simulation.traces
                    if t.configuration.accumulation == a and t.configuration.microbatches == size(a)
                    and t.configuration.replicas == 1]
            results = [check(t) for t in runs]
            if runs and all(results):
                found.append(results[0])  # type: ignore[arg-type]
                break
    codes = {v.code for v in found}
    # a reset every microbatch also falls between the last backward and the update: it is ACC001's
    return [v for v in found if not (v.code == "ACC003" and "ACC001" in codes)]


#: per code: what the failing run shows happens, and what to change
_WORDING: dict[str, tuple[str, str]] = {
    "ACC001": ("the gradients are reset between two backwards of one group: each update applies only the "
               "microbatches after the reset",
               "reset once per group, right after the optimizer update"),
    "ACC002": ("nothing resets the gradients between optimizer updates: every update also applies the "
               "gradients of all the groups before it",
               "reset the gradients (optimizer.zero_grad()) after each optimizer update"),
    "ACC003": ("the gradients are reset after the group's last backward and before its update: the "
               "update applies zeros",
               "move the reset after the optimizer update"),
    "ACC006": ("the update does not fire on the last microbatch of every group of A",
               "gate the update on (i + 1) % A == 0 for a 0-based microbatch index i"),
}


def trace_hits(model: FileModel, code: str) -> Iterator[Hit]:
    """``code``'s verdicts on the simulated runs of ``model``'s entry points, as hits at the
    call in the file that the user must change (one per entry point)."""
    for simulation in model.simulations:
        for verdict in verdicts(simulation):
            if verdict.code == code and verdict.node is not None:
                what, fix = _WORDING[code]
                symbol = f" (A is `{simulation.symbols[0]}`)" if simulation.symbols else ""
                yield Hit(verdict.node, f"{what}; simulated with {verdict.configuration}{symbol}: "  # type: ignore[arg-type]
                          f"{verdict.why}", fix)


def with_traces(check: Callable[[Rule, FileModel], Iterator[Hit]]) -> Callable[[Rule, FileModel], Iterator[Hit]]:
    """A rule's ``check`` that adds the trace verdicts of its code where its patterns find
    nothing in the file that can be reported (a hit on a node of no module the file reaches is
    dropped when the findings are placed)."""
    @functools.wraps(check)
    def checked(rule: Rule, model: FileModel) -> Iterator[Hit]:
        found = False
        for hit in check(rule, model):
            found = found or id(hit.node) in model.local_nodes or model.report_for(hit.node) is not None
            yield hit
        if not found:
            yield from trace_hits(model, rule.code)

    return checked
