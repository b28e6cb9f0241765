"""The group-structure rules as properties of simulated traces (ACC001, ACC002, ACC003,
ACC005, ACC006, ACC009, ACC010; ACC301, ACC402 and ACC407 of the clip and sync families): the same properties the
runtime guard checks on an observed run, read off the simulator's runs
(``accumlint.model.simulation``) whatever the spelling of the loop.

A property is judged on the runs that can show it (``shared/docs/semantic-core.md`` section 5):
A ≥ 2 with whole groups (N = 2A); it holds a verdict only when every run of that configuration
fails it (each run-level choice is a run), no run of the entry is undecided, and one optimizer
updates (which model each backward reaches is not tracked yet, so two optimizers' groups
cannot be told apart). ACC005 is judged on runs with a tail (N = 2A + 1) for what happens to the
tail across epochs; a tail applied with the wrong weight waits for the values.

ACC002 speaks of no group (updates of the same parameters that nothing resets apply every
gradient before them whatever A is): it is judged on any decided entry, A bound or not.

In ``check``, ACC003, ACC402 and ACC407 report the verdicts of the traces alone (:func:`trace_hits`);
each of the others reports its pattern findings and, where they are silent on the file, the
verdicts of the traces (:func:`with_traces`): the simulator finds the spellings the patterns
miss. Moving one of them wholly onto traces (and deleting its patterns)
waits for the traces to find everything the patterns do (frameworks' own loops are not
simulated yet; a trace verdict is one per entry point, the patterns report each site).
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import libcst as cst

from accumlint import frameworks as fw
from accumlint.checks.base import FlowStep, Hit
from accumlint.model.events import measures_only
from accumlint.model.kinds import Role
from accumlint.model.names import dotted, walk
from accumlint.model.simulation import Simulation
from accumlint.model.sync import accumulates_outside_no_sync
from accumlint.model.trace import Place, Trace, TraceEvent
from accumlint.spec import UNAPPLIED_TAIL
from accumlint.spec.vocabulary import EventKind

if TYPE_CHECKING:
    from accumlint.checks.base import Rule
    from accumlint.model import FileModel

B, Z, S, C = EventKind.BACKWARD, EventKind.RESET, EventKind.UPDATE, EventKind.CLIP

#: Owners whose clip is not the user's business inside a loop: the DeepSpeed engine clips at its
#: own boundary, mmengine's wrapper clips inside its boundary ``step()`` (a clip of the code's inside
#: a group such an owner updates is no ACC301, in the patterns and on the traces)
FRAMEWORK_CLIPPERS = frozenset({Role.ENGINE, Role.OPTIM_WRAPPER})


@dataclass(frozen=True)
class TraceVerdict:
    """A property that fails: ``code``, the ``event`` to change (its ``node`` in the simulated
    module, None when the event has no call there) and the run that shows it."""

    code: str
    event: TraceEvent
    configuration: str
    why: str

    @property
    def site(self) -> Place:
        return self.event.site

    @property
    def node(self) -> object:
        return self.event.node


def _training_events(trace: Trace) -> list[TraceEvent]:
    """The run's events without the passes over data that never update where every epoch holds
    whole groups (N ≥ A): a scan of the largest batches for out-of-memory, backward and reset
    per batch before training starts, accumulates into no group."""
    probes = _probes(trace.events)
    events = [e for i, e in enumerate(trace.events) if i not in probes]
    configuration = trace.configuration
    if configuration.microbatches < configuration.accumulation:
        return events
    updated = {e.epoch for e in events if e.kind is S}
    return [e for e in events if e.epoch in updated or e.kind is not B and e.kind is not Z]


def _probes(events: list[TraceEvent]) -> set[int]:
    """The indices of the forwards and backwards that run after an update on its own microbatch
    (the microbatch's backward came before it) and whose gradients a reset discards before any
    other backward or update: a pass of its own between two groups (a curvature probe that an
    optimizer's estimate reads, as Sophia's Hessian refresh does), which no group applies."""
    found: set[int] = set()
    last_backward: tuple[int, int | None] | None = None
    for i, event in enumerate(events):
        if event.kind is B:
            last_backward = (event.epoch, event.microbatch)
        if event.kind is not S or last_backward != (event.epoch, event.microbatch):
            continue
        probe: list[int] = []
        for j in range(i + 1, len(events)):
            later = events[j]
            if later.kind in (B, EventKind.FORWARD) and (later.epoch, later.microbatch) == last_backward:
                probe.append(j)
            elif later.kind is Z and any(events[k].kind is B for k in probe):
                found.update(probe)
                break
            elif later.kind in (B, S, EventKind.FORWARD, EventKind.EPOCH_END):
                break
    return found


def _pending_groups(trace: Trace) -> list[list[TraceEvent]]:
    """The events of each group up to (and with) its last update: what happens while gradients
    accumulate (two optimizers updated together close one group)."""
    groups: list[list[TraceEvent]] = [[]]
    events = _training_events(trace)
    for i, event in enumerate(events):
        groups[-1].append(event)
        following = events[i + 1] if i + 1 < len(events) else None
        if event.kind is S and not (following is not None and following.kind is S):
            groups.append([])
    return groups


def _zeros_inside(trace: Trace) -> list[TraceVerdict]:
    """ACC001 at each reset between two backwards of one epoch in one group (the group's earlier
    gradients are lost), once per reset call. A reset between the last backward of one epoch and
    the first of the next runs once per epoch, not every microbatch: it drops the epoch's tail
    (ACC005's when the next epoch's first group comes out short, a deliberate drop otherwise)."""
    found: dict[int, TraceVerdict] = {}
    for group in _pending_groups(trace)[:-1]:
        last_epoch: int | None = None  # of the last backward so far
        for i, event in enumerate(group):
            if event.kind is B:
                last_epoch = event.epoch
            elif event.kind is Z and last_epoch is not None and any(
                    e.kind is B and e.epoch == last_epoch for e in group[i + 1:]):
                found.setdefault(id(event.node), TraceVerdict("ACC001", event, trace.configuration.describe(),
                                                              "a gradient reset between two backwards of one group"))
    return list(found.values())


def _zero_inside(trace: Trace) -> TraceVerdict | None:
    """ACC001: the first of :func:`_zeros_inside`."""
    return next(iter(_zeros_inside(trace)), None)


def _repeated_updates(trace: Trace) -> list[TraceVerdict]:
    """ACC002 at each update that applies parameters a run updated before, with no reset
    anywhere in the run (it also applies all the gradients before it): by one optimizer, or by
    optimizers built afresh over one model's ``parameters()`` (one built over fresh tensors for
    each update applies nothing twice). One per update call (a script's second training loop
    that updates the same model again is a site of its own)."""
    if any(e.kind is Z for e in trace.events):
        return []
    updates = [e for e in trace.events if e.kind is S]
    updated: set[object] = set()
    found: dict[int, TraceVerdict] = {}
    for update in updates:
        key = update.parameters if update.parameters is not None else update.target
        if key in updated and id(update.node) not in found:
            found[id(update.node)] = TraceVerdict("ACC002", update, trace.configuration.describe(),
                                                  f"{len(updates)} optimizer updates and no gradient reset")
        updated.add(key)
    return list(found.values())


def _never_reset(trace: Trace) -> TraceVerdict | None:
    """ACC002: the first of :func:`_repeated_updates`."""
    return next(iter(_repeated_updates(trace)), None)


def _zero_before_step(trace: Trace) -> TraceVerdict | None:
    """ACC003: a reset after the group's last backward and before its update (it updates on zeros)."""
    for group in _pending_groups(trace)[:-1]:
        backwards = [i for i, e in enumerate(group) if e.kind is B]
        if backwards and any(e.kind is Z for e in group[backwards[-1] + 1:-1]):
            reset = next(e for e in group[backwards[-1] + 1:-1] if e.kind is Z)
            return TraceVerdict("ACC003", reset, trace.configuration.describe(),
                                "a gradient reset between the group's last backward and its update")
    return None


