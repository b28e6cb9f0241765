"""Entry points, configurations and roles: the simulator's driver
(``shared/docs/semantic-core.md`` sections 1, 2, 4 and 5).

:func:`simulate` finds a module's entry points — loops that reach a backward, and implicit
microbatch bodies (a function with a backward and a conditional update, or a counter kept
across calls, driven once per microbatch by a caller the project does not show) — and runs
each under a few configurations with the :class:`~accumlint.model.interpreter.Interpreter`:
A ∈ {1, 2, 4} bound to the code's own accumulation symbol(s), epochs of N = 2A, 2A + 1 and
N < A microbatches, two epochs, D = 1 and 2. Run-level choices split a configuration into
runs, those that perform an event or build what the code calls taken both ways first; a budget
or an unknown leaves a run undecided with the reason (the runs the entry's shared statement
budget leaves unmade after some completed are left out instead, where each takes the other
branch of choices that perform no training event only); a body whose caller the project shows
is counted with that caller (:func:`_driven`); a resumed run that is undecided only
because it reads where a checkpoint says it starts is left out where a fresh run of its
configuration stands (:func:`_fresh_runs`, the design's resume offset). The raw events of a run
become a :class:`~accumlint.model.trace.Trace` once every receiver's role is settled, from
construction, from the framework tables, from use (what receives ``.backward(loss)`` and
``.step()``) and, the weakest evidence, from its name.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import libcst as cst

from accumlint import frameworks as fw
from accumlint.frameworks.loops import RegisteredLoop
from accumlint.model import conventions, names, owned_loops
from accumlint.model.events import BACKWARD_CALLS, no_update_steps
from accumlint.model.interpreter import (
    EVENT_METHODS,
    GRADIENT_WRITE,
    LEFT_TO_ACC501,
    MAX_ENTRY_STATEMENTS,
    TRAINING_PHASE,
    BudgetExceeded,
    Handed,
    Infeasible,
    Interpreter,
    NeedBinding,
    RawEvent,
    SyntaxFacts,
    forget_syntax,
    gated_update,
    handed_by,
    has_update,
    holds_own_instance,
    is_abstract,
    is_budget,
    label_text,
    reaches_event,
    reaches_function,
    reaches_through,
    walk,
)
from accumlint.model.kinds import Role
from accumlint.model.module_functions import ModuleFunctions, target_names
from accumlint.model.names import children, dotted, exact_kinds
from accumlint.model.positions import node_positions
from accumlint.model.statement_walk import is_microbatch_hook
from accumlint.model.trace import Configuration, Place, Trace, TraceEvent
from accumlint.model.values import Obj, Unknown, is_data
from accumlint.spec.findings import LoopVerdict
from accumlint.spec.vocabulary import EventKind

#: A values the configurations bind the accumulation symbol(s) to
ACCUMULATION_VALUES = (1, 2, 4)
#: importing modules whose entries are simulated to find the callers of a module's entry functions
MAX_IMPORTERS = 8
#: runs (combinations of run-level choices) of a configuration with whole groups (N = 2A, D = 1),
#: the ones the group-structure rules judge; each combination is a configuration of its own
#: (``shared/docs/semantic-core.md`` section 5), so the runs beyond are left out, not guessed
MAX_RUNS = 16
#: runs of every other configuration (a tail, a short epoch, D = 2)
MAX_OTHER_RUNS = 4
#: what ``check`` gives the simulator (:func:`simulate` with ``judged_only``): runs per
#: configuration, statements per entry point and per file. ``check`` runs on every file a
#: commit touches; an entry that needs more is undecided (silent), ``explain`` shows it whole
JUDGED_RUNS = 3
JUDGED_ENTRY_STATEMENTS = 15_000
JUDGED_FILE_STATEMENTS = 30_000
#: runs one configuration may start, the ones the code asserts away included
MAX_ATTEMPTS = 64
#: why ``check`` does not simulate an entry without a gated update (:func:`gated_update`): no run of
#: it can show a group of A
NO_GATED_UPDATE = "nothing in it decides when the optimizer updates"
#: the reason of an entry whose runs reach no backward, as its code (and the project functions it
#: calls) holds none: it trains nothing, so it is no accumulation loop (a generation, a benchmark)
NO_BACKWARD = "no backward is written in it or in what it calls: it trains nothing"
#: the reason of an entry that leaves A open only because its runs never update, as its code holds
#: no optimizer update: its backwards gather into no group (a benchmark, a gradient test)
NO_UPDATE = "no optimizer update is written in it or in what it calls: its backwards form no group"
NO_MICROBATCH = "no run drew a microbatch"
#: the reason of an entry whose runs draw no microbatch and run no forward, with no backward written in
#: it nor in what it calls: at most it applies gradients made elsewhere or written by hand (a helper that
#: steps the optimizer, a test of the optimizer's state), so it is no accumulation loop
NO_TRAINING = ("its runs draw no microbatch and run no forward, and no backward is written in it or in what "
               "it calls: it only applies gradients made elsewhere")
#: the reasons that say an entry is no accumulation loop at all (:func:`accumulation_loops`)
_NO_LOOP = ([NO_GATED_UPDATE], [NO_BACKWARD], [NO_UPDATE], [NO_TRAINING])
#: times an entry point is restarted to bind newly found accumulation symbols
MAX_REBINDS = 3
#: roles whose object runs the accumulation itself and whose reference driver is not simulated; not
#: Fabric: the user's code gates its updates (``frameworks.lightning.FABRIC_CONTRACT``); not Accelerate's
#: accelerator nor DeepSpeed's engine (:mod:`.counting`), unless a run calls one's ``step()`` that its
#: driver does not run (:data:`DRIVEN_ROLES`)
FRAMEWORK_ROLES = frozenset({Role.OPTIM_WRAPPER})
#: roles whose ``step()`` a reference driver runs: one recorded without it (an engine known by its name
#: only) leaves the run undecided
DRIVEN_ROLES = frozenset({Role.ENGINE})
#: roles whose ``step()`` is the optimizer update
_UPDATING = frozenset({Role.OPTIMIZER, Role.ENGINE, Role.OPTIM_WRAPPER, Role.SCALER})
#: the roles whose update applies gradients and runs no backward of its own
_PLAIN_UPDATES = frozenset({Role.OPTIMIZER, Role.SCALER})
#: roles whose ``step()`` neither updates the parameters nor runs a backward (an LR scheduler's sets the
#: learning rate of the updates to come)
_NO_UPDATE_ROLES = frozenset({Role.SCHEDULER})
#: the calls an override that leaves an inherited loop's events alone never reaches (:func:`_computes_only`)
_EVENTFUL = EVENT_METHODS | {"no_sync", "accumulate", "all_reduce", "prepare"}
#: the calls that may update the parameters, whatever their receiver's name
_UPDATE_CALLS = frozenset({"step", fw.mmengine.BACKWARD.method})


@dataclass(frozen=True)
class EntryPoint:
    """Where a simulation starts: ``kind`` is ``"module"`` (the script's body from the top),
    ``"function"`` (a function holding a loop that reaches a backward), ``"body"`` (an
    implicit microbatch body) or ``"driver"`` (a loop-less function atop the module's calls that
    runs such loops); ``node`` the loop (or the def) a user points at; ``caller``: what calls a
    body, in words."""

    kind: str
    name: str
    node: cst.CSTNode
    function: cst.FunctionDef | None = None
    class_def: cst.ClassDef | None = None
    caller: str = "a caller not shown"
    #: a function's parameters that its callers hand an instance of a project class, with the class
    #: (:func:`_handed_by_callers`): the loop reaches its backward only through them
    handed: Handed = frozenset()

    @functools.cached_property
    def code(self) -> cst.CSTNode:
        """The code the entry's runs execute: a driver's or a body's function body (a def's own walk
        stops at the def), else its loop, or the script's statements outside its definitions (what
        its functions and classes hold runs only where the script calls them; one view per entry,
        so that the walks over it that are cached by node find it again)."""
        if self.kind in ("driver", "body") and self.function is not None:
            return self.function.body
        if isinstance(self.node, cst.Module):
            return self.node.with_changes(body=[s for s in self.node.body
                                                if not isinstance(s, (cst.FunctionDef, cst.ClassDef))])
        return self.node

    @property
    def description(self) -> str:
        """The entry in words: ``the script's body``, ``loop in `train```, or the body's name."""
        return {"module": "the script's body", "function": f"loop in `{self.name}`",
                "body": f"`{self.name}`, called once per microbatch by {self.caller}",
                "driver": f"`{self.name}`, which runs the loops it calls"}[self.kind]


@dataclass
class RoleFact:
    """A receiver's role and the evidence for it (``construction``, ``use: …``, ``its name``)."""

    label: str
    role: Role
    evidence: str


#: a role's evidence where the receiver is one by its name alone (``opt``, ``model``)
BY_NAME = "its name"


