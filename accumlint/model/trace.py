"""A simulated run's events: what the code does, microbatch by microbatch, under one
configuration (``shared/docs/semantic-core.md`` section 6).

The same events the runtime guard records (:class:`accumlint.spec.vocabulary.EventKind`), each with
the microbatch it happened in, its epoch, its site and the call chain that reached it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from accumlint.spec.vocabulary import EventKind

if TYPE_CHECKING:
    import libcst as cst

    from accumlint.model.values import Feeds

#: a place in the code: (path, 1-based line)
Place = tuple[str, int]


@dataclass(frozen=True)
class Configuration:
    """One small run to simulate: ``accumulation`` (A) microbatches per optimizer update,
    ``microbatches`` (N) per epoch and replica, ``epochs``, ``replicas`` (D)."""

    accumulation: int
    microbatches: int
    epochs: int = 2
    replicas: int = 1

    def describe(self) -> str:
        """``A=4 N=9 epochs=2 D=1``."""
        return f"A={self.accumulation} N={self.microbatches} epochs={self.epochs} D={self.replicas}"


@dataclass(frozen=True)
class TraceEvent:
    """One event: ``kind``; ``microbatch``, the 0-based index of the microbatch of its epoch
    that was last drawn (``None`` before the first); ``epoch`` (0-based); ``target``, the code's
    name for the object acted on; ``site`` where it happened and ``chain`` the call sites that
    led there, outermost first; ``role`` the target's role in words; ``node`` the syntax node
    of the simulated module where a finding about the event is reported (the event's own call,
    or the call in this module that leads to it); ``steps`` the calls of ``chain`` and the event's
    own node as (module, node), for a finding's flow."""

    kind: EventKind
    microbatch: int | None
    epoch: int
    target: str
    site: Place
    chain: tuple[Place, ...] = ()
    role: str = ""  # the target's role (``Role`` value), "" for none
    node: object = field(default=None, compare=False, repr=False)
    steps: tuple[tuple[object, object], ...] = field(default=(), compare=False, repr=False)
    #: a forward's or backward's gradient sync: False under ``no_sync()``, None where unknown
    synced: bool | None = True
    #: the node of the simulated module where the ``no_sync`` context it runs under is named (None: none, or
    #: named in another module)
    no_sync_node: object = field(default=None, compare=False, repr=False)
    #: a backward's: the item of the training data it learns from (``accumlint.model.interpreter.Fetch``)
    fetch: object = field(default=None, compare=False, repr=False)
    #: for an update, a key of the parameters it applies: the value its optimizer was built over
    #: (``model`` of ``SGD(model.parameters())``), else the optimizer object (one built afresh is
    #: another under the same ``target``); None where the run does not know it
    parameters: object = field(default=None, compare=False, repr=False)
    #: for a forward, the library call that built the object run (a wrapper's constructor and its
    #: arguments, :class:`accumlint.model.values.Construction`); None where the run did not build it
    built: object = field(default=None, compare=False, repr=False)
    #: for a backward, the factor the code put on the loss before it (``loss / A``: 1/A of the run's A;
    #: :attr:`accumlint.model.values.Unknown.factor`); None where unknown
    factor: float | None = field(default=None, compare=False)
    #: for a backward, the forwards its loss was computed from, as (epoch, microbatch) of each forward
    #: event (:attr:`accumlint.model.values.Unknown.feeds`); None where the run does not know them
    feeds: Feeds | None = field(default=None, compare=False, repr=False)