def _groups_by_update_microbatch(trace: Trace) -> list[list[TraceEvent]]:
    """The closed pending groups, those whose updates of different optimizers follow the same
    microbatch merged: two optimizers on one gate, each updated after its own backward (a
    GAN's), close one group."""
    groups: list[list[TraceEvent]] = []
    for group in _pending_groups(trace)[:-1]:
        before, update = (groups[-1][-1] if groups else None), group[-1]
        if before is not None and before.target != update.target and \
                (before.epoch, before.microbatch) == (update.epoch, update.microbatch):
            groups[-1] = groups[-1] + group
        else:
            groups.append(group)
    return groups


def _irregular(trace: Trace) -> TraceVerdict | None:
    """ACC006: with whole groups (N = 2A), a group of the first epoch that does not hold A
    microbatches (those a forward or a backward of the group ran on; an update with nothing
    pending, a flush after the loop, is no group). The epoch's last group, short because the
    code skipped microbatches of the epoch (a resumed run's fast-forward), is its tail: ACC005's."""
    a = trace.configuration.accumulation
    sizes, ends = [], []
    for group in _groups_by_update_microbatch(trace):
        microbatches = {(e.epoch, e.microbatch) for e in group if e.kind in (B, EventKind.FORWARD)}
        if group and group[-1].epoch == 0 and microbatches:
            sizes.append(len(microbatches))
            ends.append(max((m for _, m in microbatches if m is not None), default=None))
    trained = [e.microbatch for e in trace.events
               if e.kind in (B, EventKind.FORWARD) and e.epoch == 0 and e.microbatch is not None]
    judged = sizes[:-1] if len(sizes) > 1 and sizes[-1] < a and trained and ends[-1] == max(trained) else sizes
    if judged and any(size != a for size in judged) and any(size > 1 for size in judged):  # all 1: ACC004's
        update = next(e for e in trace.events if e.kind is S)
        return TraceVerdict("ACC006", update, trace.configuration.describe(),
                            f"groups of {sizes} microbatches where A is {a}")
    return None