@dataclass
class Simulation:
    """The simulated runs of one entry point: ``traces`` (one per configuration and
    run-level choice), the ``symbols`` bound to A, a ``literal`` A when the gate's modulus is a
    literal, the ``roles`` settled, and the entry's ``undecided`` reasons."""

    entry: EntryPoint
    line: int
    traces: list[Trace] = field(default_factory=list)
    symbols: tuple[str, ...] = ()
    #: names bound to N, the epoch's length (set equal to the microbatch index beside the cadence)
    lengths: tuple[str, ...] = ()
    literal: int | None = None
    roles: list[RoleFact] = field(default_factory=list)
    undecided: list[str] = field(default_factory=list)
    #: the project functions its runs executed
    reached: frozenset = frozenset()
    #: configurations the code rules out (every run of it ends in an assertion, or a loader sized
    #: with A meets an epoch that A does not divide), with the reason
    impossible: dict[Configuration, str] = field(default_factory=dict)
    #: the entry whose runs decide this one (a later entry of the module, or one of a module that
    #: imports it); None: its own runs do
    caller: Simulation | None = field(default=None, repr=False)
    #: the importing module whose entry this is, where its runs joined this module's simulations for
    #: their verdicts on its code ("": an entry of this module)
    importer: str = ""
    #: an implicit body whose own runs are undecided and that an entry of the project calls, in words
    #: (the runs made of that entry did not reach it): it is no entry of its own, that caller counts it
    driven_by: str = ""
    #: a loop-less script body or driver left undecided whose calls reach only loops that their own
    #: entries decided, named in words (:func:`_loops_apart`): those are its loops, it counts as none
    apart: str = ""
    #: statements its runs executed, rebinds and tail runs included (what its budget is measured in)
    statements: int = 0
    #: where the passes over the data its backwards learn from are made (the loop), else where its
    #: backwards and optimizer updates are, else its own line (absolute paths, 1-based lines): what
    #: tells one loop run by several entry points (three scripts that start one trainer)
    sites: tuple[Place, ...] = ()
    #: what the entry's runs leave to say beside its traces' notes (``explain``: what ``check`` made of it)
    notes: list[str] = field(default_factory=list)
    # each run's raw events and settled roles, until _place turns them into trace events
    _raw: list[tuple[Trace, list[RawEvent], dict[object, RoleFact]]] = field(default_factory=list, repr=False)

    @property
    def decided(self) -> bool:
        """Whether every run completed without an undecided reason."""
        return not self.undecided and all(not t.undecided for t in self.traces)

    @property
    def ungated(self) -> bool:
        """Whether ``check`` left the entry unsimulated because nothing in its code decides when the
        optimizer updates (:data:`NO_GATED_UPDATE`): no value of it is A."""
        return self.undecided == [NO_GATED_UPDATE]

    @property
    def binds_a(self) -> bool:
        """Whether a value of the code decides when the optimizer updates: a symbol bound to A, or
        the gate's literal modulus."""
        return bool(self.symbols or self.literal)

    def trains_without_groups(self) -> bool:
        """Whether the runs decide that optimizers updated at different microbatches each apply
        only what one microbatch computed (:meth:`Trace.accumulates`), with A bound to the code's
        gate and runs of A ≥ 2: what a reading of the code took for a group boundary is a training
        ratio (a generator stepped with its own backward on every n-th batch beside a critic stepped
        on every one), or a gate around a whole training step (reset, backward, update every n-th
        iteration of an environment loop: the iterations between train nothing, :meth:`Trace.idles`).
        One optimizer updated on every microbatch against its gate is a bug of its own (ACC004,
        ACC303), not this."""
        runs = [t for t in self.traces if t.configuration.accumulation > 1]
        return self.decided and self.binds_a and bool(runs) \
            and all((t.optimizers_apart() or t.idles()) and not t.accumulates() for t in runs)

    def gates_phases(self, statement: cst.CSTNode, loop: cst.CSTNode) -> bool:
        """Whether ``statement`` (an ``if`` of ``loop``'s body) is, or lies in, an ``if`` of that body
        that a run found to start a training phase of its own (:attr:`Trace.phase_gates`): what it
        gates in ``loop`` is no group of ``loop``'s microbatches (a loop of its own inside the
        phase is not ``loop``, and keeps its groups)."""
        gates = {id(gate): gate for trace in self.traces for gate in trace.phase_gates}
        inside = {id(n) for n in names.walk(loop)} if gates else set()
        return any(id(gate) in inside and any(statement is n for n in names.walk(gate)) for gate in gates.values())

    def covers(self, node: cst.CSTNode) -> bool:
        """Whether ``node`` is code that the runs executed: in the entry's loop or function, or
        in a project function they reached."""
        return id(node) in self._covered

    @functools.cached_property
    def _covered(self) -> frozenset[int]:
        return frozenset(id(n) for root in (self.entry.node, *self.reached) for n in names.walk(root))

    def reasons(self) -> list[str]:
        """Every undecided reason of the entry and its runs, once each."""
        seen: dict[str, None] = dict.fromkeys(self.undecided)
        for trace in self.traces:
            seen.update(dict.fromkeys(trace.undecided))
        return list(seen)


def entry_points(module: ModuleFunctions, caller: bool = False) -> list[EntryPoint]:
    """The module's entry points in source order, the script body first. ``caller``: the module
    is read as the caller of another module's loop (:func:`_run_by_importers`), so its drivers
    count even where it has no loop of its own."""
    found: list[EntryPoint] = []
    top = [s for s in module._module.body if not isinstance(s, (cst.FunctionDef, cst.ClassDef))]
    loop = next((n for s in top for n in _outer_loops(s) if reaches_event(n.body, module)), None)
    if loop is not None or any(reaches_event(s, module) for s in top):
        found.append(EntryPoint("module", "the script", loop if loop is not None else module._module))
    own: list[EntryPoint] = []
    for (class_def, _), function in list(module.methods.items()):
        own.extend(entry for base in _function_entry(module, function, class_def)
                   for entry in (base, *_overridden(module, base)))
    for function in module.plain_functions():
        own.extend(_function_entry(module, function, None))
    return found + _drivers(module, own, caller) + own


def _drivers(module: ModuleFunctions, entries: list[EntryPoint], caller: bool = False) -> list[EntryPoint]:
    """The module's loop-less functions that no code of the module calls and that run an entry's
    loop (``train()`` that asserts the loader's length, builds a ``Trainer`` and calls its
    ``fit()``): the top of the module's call chain, as the script's body is for a script. Run
    before the entries, they decide the loops they reach with what they know (those entries are
    not run again). Without entries of its own, a module has drivers only as a ``caller`` (its
    loop-less ``train()`` runs the loop of the module that imports it)."""
    if not entries and not caller:
        return []
    functions = _functions_of(module)
    calls = _calls_of(module)
    # a function a `partial(f, ...)` takes is called through it
    named = [n.func for n in calls] + [f for f in map(module.partial_of, calls) if f is not None]
    # (`model.train()` on a model passed in does not call a trainer's own `train`)
    called_methods = {f.attr.value for f in named
                      if isinstance(f, cst.Attribute) and holds_own_instance(f.value, module)}
    called_functions = {f.value for f in named if isinstance(f, cst.Name)}
    taken = {id(e.function) for e in entries}
    found = []
    for class_def, function in functions:
        called = called_methods if class_def is not None else called_functions
        if id(function) in taken or function.name.value in called or _outer_loops(function.body) \
                or not reaches_event(function.body, module):
            continue
        name = f"{class_def.name.value}.{function.name.value}" if class_def is not None else function.name.value
        found.append(EntryPoint("driver", name, function, function, class_def))
    return found


def _function_entry(module: ModuleFunctions, function: cst.FunctionDef,
                    class_def: cst.ClassDef | None) -> list[EntryPoint]:
    name = f"{class_def.name.value}.{function.name.value}" if class_def is not None else function.name.value
    loops = _outer_loops(function.body)
    loop = next((n for n in loops if reaches_event(n.body, module)), None)
    if loop is not None:
        return [EntryPoint("function", name, loop, function, class_def)]
    handed = _handed_by_callers(module, function, class_def) if loops else frozenset()
    loop = next((n for n in loops if reaches_through(n.body, module, handed)), None) if handed else None
    if loop is not None:
        return [EntryPoint("function", name, loop, function, class_def, handed=handed)]
    if module.performs_backward(function) and (_conditional_update(function, module) or _keeps_counter(function)):
        return [EntryPoint("body", name, function, function, class_def, _body_caller(module, function, class_def))]
    return []


def _handed_by_callers(module: ModuleFunctions, function: cst.FunctionDef, class_def: cst.ClassDef | None) -> Handed:
    """The parameters of ``function`` that every call of it the project shows (in ``module`` and
    in the checked modules that import it, read by the class's or the function's name) hands an
    instance of the same project class: an epoch function's ``loss_scaler``, built by the script
    that calls it. Only for a function whose loops call a parameter; the importers read are
    recorded as read by this file (a change to one makes its result stale)."""
    parameters = {p.name.value for p in (*function.params.posonly_params, *function.params.params)}
    called = {(c.func.value if type(c.func) is cst.Attribute else c.func) for loop in _outer_loops(function.body)
              for c in names.walk(loop.body) if type(c) is cst.Call}
    if not any(type(root) is cst.Name and root.value in parameters - {"self", "cls"} for root in called):
        return frozenset()
    calls = handed_by(module, function, module)
    view = module.project
    index = getattr(view, "index", None)
    if index is not None:
        own = class_def.name.value if class_def is not None else function.name.value
        for importer in index.importers(view.path, [own])[:MAX_IMPORTERS]:
            with index.standing_in(view.path, module):
                loaded = index.importer_functions(importer)
                found = handed_by(loaded[0], function, module) if loaded is not None else []
            if found and loaded is not None:
                view.used.update({p: d for p, d in loaded[0].project.used.items() if p != view.path})
                view.used[importer] = loaded[1]
                calls.extend(found)
    return frozenset.intersection(*calls) if calls else frozenset()