@dataclass
class Trace:
    """The events of one simulated run of an entry point, with the run-level ``choices`` it
    took (condition code → value), the ``notes`` on what it assumed and the ``undecided``
    reasons that make its events incomplete; ``epochs_from_code`` is False where the simulator,
    not a pass of the code over its data, ended an epoch (an entry repeated per epoch for a
    caller it does not show, a count of microbatches): what the code does at such a boundary
    is not what it does at its own epoch's end."""

    configuration: Configuration
    choices: tuple[tuple[str, bool], ...] = ()
    events: list[TraceEvent] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    undecided: list[str] = field(default_factory=list)
    microbatches_drawn: int = 0
    epochs_from_code: bool = True
    reduced_by_hand: bool = False  # the run all-reduces gradients itself
    #: undecided only where it reads the start a checkpoint holds (a resumed run whose start is open):
    #: left out where a fresh run of its configuration stands (``semantic-core.md`` section 2)
    resumed: bool = False
    #: the actions meant once per update (``EventKind.ACTION``, ``target`` what it is), each with the number
    #: of ``events`` recorded before it: apart, so that the events stay the guard's
    actions: list[tuple[int, TraceEvent]] = field(default_factory=list)
    #: the calls of the module a framework gated to the group's last microbatch that acted there before
    #: its backward (:attr:`accumlint.model.interpreter.Interpreter.early_gated`)
    early_gated: list[cst.CSTNode] = field(default_factory=list)
    #: the ``with`` statements that entered a counting context (``accumulate()``) a second time in one
    #: microbatch, of any module the run went through (a caller's run of a checked module's function
    #: runs that module's own tree: :attr:`accumlint.model.interpreter.Interpreter.double_entries`)
    double_entries: list[cst.CSTNode] = field(default_factory=list)
    #: the ``if`` statements the run found to start a training phase of their own, with its own
    #: backwards and updates (:attr:`accumlint.model.interpreter.Interpreter.phase_gates`): no group
    #: boundaries
    phase_gates: list[cst.CSTNode] = field(default_factory=list)
    #: a counter's own counting calls made after more than one microbatch since its last
    #: (``engine.step()`` gated by hand), each as the calls of the simulated module that led there (its
    #: own last where it is one), outermost first, and the counter's label where the run knows it from
    #: use alone, None where it saw it built (:attr:`accumlint.model.interpreter.Interpreter.gated_counts`)
    gated_counts: list[tuple[tuple[cst.CSTNode, ...], str | None]] = field(default_factory=list)

    def groups(self) -> list[list[TraceEvent]]:
        """The events split after each optimizer update: every group but maybe the last ends with
        its update and what follows it up to the next backward (clip, scheduler step, reset)."""
        groups: list[list[TraceEvent]] = [[]]
        closed = False
        for event in self.events:
            if closed and event.kind in (EventKind.BACKWARD, EventKind.FORWARD, EventKind.EPOCH_END):
                groups.append([])
                closed = False
            groups[-1].append(event)
            if event.kind in (EventKind.UPDATE, EventKind.SCALER_STEP):
                closed = True
        return [g for g in groups if g]

    def timeline(self) -> str:
        """The run as the guard prints groups: microbatches separated by ``|``, events after a
        group's update after ``‖``, groups separated by ``;`` (``B | B ‖ step zero ; ...``)."""
        return " ; ".join(_group_line(group) for group in self.groups())

    def loss_factors(self) -> list[str]:
        """The factors the code put on its losses before their backwards, distinct, in the order
        of the first backward of each, in words of the run's A (:func:`factor_in_a`)."""
        a = self.configuration.accumulation
        return list(dict.fromkeys(factor_in_a(e.factor, a) for e in self.events if e.kind is EventKind.BACKWARD))

    def loss_sources(self) -> list[str]:
        """Which forwards the losses of the backwards were computed from (:attr:`TraceEvent.feeds`),
        distinct, in the order of the first backward of each, in words: "its own microbatch",
        "3 microbatches (its own and 2 before)", "no forward the run saw", "unknown"."""
        return list(dict.fromkeys(_sources_in_words(e) for e in self.events if e.kind is EventKind.BACKWARD))

    def optimizers_apart(self) -> bool:
        """Whether the run's optimizers update at different microbatches (several group structures:
        a GAN's discriminator updated every microbatch, its generator every n-th), which only an
        account of which backward reaches which model tells apart (:meth:`accumulates`)."""
        cadences: dict[str, list[tuple[int, int | None]]] = {}
        for event in self.events:
            if event.kind is EventKind.UPDATE:
                cadences.setdefault(event.target, []).append((event.epoch, event.microbatch))
        return len({tuple(c) for c in cadences.values()}) > 1

    def idles(self) -> bool:
        """Whether some microbatch the run counted computes nothing that an update applies: no
        forward and no backward of a loss (an iteration of an environment loop between two
        trained ones)."""
        taken = self._taken()
        computed = {(e.epoch, e.microbatch) for e in self.events
                    if (e.kind is EventKind.BACKWARD or e.kind is EventKind.FORWARD
                        and (taken is None or (e.epoch, e.microbatch) in taken)) and e.microbatch is not None}
        return len(computed) < self.microbatches_drawn

    def _taken(self) -> set[tuple[int, int | None]] | None:
        """The forwards (epoch, microbatch) whose outputs some backward's loss was computed from,
        where the run knows that of every backward (:attr:`TraceEvent.feeds`); None where it does
        not, or no backward ran: then any forward may feed a later loss. A forward outside that set
        computes nothing an update applies (an agent's action chosen by the trained network)."""
        backwards = [e for e in self.events if e.kind is EventKind.BACKWARD]
        if not backwards or any(e.feeds is None for e in backwards):
            return None
        return set().union(*(e.feeds for e in backwards if e.feeds is not None))

    def accumulates(self) -> bool:
        """Whether an optimizer update applies what two microbatches or more computed (their
        backwards, or forwards whose losses one backward takes later, ``sum(losses).backward()``):
        per optimizer, the microbatches since its own previous update, less those whose forwards and
        backwards are code that another optimizer's update always follows in the same microbatch
        (that optimizer's own: a critic stepped on every microbatch, beside a generator stepped with
        its own backward on every n-th one, is a training ratio and no group)."""
        owners = _owners(self.events)
        updates = (EventKind.UPDATE, EventKind.SCALER_STEP)
        pending: dict[str, set[tuple[int, int | None]]] = {
            e.target: set() for e in self.events if e.kind in updates}
        # a forward counts where its microbatch runs no backward (a loss kept for a later one), not
        # beside backwards (a sample plotted after the update), nor where no backward's loss takes it
        backpropagated = {(e.epoch, e.microbatch) for e in self.events if e.kind is EventKind.BACKWARD}
        taken = self._taken()
        for event in self.events:
            if event.kind is EventKind.BACKWARD or event.kind is EventKind.FORWARD \
                    and (event.epoch, event.microbatch) not in backpropagated \
                    and (taken is None or (event.epoch, event.microbatch) in taken):
                owner = owners.get((event.kind, _code_site(event)))
                for key, microbatches in pending.items():
                    if owner is None or owner == key:
                        microbatches.add((event.epoch, event.microbatch))
            elif event.kind in updates:
                key = event.target
                if len(pending[key]) > 1:
                    return True
                pending[key] = set()
        return False

    def updates_at(self) -> list[tuple[int, int | None]]:
        """(epoch, microbatch) of every optimizer update, in order."""
        return [(e.epoch, e.microbatch) for e in self.events if e.kind in (EventKind.UPDATE, EventKind.SCALER_STEP)]