def _accumulates(trace: Trace) -> bool:
    """Whether some update of ``trace`` applies more than one microbatch: a run that updates after
    every microbatch (the arm of a setting that turns accumulation off) shows no group of A."""
    return any(len({(e.epoch, e.microbatch) for e in group if e.kind in (B, EventKind.FORWARD)}) > 1
               for group in _groups_by_update_microbatch(trace))


def _restarts(trace: Trace) -> bool:
    """Whether the update's cadence starts again with each epoch: the first two epochs update
    after the same microbatches of theirs (a per-epoch index; a count kept across epochs
    shifts them when A does not divide N)."""
    at = [{m for e, m in trace.updates_at() if e == epoch} for epoch in (0, 1)]
    return bool(at[0]) and at[0] == at[1]


def _tail(trace: Trace) -> TraceVerdict | None:
    """ACC005: with epochs the code itself repeats, an epoch's last microbatches after its last
    update are neither applied in that epoch nor dropped cleanly: they join the next epoch's
    first update (a leak across the epochs) in a group of other than A, or while the cadence
    restarts with the epoch; or a reset at the next epoch's start wipes them while the next
    epoch's first group holds fewer than A (the counter survived the reset). A group of A that
    runs across the boundary of a count kept across epochs is by design; a tail never applied
    at the end of a single pass is left to the patterns (it needs the code to say that the
    length may not be a multiple of A)."""
    if not trace.epochs_from_code:
        return None
    a = trace.configuration.accumulation
    updating = {e.epoch for e in trace.events if e.kind is S}
    for group in _pending_groups(trace)[:-1]:
        backwards = [(i, (e.epoch, e.microbatch)) for i, e in enumerate(group) if e.kind is B]
        if len({epoch for _, (epoch, _) in backwards}) < 2 or backwards[0][1][0] not in updating:
            continue  # within one epoch, or after a pass that updates nothing (a reference, no tail)
        resets = [i for i, e in enumerate(group) if e.kind is Z and i > backwards[0][0]]  # wiping a backward
        epoch_of = [max((at[0] for j, at in backwards if j < i), default=None) for i in resets]
        if any(epoch is not None and any(j > i and at[0] == epoch for j, at in backwards)
               for i, epoch in zip(resets, epoch_of, strict=True)):
            continue  # a reset between backwards of one epoch: ACC001's
        kept = {at for i, at in backwards if not resets or i > resets[-1]}
        merged = len({at for _, at in backwards})
        if (not resets and (merged != a or _restarts(trace))) or (resets and 0 < len(kept) < a):
            why = (f"they join the next epoch's first update, a group of {merged} microbatches from two epochs "
                   f"where A is {a} (and a run that ends after an epoch's tail never applies it)" if not resets else
                   f"a reset at the next epoch's start wipes them (dropped), and the count that survived it makes "
                   f"that epoch's first group A - r microbatches ({len(kept)} where A is {a})")
            return TraceVerdict("ACC005", group[-1], trace.configuration.describe(), why)
    return None


def _clips_inside(trace: Trace) -> list[TraceVerdict]:
    """ACC301 at each gradient clip in a group of several microbatches before its last backward:
    it clips a partial sum of the group's gradient (an infinite threshold only measures the
    norm), once per clip call."""
    found: dict[int, TraceVerdict] = {}
    clippers = {role.value for role in FRAMEWORK_CLIPPERS}
    for group in _pending_groups(trace)[:-1]:
        backwards = [i for i, e in enumerate(group) if e.kind is B]
        if len(backwards) < 2 or group[-1].role in clippers:
            continue
        for k, event in enumerate(group[:backwards[-1]]):
            # between two backwards of one epoch's pass (not after a reference pass that ended its epoch)
            between = any(group[i].epoch == event.epoch for i in backwards if i < k) and \
                any(group[i].epoch == event.epoch for i in backwards if i > k)
            if event.kind is C and between and not (isinstance(event.node, cst.Call) and measures_only(event.node)):
                found.setdefault(id(event.node), TraceVerdict(
                    "ACC301", event, trace.configuration.describe(),
                    f"a gradient clip before the group's last backward (a group of {len(backwards)} backwards)"))
    return list(found.values())