def _body_caller(module: ModuleFunctions, function: cst.FunctionDef, class_def: cst.ClassDef | None) -> str:
    """What calls an implicit microbatch body, in words: a framework's loop the code hands it to,
    and what that loop passes, else a caller the project does not show."""
    if is_microbatch_hook(function, class_def):
        return "Lightning's training loop, with the batch's index in the epoch"
    owned = owned_loops.find(module._module, module).get(function)
    if owned is not None and isinstance(owned.row, RegisteredLoop):
        return f"{owned.row.framework}'s engine, with its iteration count"
    if owned is not None and (owned.counters or owned.epoch_counters):
        return f"{owned.row.framework}'s loop as a hook, with its iteration counts"
    return "a caller not shown"


def _overridden(module: ModuleFunctions, entry: EntryPoint) -> list[EntryPoint]:
    """A method's loop run with ``self`` an instance of each subclass of the module that overrides
    a method the loop's function calls on ``self`` (a base trainer's ``fit`` that calls
    ``self.fit_batch``, which a recipe's subclass overrides): the override runs as the base's loop
    drives it, its counters advanced, not alone."""
    base, function = entry.class_def, entry.function
    if entry.kind != "function" or base is None or function is None:
        return []
    called = {n.func.attr.value for n in walk(function.body) if type(n) is cst.Call
              and isinstance(n.func, cst.Attribute) and dotted(n.func.value) == "self"}

    def definition(class_def: cst.ClassDef, name: str) -> cst.FunctionDef | None:
        found = module.method(class_def, name)
        return found[0] if found is not None else None

    subclasses = module.subclasses(base)
    built = _classes_built(module) if subclasses else frozenset()
    return [EntryPoint(entry.kind, f"{subclass.name.value}.{function.name.value}", entry.node, function, subclass)
            for subclass in subclasses
            if subclass.name.value not in built  # (where the module builds it, its own code drives the loop)
            and definition(subclass, function.name.value) is function
            and any(definition(subclass, name) is not definition(base, name) for name in called)]


def _functions_of(module: ModuleFunctions) -> list[tuple[cst.ClassDef | None, cst.FunctionDef]]:
    """The module's methods (with their class) and its other functions."""
    return [*((c, f) for (c, _), f in module.methods.items()),
            *((None, f) for f in module.functions.values() if module.class_of.get(f) is None)]


def _calls_of(module: ModuleFunctions) -> list[cst.Call]:
    """Every call in the module's code: its own statements and each function's body."""
    return [n for root in (module._module, *(f.body for _, f in _functions_of(module))) for n in walk(root)
            if type(n) is cst.Call]  # (the walk stops at each nested definition; exact type: hot)


def _classes_built(module: ModuleFunctions) -> frozenset[str]:
    """The names the module's code calls (``Trainer(...)``): the classes it builds itself."""
    return frozenset(name for node in _calls_of(module) for name in (dotted(node.func),) if name is not None)


#: the code :func:`_outer_loops` does not enter (it runs when called)
_DEFINITIONS = exact_kinds(cst.FunctionDef, cst.ClassDef, cst.Lambda)


def _outer_loops(node: cst.CSTNode) -> list[cst.For | cst.While]:
    """The loops of ``node`` not inside another loop or a nested definition."""
    found: list[cst.For | cst.While] = []
    stack = [node]
    while stack:
        current = stack.pop()
        kind = type(current)  # exact types: isinstance on LibCST's (ABC) node classes is slow
        if kind is cst.For or kind is cst.While:
            found.append(current)
            continue
        if kind in _DEFINITIONS and current is not node:
            continue
        stack.extend(reversed(children(current)))
    return found


def _conditional_update(function: cst.FunctionDef, module: ModuleFunctions) -> bool:
    return any(isinstance(n, cst.If) and has_update(n, module) for n in walk(function.body))


def _keeps_counter(function: cst.FunctionDef) -> bool:
    """Whether the function bumps state that outlives a call (``self.x += 1``, a ``global``)."""
    shared = {n.name.value for s in walk(function.body) if isinstance(s, cst.Global) for n in s.names}
    for node in walk(function.body):
        if isinstance(node, cst.AugAssign):
            target = node.target
            if isinstance(target, cst.Attribute) and dotted(target.value) == "self":
                return True
            if isinstance(target, cst.Name) and target.value in shared:
                return True
    return False


def configurations(accumulation: Iterable[int]) -> list[Configuration]:
    """For each A: epochs of N = 2A (whole groups), 2A + 1 (a tail) and A - 1 (shorter than a
    group), all with D = 1; and one D = 2 run of N = 2A."""
    found: list[Configuration] = []
    for a in accumulation:
        sizes = [2 * a, 2 * a + 1] + ([a - 1] if a > 1 else [])
        found.extend(Configuration(a, n) for n in sizes)
        found.append(Configuration(a, 2 * a, replicas=2))
    return found


def verdict_configurations(accumulation: Iterable[int]) -> list[Configuration]:
    """Only the configuration the group-structure properties judge: whole groups (N = 2A) of
    the largest A given, D = 1 (what ``check`` simulates, with a tail run after it where the
    code's epochs can show one; ``explain`` shows all of :func:`configurations`). The largest,
    not the smallest: a gate that is right for A = 2 by accident (``if i % A:``, ``i % A == 1``)
    is wrong for A = 4."""
    return [Configuration(a, 2 * a) for a in accumulation if a > 1][-1:]


def simulate(module: ModuleFunctions, path: str, entries: list[EntryPoint] | None = None,
             judged_only: bool = False) -> list[Simulation]:
    """Simulate every entry point of ``module`` (its file is ``path``); an entry whose function
    a previous simulation already ran (a ``train()`` the script's body calls) is not run again.
    ``judged_only``: only :func:`verdict_configurations` (cheaper; what ``check`` needs)."""
    try:
        results = _simulate_all(module, path, entry_points(module) if entries is None else entries, judged_only)
        _run_by_importers(results, module, with_callers=judged_only)
        _place(results, module, path, lines=not judged_only)
    finally:
        forget_syntax()
    return results


def _run_by_importers(results: list[Simulation], module: ModuleFunctions, with_callers: bool) -> None:
    """An entry function or method that an entry of another checked module runs (``trainer.fit()``
    in a script that asserts the loader's length first) is decided by that caller's runs, as
    :func:`_called_later` does within a module. Those runs are made with this module's own tree (its
    findings are placed on it: so they are made again for each checked module, from the caller's tree parsed
    once per process) and, ``with_callers``, join this module's simulations; the modules they read are
    recorded as read by this file (a change to the caller makes this file's result stale)."""
    view = module.project
    index = getattr(view, "index", None)
    pending = [r for r in results if r.entry.function is not None and not r.undecided]
    bodies = [r for r in results if _unshown_body(r)]
    if not (pending or bodies) or index is None:
        return
    own_record = view.used
    # what a caller must name: the class or function
    names = {r.entry.name.partition(".")[0] for r in (*pending, *bodies)}
    for importer in index.importers(view.path, sorted(names))[:MAX_IMPORTERS]:
        with index.standing_in(view.path, module):
            loaded = index.importer_functions(importer)
            entries = [] if loaded is None else entry_points(loaded[0], caller=True)
            driven = _driven(bodies, loaded[0], entries, os.path.basename(importer)) if loaded is not None else []
            unseen = [body for body in bodies if not body.driven_by]
            runs = _simulate_all(loaded[0], importer, entries, True) if loaded is not None and (pending or unseen) \
                else []
        for body in unseen:
            # `loss_scaler(loss, opt, update_grad=...)` on an instance the caller hands its loop: the run
            # follows the object where no name in the loop's module names its class
            run = next((run for run in runs if body.entry.function in run.reached), None)
            if run is not None:
                body.driven_by = f"the entry {run.entry.name!r} of {os.path.basename(importer)}"
                body.undecided.append(f"{body.driven_by} runs it: that entry is the loop, this is no entry of its own")
                driven.append(body)
        read, view.used = view.used, own_record  # (a lookup of this module hands it the caller's record)
        callers: dict[int, Simulation] = {}
        for result in pending:
            caller = next((run for run in runs if result.entry.function in run.reached), None)
            if caller is not None:
                callers[id(result)] = caller
                result.caller = caller
                result.undecided.append(f"its caller, the entry {caller.entry.name!r} of "
                                        f"{os.path.basename(importer)}, runs it with what it knows")
        if (callers or driven) and loaded is not None:
            own_record.update({path: digest for path, digest in read.items() if path != view.path})
            own_record[importer] = loaded[1]
            if with_callers:
                for run in {id(run): run for run in callers.values()}.values():
                    run.importer = importer
                    results.append(run)
            pending = [r for r in pending if id(r) not in callers]
        bodies = [r for r in bodies if not r.driven_by]
        if not pending and not bodies:
            return