def _sources_in_words(backward: TraceEvent) -> str:
    feeds = backward.feeds
    if feeds is None:
        return "unknown"
    if not feeds:
        return "no forward the run saw"
    own = (backward.epoch, backward.microbatch)
    if feeds == {own}:
        return "its own microbatch"
    count = len(feeds)
    if own in feeds and all((e, m or 0) <= (own[0], own[1] or 0) for e, m in feeds):
        return f"{count} microbatches (its own and {count - 1} before)"
    return f"{count} microbatches"


def factor_in_a(factor: float | None, a: int) -> str:
    """``factor`` (a loss's, :attr:`TraceEvent.factor`) in words of A = ``a``: "1/A", "1/A²", "A",
    "1", "0.5/A", else the number; "unknown" for None. With A = 1 every power of A is 1: the
    number alone."""
    if factor is None:
        return "unknown"
    if a > 1:
        for power, word in ((-2, "1/A²"), (-1, "1/A"), (1, "A")):
            if math.isclose(factor, a ** power):
                return word
        if not math.isclose(factor, 1.0) and math.isclose(round(factor * a, 6), factor * a):
            return f"{factor * a:g}/A"
    return f"{factor:g}"


def _group_line(events: list[TraceEvent]) -> str:
    last_backward = max((i for i, e in enumerate(events) if e.kind is EventKind.BACKWARD), default=None)
    parts: list[list[str]] = [[]]
    after: list[str] = []
    current: tuple[int, int | None] | None = None
    for i, event in enumerate(events):
        word = event.kind.word or event.kind.value
        if last_backward is not None and i > last_backward:
            after.append(word)
            continue
        at = (event.epoch, event.microbatch)
        if current is not None and at != current and parts[-1]:
            parts.append([])
        current = at
        parts[-1].append(word)
    line = " | ".join(" ".join(p) for p in parts if p)
    return f"{line} ‖ {' '.join(after)}" if after else line


def _code_site(event: TraceEvent) -> tuple[object, ...]:
    """Where in the code an event happens: the syntax nodes of the calls that led there and its own
    (by identity: a run made for ``check`` does not place its events on lines), else its place."""
    if event.steps:
        return tuple(id(node) for _, node in event.steps)
    return (id(event.node),) if event.node is not None else (event.site, *event.chain)


def _owners(events: list[TraceEvent]) -> dict[tuple[EventKind, tuple[object, ...]], str]:
    """The forward and backward sites that one optimizer owns: every run of the site is followed, in
    its microbatch, by an update of that optimizer (its key) before any other backward."""
    owners: dict[tuple[EventKind, tuple[object, ...]], str | None] = {}
    for i, event in enumerate(events):
        if event.kind not in (EventKind.BACKWARD, EventKind.FORWARD):
            continue
        follower = None
        for later in events[i + 1:]:
            if (later.epoch, later.microbatch) != (event.epoch, event.microbatch) or (
                    later.kind is EventKind.BACKWARD and event.kind is EventKind.BACKWARD):
                break
            if later.kind in (EventKind.UPDATE, EventKind.SCALER_STEP):
                follower = later.target
                break
        site = (event.kind, _code_site(event))
        known = owners.get(site, follower)
        owners[site] = follower if known == follower else None
    return {site: owner for site, owner in owners.items() if owner is not None}