def _clip_inside(trace: Trace) -> TraceVerdict | None:
    """ACC301: the first of :func:`_clips_inside`."""
    return next(iter(_clips_inside(trace)), None)


def _never_synced(trace: Trace) -> TraceVerdict | None:
    """ACC402: a group whose last backward and the forward of its microbatch (which decides
    DDP's sync; the run must show it) run under ``no_sync()``: the group's gradients are never
    all-reduced, and each replica updates with its own (a run that all-reduces them by hand is
    exempt)."""
    if trace.reduced_by_hand:
        return None
    for group in _pending_groups(trace)[:-1]:
        last = next((e for e in reversed(group) if e.kind is B), None)
        if last is None or last.synced is not False:
            continue
        forwards = [e for e in group if e.kind is EventKind.FORWARD and e.microbatch == last.microbatch
                    and e.epoch == last.epoch]
        if forwards and all(f.synced is False for f in forwards):  # a forward outside: DDP syncs (ACC401's)
            return TraceVerdict("ACC402", last, trace.configuration.describe(),
                                "the group's last backward runs under no_sync()")
    return None


def _accumulated_without_sum(trace: Trace) -> TraceVerdict | None:
    """ACC407: a group whose earlier backward runs outside ``no_sync()`` (its sync on, as the run
    knows it) on a microbatch forwarded through a wrapper that does not sum the gradients of
    backwards run that way (FSDP1 with CPU parameter offload:
    :func:`accumlint.model.sync.accumulates_outside_no_sync`): the group's update applies the
    gradient of its last such backward and the ones after it, not the group's sum."""
    for group in _pending_groups(trace)[:-1]:
        backwards = [e for e in group if e.kind is B]
        for backward in backwards[:-1]:
            if backward.synced is not True:
                continue
            forwards = [e for e in group if e.kind is EventKind.FORWARD and e.epoch == backward.epoch
                        and e.microbatch == backward.microbatch]
            if forwards and all(accumulates_outside_no_sync(f.built) is False for f in forwards):
                return TraceVerdict("ACC407", backward, trace.configuration.describe(),
                                    f"a backward before the group's last (of {len(backwards)}) runs outside "
                                    "no_sync() on an FSDP1 model that offloads its parameters")
    return None


def _restarted_data(trace: Trace) -> TraceVerdict | None:
    """ACC009: with whole groups (N = 2A), every group learns from a new pass over the same loader
    that starts again at its first item, while the pass before it was left after fewer than the
    epoch's N items: each update sees the data the update before it saw (a pass run to the end of
    its epoch before the next starts is a new epoch, not a restart)."""
    n = trace.configuration.microbatches
    groups = [[e for e in g if e.kind is B] for g in _pending_groups(trace)[:-1]]
    groups = [g for g in groups if g]
    if len(groups) < 2 or any(e.fetch is None or e.fetch.source is None for g in groups for e in g):
        return None
    drawn: dict[int, int] = {}  # the items each pass drew, over the run
    for event in trace.events:
        if event.kind is B and event.fetch is not None:
            drawn[event.fetch.serial] = max(drawn.get(event.fetch.serial, 0), event.fetch.position + 1)
    for before, after in itertools.pairwise(groups):
        seen, now = [e.fetch for e in before], [e.fetch for e in after]
        if len({f.source for f in (*seen, *now)}) != 1 or {f.serial for f in seen} & {f.serial for f in now}:
            return None  # other data, or one pass that goes on across the groups
        if min(f.position for f in now) != 0 or any(drawn[f.serial] >= n for f in seen):
            return None  # not from the start again, or after a whole epoch
        if not {f.position for f in now} <= {f.position for f in seen}:
            return None
    first = groups[1][0]
    return TraceVerdict("ACC009", first, trace.configuration.describe(),
                        f"each of {len(groups)} groups draws its microbatches from a new pass over the loader, from "
                        f"its first item (a pass left after {max(drawn[e.fetch.serial] for e in groups[0])} of its "
                        f"{n} items)")