def _simulate_all(module: ModuleFunctions, path: str, entries: list[EntryPoint],
                  judged_only: bool) -> list[Simulation]:
    reached: set[cst.FunctionDef] = set()
    #: per inherited entry function, the runs made of it: the class, and what its run read on ``self``
    made: dict[cst.FunctionDef, list[tuple[cst.ClassDef | None, frozenset[str]]]] = {}
    abstract: list[Simulation] = []  # runs of a loop as a class that leaves a method it reads abstract
    results = []
    spent = 0
    resets: bool | None = None
    for entry in entries:
        if entry.function is not None and entry.function in reached \
                and module.class_of.get(entry.function) is entry.class_def:  # (a subclass's run is its own)
            continue
        if entry.function in made and _same_run(module, entry, made[entry.function]):
            continue  # a subclass that changes nothing the run of its base's loop read: the same run
        gated = entry.code
        if judged_only and not gated_update(gated, module, 0, entry.handed):
            resets = _resets(module) if resets is None else resets
            if resets:  # without a reset its runs can still show ACC002's updates
                results.append(Simulation(entry, 0, undecided=[NO_GATED_UPDATE]))
                continue
        if judged_only and spent > JUDGED_FILE_STATEMENTS:
            # (an entry that writes no update anywhere it reaches forms no group: no loop to leave open)
            results.append(Simulation(entry, 0, undecided=[
                f"the file's simulation budget for check ({JUDGED_FILE_STATEMENTS} statements) ran out"
                if reaches_through(gated, module, entry.handed, _UPDATE_CALLS) else NO_UPDATE]))
            continue
        try:
            result, functions, used = _simulate_entry(
                module, path, entry, verdict_configurations if judged_only else configurations,
                JUDGED_ENTRY_STATEMENTS if judged_only else MAX_ENTRY_STATEMENTS, JUDGED_RUNS if judged_only else None,
                tails=judged_only)
            spent += used
            result.statements = used
        except RecursionError:
            result, functions = Simulation(entry, 0, undecided=["the code nests too deep to simulate"]), set()
            spent += JUDGED_ENTRY_STATEMENTS
        reached |= functions
        if entry.function is not None:
            read = _self_reads(functions) | {f.name.value for f in functions} | {"__init__"}
            if entry.class_def is not None and _abstract(module, entry.class_def, read):
                abstract.append(result)
            else:
                made.setdefault(entry.function, []).append((entry.class_def, read))
        results.append(result)
    _concrete_runs(results, abstract, module)
    _called_later(results)
    _loops_apart(results, module)
    _driven(results, module, [r.entry for r in results], "")
    return results


def _same_run(module: ModuleFunctions, entry: EntryPoint,
              runs: list[tuple[cst.ClassDef | None, frozenset[str]]]) -> bool:
    """Whether an inherited loop's run as the class of ``entry`` makes the events of a run already
    made of it (``runs``: each as a class, with the methods and ``self`` attributes it read): each name
    read is the same definition in both classes, or two methods that only compute values
    (:func:`_computes_only`: ``KTOTrainer.loss`` and ``DPOTrainer.loss``), or an abstract one
    (:func:`~accumlint.model.interpreter.is_abstract`): a run through it ends there."""
    if entry.class_def is None:
        return False
    for made, read in runs:
        if made is entry.class_def:
            return True
        if made is None:
            continue
        if all(_alike(module, _definition(module, entry.class_def, name), _definition(module, made, name))
               for name in read):
            return True
    return False


def _definition(module: ModuleFunctions, class_def: cst.ClassDef, name: str) -> cst.CSTNode | None:
    """The statement that defines ``name`` for instances of ``class_def`` at class level (a method, a
    class attribute), first in the lineage; None where no class of the project defines it there."""
    for _, current in module.lineage(class_def):
        for statement in current.body.body:
            if isinstance(statement, cst.FunctionDef) and statement.name.value == name \
                    and not _delegates(statement):
                return statement
            if isinstance(statement, cst.SimpleStatementLine) and any(
                    target == name for small in statement.body for target in _assigned(small)):
                return statement
    return None


def _delegates(method: cst.FunctionDef) -> bool:
    """Whether ``method`` only hands its call to the base's (``super().__init__(*args, **kwargs)``)."""
    body = method.body.body
    if len(body) != 1 or not isinstance(body[0], cst.SimpleStatementLine) or len(body[0].body) != 1:
        return False
    small = body[0].body[0]
    call = small.value if type(small) in (cst.Expr, cst.Return) else None
    return (isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute)
            and call.func.attr.value == method.name.value and isinstance(call.func.value, cst.Call)
            and dotted(call.func.value.func) == "super")


def _alike(module: ModuleFunctions, one: cst.CSTNode | None, other: cst.CSTNode | None) -> bool:
    """Whether two definitions of a name leave a run's events alike: the same, or each absent, abstract
    or a method that only computes values (the run of a class that leaves it abstract ends there)."""
    return one is other or all(node is None or isinstance(node, cst.FunctionDef) and (
        is_abstract(node) or _computes_only(node, module)) for node in (one, other))


def _abstract(module: ModuleFunctions, class_def: cst.ClassDef, read: frozenset[str]) -> bool:
    """Whether a name a run as ``class_def`` read is an abstract method there (a ``loss`` that raises
    ``NotImplementedError`` and its subclasses define)."""
    return any(isinstance(node, cst.FunctionDef) and is_abstract(node)
               for node in (_definition(module, class_def, name) for name in read))


def _concrete_runs(results: list[Simulation], abstract: list[Simulation], module: ModuleFunctions) -> None:
    """A run of an inherited loop as a class that leaves a method abstract (``BasicTrainer.train``
    reaching ``raise NotImplementedError`` in ``loss``) is counted with a run of the same loop as a
    subclass that defines it: that is the loop that trains."""
    for result in abstract:
        home = result.entry.class_def
        concrete = next((other for other in results if other not in abstract and other.entry.function
                         is result.entry.function and other.entry.class_def is not None
                         and any(base is home for _, base in module.lineage(other.entry.class_def))), None)
        if concrete is not None:
            result.caller = concrete
            result.undecided.append(f"it leaves a method abstract: the entry {concrete.entry.name!r} runs the loop")


def _self_reads(functions: Iterable[cst.FunctionDef]) -> frozenset[str]:
    """The names ``functions`` read or call on ``self`` (``self.loss(...)``, ``self.use_reference``)."""
    return frozenset(node.attr.value for function in functions for node in walk(function.body)
                     if type(node) is cst.Attribute and type(node.value) is cst.Name and node.value.value == "self")


@functools.lru_cache(maxsize=4096)
def _computes_only(method: cst.FunctionDef, module: ModuleFunctions) -> bool:
    """Whether a ``method`` that overrides another leaves the events of a loop that calls it as they
    were: it is not abstract (an abstract method's run ends there), reaches no event method
    (:data:`EVENT_METHODS`, a gradient sync, an Accelerate context), reads no A-named value and sets
    no attribute of ``self`` (a role, a counter, a flag the loop reads later)."""
    if is_abstract(method) or reaches_event(method.body, module, _EVENTFUL):
        return False
    for node in walk(method.body):
        if type(node) in (cst.AssignTarget, cst.AugAssign, cst.AnnAssign):
            if any((target or "").startswith("self.") for target in target_names(node.target)):
                return False
        elif type(node) in (cst.Name, cst.Attribute) \
                and conventions.ACCUMULATION_NAME.search(names.last_segment(dotted(node))):
            return False
    return True


def _assigned(small: cst.BaseSmallStatement) -> tuple[str | None, ...]:
    """The names a class-level small statement binds (none unless an assignment)."""
    if type(small) is cst.Assign:
        return tuple(name for target in small.targets for name in target_names(target.target))
    return target_names(small.target) if type(small) is cst.AnnAssign else ()


def _driven(bodies: list[Simulation], module: ModuleFunctions, entries: Iterable[EntryPoint],
            where: str) -> list[Simulation]:
    """The undecided implicit microbatch bodies among ``bodies`` whose caller the project shows:
    an entry of ``module`` (``entries``; ``where``: its file's name, "" for the bodies' own module)
    that is no body itself calls one, directly or through project functions (``scaler(loss, opt,
    update_grad=...)`` in a branch its runs did not take). Each is marked (:attr:`Simulation.driven_by`):
    no unknown driver runs it, so it is no accumulation loop of its own; its caller's entry is.
    Returns those marked."""
    marked = []
    for body in filter(_unshown_body, bodies):
        caller = next((e for e in entries if e.kind != "body"
                       and reaches_function(e.code, module, body.entry.function)), None)  # type: ignore[arg-type]
        if caller is not None:
            body.driven_by = f"the entry {caller.name!r}" + (f" of {where}" if where else "")
            body.undecided.append(f"{body.driven_by} calls it, and no run of that entry reached the call: "
                                  "that entry is the loop, this is no entry of its own")
            marked.append(body)
    return marked


def _unshown_body(result: Simulation) -> bool:
    """Whether ``result`` is an undecided implicit body whose caller no run and no code seen so far shows."""
    return result.entry.kind == "body" and result.entry.function is not None and not result.decided \
        and result.caller is None and not result.driven_by


def _resets(module: ModuleFunctions) -> bool:
    """Whether ``module`` spells a gradient reset (``zero_grad()``, ``grad.zero_()``, ``p.grad =
    ...``); where it spells none, ``check`` simulates its entries without a gated update too, for
    what their runs show without A (updates that apply every gradient before them: ACC002)."""
    return any(type(n) is cst.Call and isinstance(n.func, cst.Attribute) and n.func.attr.value in _RESETS
               or type(n) is cst.AssignTarget and isinstance(n.target, cst.Attribute) and n.target.attr.value == "grad"
               for n in names.walk(module._module))


#: the methods that reset gradients (:func:`_resets`)
_RESETS = frozenset({"zero_grad", "zero_"})


def _called_later(results: list[Simulation]) -> None:
    """An entry that a later entry of the module calls (a ``Trainer.fit`` that ``train()`` runs
    after an ``assert`` on the loader's length) is decided by its caller's runs: its own, with
    the caller's facts unknown, hold no verdict."""
    for i, result in enumerate(results):
        function = result.entry.function
        caller = next((later for later in results[i + 1:] if function is not None and function in later.reached
                       and later.entry.function is not function), None)  # (not a subclass's run of the loop)
        if caller is not None:
            result.caller = caller
            result.undecided.append(f"its caller, the entry {caller.entry.name!r}, runs it with what it knows")


def _loops_apart(results: list[Simulation], module: ModuleFunctions) -> None:
    """An entry whose runs are undecided and whose calls reach only training loops that their own
    entries decided: a script's body or a driver that holds no loop of its own (a body whose runs
    spent the budget in the set-up before ``train()``, simulated again as the loop in `train`), or a
    loop whose only open fact is that it gates training phases (an RL driver's episodes, each
    ``learn()`` a loop of its own). Those entries are its loops (or no accumulation loops at all:
    nothing in them decides when the optimizer updates); it is no accumulation loop of its own
    (:attr:`Simulation.apart`)."""
    for result in results:
        entry = result.entry
        if result.decided:
            continue
        loopless = entry.kind in ("module", "driver") and not isinstance(entry.node, (cst.For, cst.While))
        phases = all(TRAINING_PHASE in reason for reason in result.reasons())
        if not (loopless or phases):
            continue
        loops = [other for other in results if other is not result and other.entry.kind == "function"
                 and other.entry.function is not None and other.caller is None
                 and reaches_function(entry.code, module, other.entry.function)]
        # (a loop with no gated update, left unsimulated by `check`, is decided as no accumulation loop)
        if loops and all(other.decided or other.ungated for other in loops):
            result.apart = ", ".join(f"`{other.entry.name}`" for other in loops)
            result.notes.append(
                f"it holds no loop of its own: the loops it calls are decided as entries of their own ({result.apart}),"
                " and counted there" if loopless else
                f"the training phases it starts are loops of their own ({result.apart}), decided and counted there")


def accumulation_loops(results: list[Simulation]) -> list[tuple[str, ...]]:
    """Per accumulation loop among ``results`` (a module's :func:`simulate`), its undecided
    reasons (:meth:`Simulation.reasons`; empty: decided). A loop is an entry of the module whose
    own runs decide it (one that a caller runs is counted with its caller's entry) and that is
    either decided with a run whose optimizer update applies the backwards of two microbatches
    or more (or, A bound, two backwards or more: the chunks of one microbatch), or undecided
    (whether it accumulates is part of what it leaves open). An entry that updates every
    microbatch, or never, is not one: decided without such a run, or left
    unsimulated by ``check`` for want of a gated update (:data:`NO_GATED_UPDATE`), or one that
    trains nothing (:data:`NO_BACKWARD`) or updates nothing (:data:`NO_UPDATE`). A reason the
    simulator leaves to ACC501 (:data:`LEFT_TO_ACC501`: ``accumulate()`` entered twice per
    microbatch) is that rule's verdict on the loop, not a fact left open. Straight-line code, a
    module's body that never draws a microbatch and holds no loop, nor do the functions it ran,
    is none either."""
    return [reasons for _, reasons in _counted_loops(results)]


def loop_verdicts(results: list[Simulation]) -> list[LoopVerdict]:
    """:func:`accumulation_loops` with the :attr:`Simulation.sites` of each: what ``--statistics``
    counts once per loop across the files of a run."""
    return [LoopVerdict(result.sites, reasons) for result, reasons in _counted_loops(results)]


def _counted_loops(results: list[Simulation]) -> Iterator[tuple[Simulation, tuple[str, ...]]]:
    for result in results:
        if result.importer or result.caller is not None or result.driven_by or result.apart \
                or result.undecided in _NO_LOOP:
            continue
        if not result.decided:
            reasons = tuple(r for r in result.reasons() if not r.endswith(LEFT_TO_ACC501))
            if reasons == (NO_MICROBATCH,) and result.entry.kind in ("module", "driver") and not any(
                    type(node) in (cst.For, cst.While) for code in (result.entry.code, *result.reached)
                    for node in names.walk(code)):
                continue  # straight-line code (one backward, one update): no loop draws microbatches
            yield result, reasons
        elif any(trace.accumulates() for trace in result.traces) or result.binds_a and any(
                sum(e.kind is EventKind.BACKWARD for e in group) > 1 for trace in result.traces
                for group in trace.groups()):
            yield result, ()  # (or A counts the chunks of each microbatch, `for c in range(n_chunks)`)


def _with_tail_runs(module: ModuleFunctions, entry: EntryPoint, symbols: set[str], lengths: set[str],
                    traces: list[tuple[Trace, list[RawEvent], dict]], syntax: SyntaxFacts, runs: int | None,
                    result: Simulation) -> tuple[list[tuple[Trace, list[RawEvent], dict]], set]:
    """``traces`` (whole groups) and, where they are decided and the code's own passes end two
    epochs that backpropagate, the runs of an epoch with a tail (N = 2A + 1), with the project
    functions they reached. Tail runs that do not complete are left out with a note: they
    leave the whole-group verdicts as they are."""
    def code_epochs(trace: Trace, raw: list[RawEvent]) -> bool:
        return trace.epochs_from_code and len({e.epoch for e in raw if e.method in BACKWARD_CALLS}) > 1

    if not traces or any(t.undecided for t, _, _ in traces) or not any(code_epochs(t, raw) for t, raw, _ in traces):
        return traces, set()
    a = traces[0][0].configuration.accumulation
    try:
        more, _, reached, impossible = _run_configurations(module, entry, symbols, lengths,
                                                           [Configuration(a, 2 * a + 1)], syntax, runs)
    except _Rebind:
        more, reached, impossible = [], set(), {}
    result.impossible.update(impossible)
    done = [run for run in more if not run[0].undecided and run[0].microbatches_drawn]
    idle = [run for run in more if not run[0].undecided and not run[0].microbatches_drawn]  # (`if cfg.train:`)
    if len(done) + len(idle) < len(more) or idle and not done:
        for trace, _, _ in traces:
            trace.notes.append(f"the runs with a tail (N = {2 * a + 1}) did not complete: the tail is not judged")
        return traces, reached
    return traces + done, reached


class _Rebind(Exception):
    def __init__(self, labels: frozenset[str], lengths: frozenset[str]) -> None:
        super().__init__()
        self.labels = labels
        self.lengths = lengths