def _repeated_action(trace: Trace) -> TraceVerdict | None:
    """ACC010: an action meant once per update (:mod:`accumlint.model.actions`) that runs on two
    consecutive microbatches (or two chunks of one, a backward between them) with no update
    between them, while in another group of the run it
    does not run at all: it is keyed to a count that changes only at the updates (a test on an
    update counter on the microbatch path), so whenever it fires it fires for every microbatch of
    a group. An action on every microbatch (meant per microbatch, or a choice of the run) or on a
    microbatch count's multiples never shows both."""
    closed = sum(1 for e in trace.events if e.kind is S)
    groups_with_backward: set[int] = set()
    updates = 0
    for event in trace.events:
        if event.kind is S:
            updates += 1
        elif event.kind is B and updates < closed:
            groups_with_backward.add(updates)
    by_site: dict[Place, list[tuple[int, TraceEvent, int]]] = {}
    for index, action in trace.actions:
        before = sum(1 for e in trace.events[:index] if e.kind is S)
        by_site.setdefault(action.site, []).append((before, action, index))
    for runs in by_site.values():
        quiet = groups_with_backward - {before for before, _, _ in runs}
        for (before, action, start), (after, other, end) in itertools.pairwise(runs):
            if before != after or not quiet or action.epoch != other.epoch or action.microbatch is None:
                continue
            # the next microbatch, or the next chunk of the same one (a backward between the two)
            if other.microbatch == action.microbatch + 1 or other.microbatch == action.microbatch and any(
                    e.kind is B for e in trace.events[start:end]):
                times = sum(1 for b, _, _ in runs if b == before)
                return TraceVerdict("ACC010", action, trace.configuration.describe(),
                                    f"the {action.target} runs {times} times between two optimizer updates and not "
                                    f"at all in {len(quiet)} other group(s)")
    return None


def _across_epochs(trace: Trace) -> bool:
    """Whether ``trace`` can show what the code does at its own epoch's end: the code's passes
    over its data end the epochs, and at least two of them backpropagate."""
    return trace.epochs_from_code and len({e.epoch for e in trace.events if e.kind is B}) > 1


@dataclass(frozen=True)
class Property:
    """A group-structure property: its ``check`` on one run, the epoch lengths ``sizes`` (each N
    as a function of A) of the runs that show it (it fails where every run of one of them
    fails), ``judges``: whether a run can show it at all, and ``about``: whether a run holds what
    the property speaks of (a run-level choice whose runs hold none of it, a single-process
    branch that never enters ``no_sync()``, is left out of its verdict, not counted a pass)."""

    check: Callable[[Trace], TraceVerdict | None]
    sizes: Callable[[int], tuple[int, ...]]
    judges: Callable[[Trace], bool] = lambda trace: True
    about: Callable[[Trace], bool] = lambda trace: True
    #: whether the property speaks of A's groups (A bound to the code's gate, one group structure)
    grouped: bool = True
    #: where the property reports each failing site of a run, not only the first: the failures of a run
    each: Callable[[Trace], list[TraceVerdict]] | None = None


#: each property, and which runs show it
PROPERTIES: dict[str, Property] = {
    "ACC001": Property(_zero_inside, lambda a: (2 * a,), each=_zeros_inside),
    "ACC002": Property(_never_reset, lambda a: (2 * a,), grouped=False, each=_repeated_updates),
    "ACC003": Property(_zero_before_step, lambda a: (2 * a,)),
    # (a setting's arm that updates every microbatch is left out: ACC004 speaks of it)
    "ACC006": Property(_irregular, lambda a: (2 * a,), about=_accumulates),
    "ACC009": Property(_restarted_data, lambda a: (2 * a,)),
    # (the runs that act: an evaluation under a setting, `if cfg.eval and ...`, is judged where it is on)
    "ACC010": Property(_repeated_action, lambda a: (2 * a,), about=lambda trace: bool(trace.actions)),
    # (a setting that runs one epoch, `n_epochs = 1` for a loader without a length, leaves out its runs)
    "ACC005": Property(_tail, lambda a: (2 * a, 2 * a + 1), lambda trace: _across_epochs(trace),
                       about=lambda trace: _across_epochs(trace)),
    # (the runs that clip: a clip under a setting, `if cfg.max_norm > 0:`, is judged in the runs that take it)
    "ACC301": Property(_clip_inside, lambda a: (2 * a,), about=lambda trace: any(e.kind is C for e in trace.events),
                       each=_clips_inside),
    "ACC402": Property(_never_synced, lambda a: (2 * a,),
                       about=lambda trace: any(e.synced is False for e in trace.events)),
    "ACC407": Property(_accumulated_without_sum, lambda a: (2 * a,),
                       about=lambda trace: any(accumulates_outside_no_sync(e.built) is False for e in trace.events)),
}