def _simulate_entry(module: ModuleFunctions, path: str, entry: EntryPoint,
                    configured: Callable[[Iterable[int]], list[Configuration]], limit: int,
                    runs: int | None, tails: bool = False) -> tuple[Simulation, set, int]:
    """The entry's simulation, the project functions its runs reached and the statements they
    executed (``limit`` per round of configurations; ``runs``: a cap on the runs of each;
    ``tails``: add :func:`_with_tail_runs`)."""
    symbols: set[str] = set()
    lengths: set[str] = set()  # names set equal to the microbatch index next to the cadence: N
    result = Simulation(entry, 0)
    reached: set[cst.FunctionDef] = set()
    syntax = SyntaxFacts(module, limit)
    used = 0
    for _ in range(MAX_REBINDS + 1):
        syntax.statements = 0
        try:
            traces, literal, reached, impossible = _run_configurations(
                module, entry, symbols, lengths, configured(ACCUMULATION_VALUES), syntax, runs)
        except _Rebind as rebind:
            symbols |= rebind.labels
            lengths |= rebind.lengths
            continue
        finally:
            used += syntax.statements
        if not symbols and literal is not None:
            syntax.statements = 0
            traces, _, reached, impossible = _run_configurations(module, entry, symbols, lengths,
                                                                 configured((literal,)), syntax, runs)
            used += syntax.statements
        result.literal = literal if not symbols else None
        result.impossible = impossible
        traces = _training_runs(traces, result)
        if tails and not result.undecided:
            syntax.statements = 0
            try:
                traces, more = _with_tail_runs(module, entry, symbols, lengths, traces, syntax, runs, result)
                reached |= more
            finally:
                used += syntax.statements
        result._raw = traces
        result.traces = [trace for trace, _, _ in traces]
        break
    else:
        result.undecided.append("the accumulation symbol could not be settled")
    result.symbols = tuple(sorted(symbols))
    result.lengths = tuple(sorted(lengths))
    result.reached = frozenset(reached)
    if not result.traces and not result.undecided:
        result.undecided.append("no simulated run can happen: each ends in an assertion or a raise "
                                "that the configurations fail")
    start = entry.code
    # runs that completed (drawing no microbatch is what they did, not where they stopped)
    left = {*result.undecided, *(r for t in result.traces for r in t.undecided)} - {NO_MICROBATCH}
    complete = not left
    if result.traces and not any(e.method in BACKWARD_CALLS for _, raw, _ in result._raw for e in raw):
        updated = any(e.method == "step" and _key(e.receiver) in facts and facts[_key(e.receiver)].role in _UPDATING
                      for _, raw, facts in result._raw for e in raw)
        # (an update without a written backward: a framework's, `engine.train_batch(batch)`, may run it)
        quiet = all(map(is_budget, left)) and not reaches_event(start, module, names=BACKWARD_CALLS)
        if quiet and not updated:
            # runs that completed (or that a budget ended: what they did not reach holds no backward either),
            # and no backward written in it nor in the project functions it calls (a `model.step(x)` of a
            # recurrent generation looked like an update): it trains nothing
            result.undecided = [NO_BACKWARD]
        elif quiet and _without_data(result):
            # it updates, but no run draws data or runs a forward: no framework's update runs a backward
            # on data it is not given (`optimizer.step()` in a helper, after gradients written by hand)
            result.undecided = [NO_TRAINING]
        elif not any(TRAINING_PHASE in reason for reason in left):  # (the phase holds the backwards)
            result.undecided.append("no run reached a backward (the loop's events stay out of the simulation's "
                                    "reach)")
    if (result.undecided or result.traces) and result.undecided not in ([NO_BACKWARD], [NO_TRAINING]) \
            and entry.kind != "body" \
            and not any(e.method == "step" for _, raw, _ in result._raw for e in raw) \
            and not has_update(start, module) \
            and (complete or not reaches_event(start, module, names=_UPDATE_CALLS)):
        # no run updated and no `.step()` is written in it or in what it calls (a benchmark's or a
        # test's backwards), decided or not: nothing gathers into a group (a body's
        # framework updates it unseen); runs cut short (a condition on the data, a budget) may
        # have missed a callee's update deeper down, so there no `step()` may be written anywhere
        # the code reaches (a gradient test of a kernel)
        result.undecided = [NO_UPDATE]
    if not result.binds_a and result.traces:
        # nothing binds A: the configurations' A changes nothing, one A is enough (the smallest with runs:
        # an assertion on the loader's length can rule out the epochs of A = 1)
        smallest = min(t.configuration.accumulation for t in result.traces)
        result.traces = [t for t in result.traces if t.configuration.accumulation == smallest]
    return result, reached, used


def _without_data(result: Simulation) -> bool:
    """Whether no run of ``result`` drew a microbatch or ran a forward, and every update it made was a
    plain optimizer's (or a gradient scaler's): no framework object (a DeepSpeed engine's
    ``train_batch``, an optimizer wrapper) that may run a backward on data the code does not show. An
    LR scheduler's ``step()`` beside them is no update."""
    if NO_MICROBATCH not in result.undecided or any(
            event.kind is EventKind.FORWARD for trace in result.traces for event in trace.events):
        return False
    roles = {facts[_key(e.receiver)].role if _key(e.receiver) in facts else None
             for _, raw, facts in result._raw for e in raw if e.method in _UPDATE_CALLS} - _NO_UPDATE_ROLES
    return bool(roles) and roles <= _PLAIN_UPDATES


def _training_runs(traces: list[tuple[Trace, list[RawEvent], dict]],
                   result: Simulation) -> list[tuple[Trace, list[RawEvent], dict]]:
    """The runs that train: a run that draws no microbatch (an evaluation-only flag, a run
    resumed past its last epoch) is left out with a note; if no run draws one, the entry is
    undecided. So is a run that backpropagates nothing where another run of its configuration
    does (the other side of a training regime, whose backward is in a call the run cannot follow:
    it shows no group to judge)."""
    idle = {id(trace) for trace, _, _ in traces if trace.microbatches_drawn == 0 and not trace.undecided}
    if idle and len(idle) == len(traces):
        result.undecided.append(NO_MICROBATCH)
        return traces
    backpropagates = {id(trace): any(e.method in BACKWARD_CALLS for e in raw) for trace, raw, _ in traces}
    training = {trace.configuration for trace, _, _ in traces if backpropagates[id(trace)]}
    silent = {id(trace) for trace, _, _ in traces if trace.configuration in training and not trace.undecided
              and id(trace) not in idle and not backpropagates[id(trace)]}
    if not idle and not silent:
        return traces
    kept = [run for run in traces if id(run[0]) not in idle | silent]
    notes = ([f"{len(idle)} run(s) draw no microbatch (they do not train) and are left out"] if idle else []) + (
        [f"{len(silent)} run(s) backpropagate nothing where other runs of their configuration do (they show no "
         "group) and are left out"] if silent else [])
    for trace, _, _ in kept:
        trace.notes.extend(notes)
    return kept


def _run_configurations(module: ModuleFunctions, entry: EntryPoint, symbols: set[str], lengths: set[str],
                        configs: list[Configuration], syntax: SyntaxFacts, runs: int | None,
                        ) -> tuple[list[tuple[Trace, list[RawEvent], dict]], int | None, set,
                                   dict[Configuration, str]]:
    traces: list[tuple[Trace, list[RawEvent], dict]] = []
    literal: int | None = None
    reached: set[cst.FunctionDef] = set()
    impossible: dict[Configuration, str] = {}
    for configuration in configs:
        # every run takes a choice it meets first as false (as the condition is written); each choice
        # it defaulted is then run the other way, the latest first (the loop's own choices before the
        # set-up's flags) among those of the same cost: how many choices it takes against their default
        # that shape no event (`Interpreter.shaping`). The cheapest first: the runs a limit allows cover
        # the choices that build what events use (`--amp` building the scaler the loop calls) before
        # the combinations of those that only move the data (`--channels-last`)
        pending: list[tuple[int, dict[str, bool]]] = [(0, {})]
        limit = runs or (MAX_RUNS if configuration.microbatches == 2 * configuration.accumulation
                         and configuration.replicas == 1 else MAX_OTHER_RUNS)
        finished: list[tuple[Trace, list[RawEvent], dict]] = []
        attempts = 0
        ruled_out = ""
        spent = False  # the entry's budget ran out in a run after others of this configuration completed
        eventful: set[str] = set()  # the choices met whose branches hold a training event
        while pending and len(finished) < limit and attempts < MAX_ATTEMPTS:
            cost, choices = pending.pop(min(range(len(pending)), key=lambda i: pending[i][0]))
            attempts += 1
            bindings = dict.fromkeys(symbols, configuration.accumulation)
            run = Interpreter(module, configuration, bindings, choices, syntax, frozenset(lengths))
            feasible, cut = True, False
            try:
                _start(run, entry)
            except NeedBinding as need:
                raise _Rebind(need.labels, need.lengths) from None
            except Infeasible as infeasible:
                feasible = False  # the code asserts this configuration away (a loader length that A divides)
                ruled_out = str(infeasible)
            except BudgetExceeded as budget:
                run.undecide(str(budget))
                cut = syntax.statements > syntax.limit
            finally:
                run.close()
            eventful |= run.eventful
            # the budget all the runs of the entry share, cut in a run after others completed: the runs
            # it leaves unmade within ``limit`` are left out, like those beyond it, where none can take
            # the other branch of a choice that performs a training event
            spent = cut and bool(finished) and not eventful & _unsettled(choices, run.defaulted, finished, limit)
            if spent:
                break
            pending[0:0] = [(cost + (key not in run.shaping),
                             {**choices, **{k: run.choices[k] for k in run.defaulted[:i]}, key: not run.choices[key]})
                            for i, key in reversed(list(enumerate(run.defaulted)))]
            if not feasible:
                continue
            if run.literal_gates:
                literal = run.literal_gates[0]
            reached |= run.reached
            finished.append(_trace(run, configuration, run.choices))
        if (pending or spent) and finished:
            note = f"{len(finished)} combinations of run-level choices run; the others are not simulated" + (
                f" (the statement budget of the entry point ({syntax.limit}) ran out)" if spent else "")
            for trace, _, _ in finished:
                trace.notes.append(note)
        if not finished and ruled_out:
            impossible[configuration] = ruled_out
        traces.extend(_fresh_runs(finished))
    return traces, literal, reached, impossible


def _fresh_runs(runs: list[tuple[Trace, list[RawEvent], dict]]) -> list[tuple[Trace, list[RawEvent], dict]]:
    """``runs`` (one configuration's) without its resumed runs whose start a checkpoint holds
    (:attr:`Trace.resumed`), where another run stands: the resume offset is a configuration of its
    own (``shared/docs/semantic-core.md`` section 2), and one whose start is open decides nothing,
    so the fresh runs decide alone, with a note; where every run is such a one, they stay (undecided)."""
    resumed = [run for run in runs if run[0].resumed]
    if not resumed or len(resumed) == len(runs):
        return runs
    kept = [run for run in runs if not run[0].resumed]
    reasons = "; ".join(dict.fromkeys(reason for trace, _, _ in resumed for reason in trace.undecided))
    note = (f"resumed runs left out: {len(resumed)} run(s) start where a checkpoint says ({reasons}); "
            "the fresh runs decide")
    for trace, _, _ in kept:
        trace.notes.append(note)
    return kept