def _judgeable(simulation: Simulation, rule: Property) -> bool:
    """Whether the traces of ``simulation`` can hold a verdict on ``rule``: decided and, where the
    rule speaks of groups, A bound to the code's gate, one group structure for all its optimizers
    (updates that nothing resets apply every gradient before them whatever A is), and groups at
    all (:meth:`~accumlint.model.simulation.Simulation.trains_without_groups`: a gate around whole
    training steps is no boundary of one)."""
    return simulation.decided and (not rule.grouped or simulation.binds_a and
                                   not any(t.optimizers_apart() for t in simulation.traces)
                                   and not simulation.trains_without_groups())


#: a property whose failure follows from another's, and that other: a reset every microbatch
#: also falls between the last backward and the update (ACC001's); a gate that fires on an
#: epoch's first microbatch leaves its last ones to the next epoch (ACC006's, whose message says
#: so); a clip between backwards that a reset every microbatch separates handles each microbatch
#: alone (DP-SGD; ACC001 speaks when that is a bug). The first stands on its own where an epoch
#: length that only it is shown by runs: an
#: epoch with a tail (N = 2A + 1) leaks under a shifted gate too unless the code applies it
_DEFERS = {"ACC003": "ACC001", "ACC005": "ACC006", "ACC301": "ACC001"}


def _deferred(simulation: Simulation, code: str, failing: set[str]) -> bool:
    """Whether ``code``'s failure on ``simulation`` is the failure of the property it defers to
    (in ``failing``): no run of an epoch length that only ``code``'s property is shown by
    exists for the smallest A simulated (the code rules it out, or the property has none)."""
    other = _DEFERS.get(code)
    if other not in failing:
        return False
    judged = _runs_by_a(simulation, PROPERTIES[code])[:1]
    if not judged:
        return True
    a = min(t.configuration.accumulation for per_size in judged for runs, _ in per_size for t in runs) \
        if any(runs for runs, _ in judged[0]) else None
    own = set(PROPERTIES[code].sizes(a)) - set(PROPERTIES[other].sizes(a)) if a else set()
    shown = [runs for runs, _ in judged[0] if runs and runs[0].configuration.microbatches in own]
    if code == "ACC005" and shown and not any(_restarts(t) for runs in shown for t in runs):
        return True  # a count kept across epochs: with its gate aligned, groups of A run across the boundary
    return not shown


def _about(simulation: Simulation, rule: Property, runs: list[Trace]) -> list[Trace]:
    """The runs of one configuration that ``rule`` speaks of: those its ``about`` leaves out are
    left out only where what sets them apart is a setting of the run (a ``distributed`` flag),
    never a choice that reads the accumulation symbol (a cadence of a count the run cannot see)."""
    kept = [t for t in runs if rule.about(t)]
    if not kept or len(kept) == len(runs):
        return runs
    apart = {key for t in runs for key, _ in t.choices if len({dict(u.choices).get(key) for u in runs}) > 1}
    if any(re.search(rf"\b{re.escape(symbol)}\b", key) for key in apart for symbol in simulation.symbols):
        return runs
    return kept


def _runs_by_a(simulation: Simulation, rule: Property) -> list[list[tuple[list[Trace], bool]]]:
    """For each A ≥ 2 simulated (smallest first), for each epoch length that shows ``rule``,
    its runs and whether the code rules that configuration out."""
    values = {t.configuration.accumulation for t in simulation.traces} | \
        {c.accumulation for c in simulation.impossible}
    found = []
    for a in sorted(a for a in values if a > 1):
        per_size = []
        for n in rule.sizes(a):
            runs = _about(simulation, rule, [t for t in simulation.traces if t.configuration.accumulation == a
                                             and t.configuration.microbatches == n and t.configuration.replicas == 1])
            per_size.append((runs, any(c.accumulation == a and c.microbatches == n for c in simulation.impossible)))
        if any(runs or ruled_out for runs, ruled_out in per_size):
            found.append(per_size)
    return found


def verdicts(simulation: Simulation) -> list[TraceVerdict]:
    """The properties that fail on every run of a configuration with A ≥ 2 that shows them
    (none when the entry is undecided; none that speaks of groups when A is not bound to the
    code's gate)."""
    found = []
    for rule in PROPERTIES.values():
        if not _judgeable(simulation, rule):
            continue
        failed = next(((results[0], runs) for per_size in _runs_by_a(simulation, rule) for runs, _ in per_size
                       for results in [[rule.check(t) for t in runs]] if runs and all(results)), None)
        if failed is not None:
            found.append(failed[0])
            if rule.each is not None:
                found.extend(_other_sites(rule.each, failed[0], failed[1]))
    codes = {v.code for v in found}
    return [v for v in found if not _deferred(simulation, v.code, codes)]