def _unsettled(choices: dict[str, bool], met: list[str], finished: list[tuple[Trace, list[RawEvent], dict]],
               limit: int) -> set[str]:
    """The choices that the runs after ``finished`` (up to ``limit`` runs) could take the other way
    from the completed runs: the one the run cut (made with ``choices``) took the other way (its
    last), and, where more runs would follow it, those it ``met`` and every choice the completed
    runs did not take both ways (it would have met more of those had it completed)."""
    flipped = {next(reversed(choices))} if choices else set()
    if len(finished) + 1 >= limit:
        return flipped
    taken = [(key, value) for trace, _, _ in finished for key, value in trace.choices]
    return flipped | set(met) | {key for key, _ in taken if (key, True) not in taken or (key, False) not in taken}


def _start(run: Interpreter, entry: EntryPoint) -> None:
    if entry.kind == "module":
        run.run_module()
    elif entry.kind in ("function", "driver"):
        run.run_function(entry.function, entry.class_def, entry.handed)  # type: ignore[arg-type]
    else:
        run.run_body(entry.function, entry.class_def)  # type: ignore[arg-type]


# --- roles and events ---------------------------------------------------------------------------

def _key(receiver: object) -> object:
    if isinstance(receiver, Obj):
        return receiver.number
    if isinstance(receiver, Unknown):
        return receiver.label
    return None


def _parameters(optimizer: object) -> object:
    """A key of the parameters ``optimizer`` updates (:attr:`TraceEvent.parameters`)."""
    over = optimizer.over if isinstance(optimizer, Obj) else None
    if isinstance(over, Obj):
        return over.number
    return ("value", id(over)) if over is not None else _key(optimizer)


def settle_roles(events: list[RawEvent], built: dict[str, str] | None = None) -> dict[object, RoleFact]:
    """Each receiver's role: from construction (an :class:`Obj`'s own role), from use (it
    receives ``.backward(loss)``: an engine or accelerator; ``.step()`` and ``.zero_grad()``:
    an optimizer; ``.unscale_()``: a gradient scaler, and what it steps an optimizer), or from
    its name. ``built``: the labels of receivers the run saw built by a library call of no known
    role, with the call's qualified name (:attr:`Interpreter.library_built`); a name that says
    "DeepSpeed engine" yields to a construction by another library."""
    from accumlint.model.interpreter import _named_role

    methods: dict[object, set[str]] = {}
    samples: dict[object, object] = {}
    with_argument: set[object] = set()
    unpacked: dict[object, bool] = {}  # whether every .step() of the receiver has its result unpacked
    driven: dict[object, Role] = {}  # what a framework's reference driver acted on, as what
    steps_optimizer: set[object] = set()  # receivers of `.step(opt)`, `opt` an optimizer by construction
    for event in events:
        key = _key(event.receiver)
        if key is None:
            continue
        methods.setdefault(key, set()).add(event.method)
        samples.setdefault(key, event.receiver)
        if event.method == "backward" and event.argument is not None:
            with_argument.add(key)
        if event.driven is not None:
            driven.setdefault(key, event.driven)
        if event.method == "step":
            unpacked[key] = unpacked.get(key, True) and id(event.node) in no_update_steps(event.owner._module)
            if isinstance(event.argument, Obj) and event.argument.role is Role.OPTIMIZER:
                steps_optimizer.add(key)
    facts: dict[object, RoleFact] = {}
    for key, used in methods.items():
        receiver = samples[key]
        label = label_text(receiver)
        if isinstance(receiver, Obj) and receiver.role is not Role.UNKNOWN:
            facts[key] = RoleFact(label, receiver.role, receiver.evidence)
        elif driven.get(key) is Role.SCHEDULER:
            facts[key] = RoleFact(label, Role.SCHEDULER, "use: a framework's engine steps it at its boundary")
        elif is_data(receiver) or isinstance(receiver, Unknown) and used == {"backward"} and key not in with_argument:
            facts[key] = RoleFact(label, Role.OTHER, "a value computed from the data (a loss)")
        elif key in steps_optimizer:
            facts[key] = RoleFact(label, Role.SCALER, "use: its .step() is handed an optimizer, which it steps")
        elif key in with_argument and "step" in used and "zero_grad" in used \
                and _named_role(label if isinstance(receiver, Unknown) else None) is Role.OPTIMIZER:
            # an optimizer named so that also backpropagates the loss (apex's `FP16_Optimizer`, a booster's
            # optimizer wrapper): it scales the loss and steps what it wraps; it counts no microbatches
            facts[key] = RoleFact(label, Role.OPTIMIZER, "use: receives .backward(loss), .step() and .zero_grad(), "
                                                         "named an optimizer: a mixed-precision wrapper")
        elif key in with_argument and "step" in used:
            facts[key] = RoleFact(label, Role.ENGINE, "use: receives .backward(loss) and .step()")
        elif {"step", "zero_grad"} <= used:
            facts[key] = RoleFact(label, Role.OPTIMIZER, "use: receives .step() and .zero_grad()")
        elif "unscale_" in used or {"scale", "update"} <= used:
            facts[key] = RoleFact(label, Role.SCALER, "use: receives .unscale_(), or .scale() and .update()")
        elif used == {"step"} and unpacked.get(key):
            facts[key] = RoleFact(label, Role.OTHER, "use: its .step() takes a model's output or gives a result "
                                                     "the code reads (an environment's, a noise scheduler's, a "
                                                     "generation engine's step; an optimizer's is a loss or None)")
        else:
            named = _named_role(label if isinstance(receiver, Unknown) else None)
            made = (built or {}).get(label)
            if named is Role.ENGINE and made is not None and made.split(".")[0] != fw.deepspeed.PACKAGE:
                # construction beats the name: `self.engine = LLM(...)` is a generation engine
                facts[key] = RoleFact(label, Role.OTHER, f"construction: built by `{made}`, no DeepSpeed engine")
            else:
                facts[key] = RoleFact(label, named or Role.UNKNOWN, BY_NAME if named else "none")
    for event in events:  # what a scaler steps or unscales is an optimizer (`scaler.step(opt)`), whatever its name
        fact = facts.get(_key(event.receiver))
        argument = _key(event.argument)
        if (fact is not None and fact.role is Role.SCALER and event.method in ("step", "unscale_")
                and argument in facts
                and (facts[argument].role is Role.UNKNOWN or facts[argument].evidence == BY_NAME)):
            facts[argument] = RoleFact(facts[argument].label, Role.OPTIMIZER, "use: a scaler steps it")
    _steps_beside_the_update(facts, methods, with_argument | {_key(e.argument) for e in events})
    return facts


def _share_steps_beside_the_update(runs: list[tuple[Trace, list[RawEvent], dict[object, RoleFact]]]) -> None:
    """Carry :func:`_steps_beside_the_update`'s verdict to the entry's other runs: one that makes no
    update (an epoch shorter than A) steps the same profiler (matched by its label)."""
    settled = {f.label: f for _, _, facts in runs for f in facts.values() if f.evidence.startswith(_BESIDE)}
    for _, _, facts in runs:
        for key, fact in facts.items():
            if fact.role is Role.UNKNOWN and fact.label in settled:
                facts[key] = settled[fact.label]


_BESIDE = "use: receives .step() alone"


def _steps_beside_the_update(facts: dict[object, RoleFact], methods: dict[object, set[str]],
                             passed: set[object]) -> None:
    """Settle, in place, a receiver of unknown role that receives ``.step()`` and nothing else
    (no reset, no backward, never handed to a scaler or another event) in a run where a known
    optimizer is reset and updated (by its own step or a scaler's): it is no second update of
    the parameters (a profiler's ``prof.step()``, an EMA's ``ema.step(model)``). A second
    optimizer is reset as the first one is; one that never is would not train by groups at all."""
    updater = next((f.label for k, f in facts.items() if f.role in (Role.OPTIMIZER, Role.OPTIM_WRAPPER)
                    and "zero_grad" in methods.get(k, set())), None)
    if updater is None or not any(f.role in _UPDATING and "step" in methods.get(k, set()) for k, f in facts.items()):
        return  # (the update: the optimizer's own step, or a scaler's step of it)
    for key, fact in facts.items():
        if fact.role is Role.UNKNOWN and methods.get(key) == {"step"} and key not in passed:
            facts[key] = RoleFact(fact.label, Role.OTHER,
                                  f"{_BESIDE}, while `{updater}` resets and updates the parameters")