def _other_sites(each: Callable[[Trace], list[TraceVerdict]], first: TraceVerdict,
                 runs: list[Trace]) -> list[TraceVerdict]:
    """The failures ``each`` finds at other sites than ``first``'s that fail in every one of
    ``runs`` that runs them (a clip in one arm of a run-level choice fails in that arm's runs)."""
    per_run = [({id(v.node): v for v in each(t)}, {id(e.node) for e in t.events}) for t in runs]
    found: dict[int, TraceVerdict] = {}
    for failures, _ in per_run:
        for key, verdict in failures.items():
            if key != id(first.node) and key not in found and \
                    all(key in other for other, ran in per_run if key in ran):
                found[key] = verdict
    return list(found.values())


def decides(model: FileModel, code: str, node: object) -> bool:
    """Whether a simulation of ``model`` decides ``code``'s property for the code at ``node``:
    its runs executed ``node``, hold a verdict, and for the smallest A simulated (``check``
    simulates one) every epoch length that shows the property was run with runs that can show it,
    or is ruled out by the code. A pattern finding there gives way to the traces' verdict."""
    rule = PROPERTIES[code]
    for simulation in model.simulations:
        if not simulation.covers(node) or not _judgeable(simulation, rule):
            continue
        judged = _runs_by_a(simulation, rule)[:1]
        if code in _DEFERS and _deferred(simulation, code, {v.code for v in verdicts(simulation)}):
            return True  # the other property's finding covers it
        if judged and all(ruled_out and not runs or runs and all(map(rule.judges, runs))
                          for runs, ruled_out in judged[0]):
            return True
    return False


#: per code: what the failing run shows happens (the help is the spec's fix, and :data:`_SITE_FIX`)
_WORDING: dict[str, str] = {
    "ACC001": "the gradients are reset between two backwards of one group: each update applies only the "
              "microbatches after the reset",
    "ACC002": "nothing resets the gradients between optimizer updates: every update also applies the "
              "gradients of all the groups before it",
    "ACC003": "the gradients are reset after the group's last backward and before its update: the "
              "update applies zeros",
    "ACC005": "when the epoch's length is not a multiple of A, its last microbatches after the last full "
              "group are backpropagated but not applied in that epoch",
    "ACC006": "the update does not fire on the last microbatch of every group of A",
    "ACC009": "each group draws its microbatches from a new iterator over the loader, which starts again at the "
              "loader's first microbatch: every optimizer update trains on the same first microbatches",
    "ACC010": "this action is tested on a counter that changes only at the optimizer updates, on the path every "
              "microbatch takes: whenever the test is true it stays true for the A microbatches of a group, so "
              "the action runs A times per update",
    "ACC402": "the microbatch that ends each group runs under no_sync(): its all-reduce is skipped, so the group's "
              "gradients are never averaged across replicas and each replica updates with its own",
    "ACC407": "FSDP1 with CPU parameter offload does not add a backward's gradient run outside no_sync() to the "
              "gradient already accumulated (torch's FullyShardedDataParallel, Limitations): the optimizer update "
              "applies the last microbatch's gradient, not the group's sum",
    "ACC301": "the gradients are clipped on a microbatch before the group's last one: each clip acts on a partial "
              "sum of the group's gradient, not on the accumulated gradient the optimizer update applies",
}
#: the part of the help specific to a trace verdict's site, where the spec's fix does not say it all
_SITE_FIX = {"ACC005": UNAPPLIED_TAIL}


#: the codes whose finding is on the update's test (the gate to change), not on the update
AT_THE_GATE = frozenset({"ACC005", "ACC006"})


def _gate_of(model: FileModel, node: object, symbols: tuple[str, ...]) -> object:
    """The innermost ``if`` of ``model``'s module that holds ``node`` in its body, or in its
    ``else`` where its test reads one of the accumulation ``symbols`` (an inverted gate; not
    ``if scaler is not None: ... else: opt.step()``): the update's gate; or ``node`` itself."""
    found = node
    for statement in walk(model.module):
        if isinstance(statement, cst.If) and (any(n is node for n in walk(statement.body)) or (
                statement.orelse is not None and any(n is node for n in walk(statement.orelse))
                and any(dotted(n) in symbols for n in walk(statement.test)))):
            found = statement  # walked outermost first: the last one holding it is the innermost
    return found


def _sync_choice(model: FileModel, named: object, backward: object) -> object:
    """Where the code chooses the ``no_sync`` context named at ``named`` that ``backward`` runs
    under: the conditional expression with it in an arm, or the test of the ``if`` that binds it
    in a branch (one that does not also hold the backward); else the ``with`` that enters it, or
    ``named`` itself (also where ``named`` is a write of DDP's sync flag)."""
    def holds(tree: object, node: object) -> bool:
        return any(n is node for n in walk(tree))

    if isinstance(named, cst.Attribute) and named.attr.value == fw.pytorch.DDP_SYNC_FLAG:
        return named  # DDP's flag written off: the write is the choice, whatever guards it
    found = named
    for node in walk(model.module):  # outermost first: the last one found is the innermost
        if isinstance(node, cst.IfExp) and (holds(node.body, named) or holds(node.orelse, named)):
            found = node
        elif isinstance(node, cst.If) and holds(node, named) and not holds(node.test, named) \
                and not holds(node, backward):
            found = node.test
        elif isinstance(node, cst.With) and found is named and any(i.item is named for i in node.items):
            found = node
    return found


def trace_hits(model: FileModel, code: str,
               keep: Callable[[Simulation, TraceVerdict], bool] | None = None) -> Iterator[Hit]:
    """``code``'s verdicts on the simulated runs of ``model``'s entry points (those ``keep``
    keeps), as hits at the call in the file that the user must change, or at its gate (one per
    entry point)."""
    for simulation in model.simulations:
        for verdict in verdicts(simulation):
            if verdict.code == code and verdict.node is not None and (keep is None or keep(simulation, verdict)):
                what = _WORDING[code]
                symbol = f" (A is `{simulation.symbols[0]}`)" if simulation.symbols else \
                    "" if simulation.literal else " (nothing in the code sets A: its runs show the same for every A)"
                node = _gate_of(model, verdict.node, simulation.symbols) if code in AT_THE_GATE else verdict.node
                if verdict.event.no_sync_node is not None:  # ACC402: where the context is chosen
                    node = _sync_choice(model, verdict.event.no_sync_node, verdict.node)
                made_at = verdict.event.fetch.made_at if code == "ACC009" else None
                if made_at is not None and made_at[0] is model.functions:  # ACC009: where the pass is made
                    node = made_at[1]
                yield Hit(node, f"{what}; simulated with {verdict.configuration}{symbol}: "  # type: ignore[arg-type]
                          f"{verdict.why}", _SITE_FIX.get(code, ""), _flow(model, simulation, verdict))


def _flow(model: FileModel, simulation: Simulation, verdict: TraceVerdict) -> tuple[FlowStep, ...]:
    """The way of the failing run to the verdict's event, as a hit's flow: the entry's loop or
    function (where it is this module's; else the run starts at its first call), each call that
    leads on, the event."""
    here, entry, event = model.functions, simulation.entry, verdict.event
    run = f"{entry.description}, simulated with {verdict.configuration}"
    steps: list[FlowStep] = [] if simulation.importer or isinstance(entry.node, cst.Module) \
        else [(None, entry.node, run)]
    for i, (owner, node) in enumerate(event.steps):
        if i < len(event.steps) - 1:
            name = dotted(node.func) if isinstance(node, cst.Call) else None
            what = f"calls `{name}`" if name else "calls a function"
        else:
            what = f"the {event.kind.value}" + (f" of `{event.target}`" if event.target else "")
        if not steps:  # a script's body, an importer's entry: the first call starts the run
            what = f"{run}: {what}"
        steps.append((None if owner is here else owner, node, what))
    return tuple(steps)


def with_traces(check: Callable[[Rule, FileModel], Iterator[Hit]],
                keep: Callable[[FileModel, Simulation, TraceVerdict], bool] | None = None,
                ) -> Callable[[Rule, FileModel], Iterator[Hit]]:
    """A rule's ``check`` that adds the trace verdicts of its code (those ``keep`` keeps) where
    its patterns find nothing in the file that can be reported (a hit on a node of no module the
    file reaches is dropped when the findings are placed)."""
    @functools.wraps(check)
    def checked(rule: Rule, model: FileModel) -> Iterator[Hit]:
        found = False
        for hit in check(rule, model):
            found = found or id(hit.node) in model.local_nodes or model.report_for(hit.node) is not None
            yield hit
        if not found:
            yield from trace_hits(model, rule.code, None if keep is None else functools.partial(keep, model))

    return checked