def _event_kind(event: RawEvent, fact: RoleFact | None) -> EventKind | None:
    if event.method == "epoch_end":
        return EventKind.EPOCH_END
    if event.forward:
        return EventKind.FORWARD
    if event.clip:
        return EventKind.CLIP
    role = fact.role if fact is not None else None
    if event.method in BACKWARD_CALLS:
        return EventKind.BACKWARD
    if event.method == "zero_grad":
        return EventKind.RESET
    if event.method == "zero_":  # `p.grad.zero_()`, `p.grad.data.zero_()`: a reset of that gradient
        return EventKind.RESET if label_text(event.receiver).removesuffix(".data").endswith("grad") else None
    if event.method == "step":
        if role in _UPDATING:
            return EventKind.UPDATE
        if role is Role.SCHEDULER:
            return EventKind.SCHEDULER_STEP
        return None
    if role is Role.SCALER:
        return {"update": EventKind.SCALER_UPDATE, "scale": EventKind.SCALE, "unscale_": EventKind.UNSCALE}.get(
            event.method)
    if event.method == "unscale_" and role is Role.ACCELERATOR:
        return EventKind.UNSCALE
    return None


def _trace(run: Interpreter, configuration: Configuration,
           choices: dict[str, bool]) -> tuple[Trace, list[RawEvent], dict[object, RoleFact]]:
    trace = Trace(configuration, tuple(choices.items()), notes=list(run.notes), undecided=list(run.undecided),
                  microbatches_drawn=run.drawn, epochs_from_code=run.epochs_from_code,
                  reduced_by_hand=run.reduced_by_hand,
                  resumed=bool(run.undecided) and set(run.undecided) <= run.resumed_open,
                  early_gated=[node for owner, node in run.early_gated if owner is run.module],
                  double_entries=[node for _, node in run.double_entries],
                  phase_gates=list(run.phase_gates),
                  gated_counts=[(tuple(n for o, n in chain if o is run.module), label)
                                for label, chain in run.gated_counts if any(o is run.module for o, _ in chain)])
    return trace, run.events, settle_roles(run.events, run.library_built)


def _place(results: list[Simulation], module: ModuleFunctions, path: str, lines: bool = True) -> None:
    """Turn every run's raw events into trace events (with their lines, unless ``lines`` is
    false: ``check`` places findings by node and needs none), and settle the roles shown."""
    wanted: dict[int, tuple[ModuleFunctions, set[cst.CSTNode]]] = {id(module): (module, set())}
    for result in results:
        wanted[id(module)][1].add(result.entry.node)
        for _, raw, _ in result._raw:
            for event in raw:
                if event.method == "epoch_end":
                    continue
                for owner, node in ((event.owner, event.node), *event.chain):
                    wanted.setdefault(id(owner), (owner, set()))[1].add(node)
    positions: dict[int, int] = {}
    for owner, nodes in wanted.values() if lines else ():
        try:
            ranges = node_positions(owner._module, nodes)
        except Exception:  # noqa: BLE001 — a node outside the module's tree (synthetic): no line
            ranges = {}
        positions.update({id(n): r.start.line for n, r in ranges.items()})
    for result in results:
        result.line = positions.get(id(result.entry.node), 1)
        shown: dict[str, RoleFact] = {}
        _share_steps_beside_the_update(result._raw)
        for trace, raw, facts in result._raw:
            in_group = False  # a backward ran since the last update
            for event in raw:
                if event.action is not None:
                    trace.actions.append((len(trace.events), TraceEvent(
                        EventKind.ACTION, event.microbatch, event.epoch, event.action,
                        _where(event.owner, event.node, module, path, positions),
                        tuple(_where(o, n, module, path, positions) for o, n in event.chain), "",
                        _local_node(event, module), (*event.chain, (event.owner, event.node)))))
                    continue
                if event.forward and event.grad_off:
                    continue  # an evaluation's forward (`torch.no_grad()`): no graph, no part of a group
                if event.method == GRADIENT_WRITE:
                    if in_group:  # after a backward, before the update: the update may not apply the backwards'
                        trace.undecided.append("the gradients are written by hand while a group accumulates: what "
                                               "the update applies is not the backwards' alone")
                    continue
                fact = facts.get(_key(event.receiver))
                if fact is not None and fact.role in DRIVEN_ROLES and event.method == "step" and event.driven is None:
                    trace.undecided.append(f"`{fact.label}` ({fact.role.value}) decides the group's cadence itself, "
                                           "and the run does not know how it was built")
                    continue
                kind = _event_kind(event, fact)
                in_group = kind is EventKind.BACKWARD or (in_group and kind is not EventKind.UPDATE)
                if kind is None:
                    if event.method == "step" and fact is not None and fact.role is Role.UNKNOWN:
                        trace.undecided.append(f"`{fact.label}.step()`: the role of `{fact.label}` is unknown")
                    continue
                target = fact.label if fact is not None else label_text(event.argument) if event.clip else ""
                optimizer = event.receiver
                if kind is EventKind.UPDATE and fact is not None and fact.role is Role.SCALER:
                    target = label_text(event.argument)  # `scaler.step(optimizer)` updates the optimizer
                    optimizer = event.argument
                site = _where(event.owner, event.node, module, path, positions) if event.method != "epoch_end" \
                    else (path, 0)
                trace.events.append(TraceEvent(
                    kind, event.microbatch, event.epoch, target, site,
                    tuple(_where(o, n, module, path, positions) for o, n in event.chain),
                    fact.role.value if fact is not None else "", _local_node(event, module),
                    (*event.chain, (event.owner, event.node)), event.synced,
                    event.no_sync_at[1] if event.no_sync_at is not None and event.no_sync_at[0] is module else None,
                    event.fetch,
                    _parameters(optimizer) if kind is EventKind.UPDATE else None,
                    event.receiver.built if event.forward and isinstance(event.receiver, Obj) else None,
                    _loss_factor(event) if kind is EventKind.BACKWARD else None,
                    event.feeds if kind is EventKind.BACKWARD else None))
            for fact in facts.values():
                if fact.role is not Role.OTHER:
                    shown.setdefault(fact.label, fact)
            trace.undecided = list(dict.fromkeys(trace.undecided))
        result._raw = []
        result.roles = list(shown.values())
        for fact in result.roles:
            if fact.role in FRAMEWORK_ROLES:
                result.undecided.append(f"`{fact.label}` ({fact.role.value}) decides the group's cadence itself; "
                                        "its reference driver is not simulated yet")
    _loop_sites(results, module, path, positions)


def _loop_sites(results: list[Simulation], module: ModuleFunctions, path: str, lines: dict[int, int]) -> None:
    """Set :attr:`Simulation.sites` of ``results``, their trace events placed (``lines``: the
    positions ``_place`` computed; ``check`` computes none, so those of the backwards and updates
    here, one pass per module)."""
    chosen: list[list[tuple[ModuleFunctions, cst.CSTNode]]] = []
    for result in results:
        # the passes its backwards' data were drawn from (the loop), else where they and the updates are
        events = [event for trace in result.traces for event in trace.events]
        steps = {id(event.fetch.made_at[1]): event.fetch.made_at for event in events
                 if event.kind is EventKind.BACKWARD and getattr(event.fetch, "made_at", None) is not None} or \
            {id(node): (owner, node) for event in events if event.kind in (EventKind.BACKWARD, EventKind.UPDATE)
             for owner, node in event.steps[-1:]}
        chosen.append(list(steps.values()) or [(module, result.entry.node)])
    by_owner: dict[int, tuple[ModuleFunctions, list[cst.CSTNode]]] = {}
    for owner, node in (step for steps in chosen for step in steps):
        if id(node) not in lines:
            by_owner.setdefault(id(owner), (owner, []))[1].append(node)
    for owner, nodes in by_owner.values():
        try:
            lines.update({id(n): r.start.line for n, r in node_positions(owner._module, nodes).items()})
        except Exception:  # noqa: BLE001 — a node outside the module's tree (synthetic): no line
            pass
    own = path or getattr(module.project, "path", "")  # (``check`` simulates its module as "")
    for result, steps in zip(results, chosen, strict=True):
        places = {_where(owner, node, module, own, lines) for owner, node in steps}
        # (a file the run cannot name: no site, counted on its own)
        result.sites = tuple(sorted((os.path.abspath(file), line) for file, line in places)) \
            if all(file for file, _ in places) else ()


def _loss_factor(event: RawEvent) -> float | None:
    """The factor on the loss of a backward: ``loss.backward()``'s receiver, or the loss handed to
    an engine's or accelerator's ``backward(loss)``; None where the run does not know it."""
    loss = event.receiver if is_data(event.receiver) else event.argument
    return loss.factor if isinstance(loss, Unknown) and is_data(loss) else None


def _local_node(event: RawEvent, module: ModuleFunctions) -> cst.CSTNode | None:
    """The node of ``module`` that stands for ``event``: its call, or the last call of the chain
    made in ``module`` (a helper in another file that resets is reported where it is called)."""
    if event.method == "epoch_end":
        return None
    if event.owner is module:
        return event.node
    return next((node for owner, node in reversed(event.chain) if owner is module), None)


def _where(owner: ModuleFunctions, node: cst.CSTNode, module: ModuleFunctions, path: str,
           lines: dict[int, int]) -> Place:
    file = path if owner is module else getattr(owner.project, "path", owner.name) or owner.name
    if owner is not module and not os.path.isabs(path) and os.path.isabs(file):
        file = os.path.relpath(file)  # as the checked file was named: relative to the working folder
    return (file, lines.get(id(node), 0))
