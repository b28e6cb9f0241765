"""The abstract interpreter: runs a training loop's code over one configuration and records
its training events (``shared/docs/semantic-core.md`` section 3).

It executes the Python subset training loops are written in: assignments, arithmetic,
comparisons, ``if``/``for``/``while``/``break``/``continue``/``return``, ``try``, ``with``,
calls of the project's functions, methods and classes (inlined, arguments bound), iterators
over data. What the configuration decides is concrete: A where the code's accumulation symbol
is bound to it, the epoch's microbatches, the epochs. Anything else is an
:class:`~accumlint.model.values.Unknown` that remembers its source, and a condition on one is
judged by how it varies (:meth:`Interpreter.decide`):

- a **run-level** unknown (``args.fp16``) is a choice fixed for the whole run: a run without a
  value for it takes ``False`` and lists the condition in ``defaulted``, and the caller runs the
  other value as a run of its own;
- a **periodic** condition (a counter against an unknown, ``step % args.accum == 0``) that gates
  an optimizer update names the accumulation symbol: the run stops with :class:`NeedBinding`
  and the caller binds it to A; one that gates nothing of the group takes its quiet branch;
- per-microbatch **data** takes the main path (the branch that does not leave the iteration);
- a value computed by a caller the project does not show leaves the events it gates undecided.

Library calls other than the data iterators and the objects whose roles the framework tables
give return unknowns and perform nothing. Budgets bound statements, call depth and loop
iterations: a run cut by one ends with an undecided reason, never a hang.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace

import libcst as cst

from accumlint import frameworks as fw
from accumlint.frameworks import stdlib
from accumlint.frameworks.contracts import CountingDriver
from accumlint.model import conventions, owned_loops
from accumlint.model.actions import (
    EVALUATION,
    EVALUATION_NAMES,
    NO_GRAD,
    TRACKER_LIBRARIES,
    action_of,
    decorated_without_grad,
    evaluates,
)
from accumlint.model.callgraph import can_bind
from accumlint.model.counting import BUILDERS, DRIVERS, Counting, carrier_attrs
from accumlint.model.events import (
    BACKWARD_CALLS,
    CLIP_CALLS,
    clips_by_hand,
    no_update_steps,
    steps_with_argument,
    tests_one_parameter,
)
from accumlint.model.kinds import Role
from accumlint.model.module_functions import ModuleFunctions
from accumlint.model.names import ImportMap, children, dotted, exact_kinds, holds_statements, int_value, last_segment
from accumlint.model.names import walk as every_node
from accumlint.model.roles import constructor_role, parameter_owners
from accumlint.model.statement_walk import is_microbatch_hook
from accumlint.model.sync import MANUAL_REDUCTIONS
from accumlint.model.trace import Configuration
from accumlint.model.values import (
    BoundMethod,
    Construction,
    Derived,
    Feeds,
    Function,
    LabeledInt,
    Literal,
    LiteralFloat,
    Multiple,
    Obj,
    Origin,
    ProjectClass,
    Unknown,
    combined,
    fed_by,
    is_data,
    is_restored,
    scaled,
    varies,
)
from accumlint.spec.vocabulary import LOSS_HELPER_NAME

#: statements one run may execute
MAX_STATEMENTS = 60_000
#: statements all the runs of one entry point may execute together
MAX_ENTRY_STATEMENTS = 150_000
#: nested inlined calls
MAX_DEPTH = 12
#: iterations of one loop over concrete values
MAX_ITERATIONS = 2_000
#: concrete values a loop that performs no training event is stepped through (passes, for a `while` with a
#: way out); one over more is summarised (its effect on the names it writes, not its iterations: set-up
#: that counts, parses or times things)
MAX_STEPPED = 16
#: roles whose event methods (``step``, ``zero_grad``, ``update``) on a receiver named for them are the
#: library's: the optimizer's update, the scheduler's and the scaler's steps
_LIBRARY_EVENT_ROLES = frozenset({Role.OPTIMIZER, Role.SCHEDULER, Role.SCALER})
#: the keyword under which an entry's unseen caller passes the extra keywords of a ``**kwargs``
_UNSEEN_KEYWORDS = "**"
#: names a gate's condition is followed through to what assigns them (see ``Interpreter._literal_gate``)
_FLAG_NAMES = 8

#: method names that make events, whatever the receiver (its role is settled after the run)
EVENT_METHODS = frozenset({"zero_grad", "step", "update", "scale", "unscale_", "zero_"}) | BACKWARD_CALLS | CLIP_CALLS
#: functions (last segment) that clip gradients
CLIP_FUNCTIONS = CLIP_CALLS
#: wrappers whose iteration is their argument's (``tqdm(loader)``)
TRANSPARENT_ITERABLES = frozenset({"tqdm", "trange", "iter", "list", "tuple", "track"}) | \
    fw.fastprogress.ITERATION_WRAPPERS | fw.torchvision.ITERATION_WRAPPERS
#: roles that run a forward when called
FORWARD_ROLES = frozenset({Role.MODEL, Role.DDP_MODEL, Role.FSDP_MODEL, Role.ENGINE})
#: the end of an undecided reason the simulator leaves to ACC501 (its check reads the runs for it)
LEFT_TO_ACC501 = "(ACC501 reports it)"
#: the raw event of gradients written by hand (``p.grad = buf``): no trace event of its own, but
#: between a backward and the update it leaves the run undecided (see simulation._place)
GRADIENT_WRITE = "grad_write"
#: the recorded methods that surely clear the gradients (``p.grad = None`` is recorded as ``zero_grad``;
#: a ``zero_()`` may be any tensor's)
_RESET_METHODS = frozenset({"zero_grad"})
#: transparent context managers (every other one is transparent too; these are known to do nothing to a group)
_BUILTIN_NAMES = frozenset({"print", "isinstance", "hasattr", "getattr", "setattr", "sorted", "sum", "any", "all",
                            "str", "repr", "round", "type", "super", "dict", "set", "open", "map", "filter"})


#: the compound statements and the method that runs each
_COMPOUND = {cst.If: "_if", cst.For: "_for", cst.While: "_while", cst.With: "_with", cst.Try: "_try"}


class NeedBinding(Exception):
    """A periodic condition gates the optimizer update on ``labels``: the accumulation symbol(s);
    or, next to that cadence, sets the microbatch index equal to ``lengths``: the epoch's length
    (``(i + 1) % accum == 0 or i + 1 == self.n``)."""

    def __init__(self, labels: frozenset[str], lengths: frozenset[str] = frozenset()) -> None:
        super().__init__(", ".join(sorted(labels | lengths)))
        self.labels = labels
        self.lengths = lengths


#: the passes a run takes through a loop that collects until the data says it ends (an episode)
_EPISODE_PASSES = 2

#: what an undecided reason says of a gate whose branch trains on data of its own
TRAINING_PHASE = "starts a training phase of its own"


class EndOfRun(Exception):
    """The run drew every microbatch of its epochs (or ended in an uncaught exception)."""


class Infeasible(Exception):
    """The code asserts something the configuration contradicts (``assert len(loader) % A == 0``
    with a tail): the run cannot happen; ``args[0]`` is the assertion."""


class BudgetExceeded(Exception):
    """A budget (statements, iterations) cut the run: ``args[0]`` says which."""


def is_budget(reason: str) -> bool:
    """Whether an undecided ``reason`` is one of :class:`BudgetExceeded`'s: the run's reach ended it,
    not something the code leaves open."""
    return reason.startswith("the statement budget of ") or reason.endswith(f" ran past {MAX_ITERATIONS} iterations")


class _Break(Exception):
    pass


class _Continue(Exception):
    pass


@dataclass
class _Return(Exception):
    value: object


@dataclass
class _Raised(Exception):
    """A simulated ``raise`` (or a loader's end, ``StopIteration``): ``name`` of the exception class."""

    name: str


@dataclass
class RawEvent:
    """A call that may be a training event, before roles are settled: ``method`` on
    ``receiver`` (an :class:`Obj`, an :class:`Unknown` or None for a function), ``argument`` the
    first argument's value, at ``node`` of ``owner`` reached through ``chain``."""

    method: str
    receiver: object
    argument: object
    node: cst.CSTNode
    owner: ModuleFunctions
    chain: tuple[tuple[ModuleFunctions, cst.CSTNode], ...]
    microbatch: int | None
    epoch: int
    forward: bool = False
    clip: bool = False
    #: whether gradients sync across replicas for this forward or backward: False under a
    #: ``no_sync()`` context, None where a context's switch is unknown
    synced: bool | None = True
    #: where the innermost ``no_sync`` context held was named (its module and node), None for none
    no_sync_at: tuple[ModuleFunctions, cst.CSTNode] | None = None
    #: a backward's: the data item last drawn (:class:`Fetch`), None where no pass drew one
    fetch: Fetch | None = None
    #: an action meant once per update (:mod:`accumlint.model.actions`): what it is, in words
    action: str | None = None
    #: the role a framework's reference driver acted on the receiver as (the engine's own update and reset,
    #: the step of the scheduler it holds), None for a call of the code
    driven: Role | None = None
    #: made while gradients are off (under ``no_grad``/``inference_mode``): a forward that builds no graph
    grad_off: bool = False
    #: a backward's: the forwards its loss was computed from (:attr:`Unknown.feeds`), None where unknown
    feeds: Feeds | None = None


@dataclass(frozen=True)
class Fetch:
    """Which item of which pass over which data a draw took: ``source`` names the data iterated
    (a loader's object number, or the label of one built out of sight), ``serial`` the pass over
    it (each ``iter()``, ``for`` or ``islice`` over the data makes a new one, which starts again at
    the data's first item), ``position`` the item's 0-based index in that pass; ``made_at`` is
    where the pass was made (its module and node)."""

    source: object
    serial: int
    position: int
    made_at: tuple[ModuleFunctions, cst.CSTNode] | None = field(default=None, compare=False)


class _Entry:
    """The context a counting object's entry method returns (``accelerator.accumulate(model)``):
    entering it counts one microbatch."""

    __slots__ = ("counting",)

    def __init__(self, counting: Counting) -> None:
        self.counting = counting


#: the entry methods and boundary flags (attributes) of the frameworks that count microbatches themselves
_COUNTED_ENTRIES = frozenset(driver.enter for driver in DRIVERS.values() if driver.enter is not None)
_COUNTED_FLAGS = frozenset(driver.flag for driver in DRIVERS.values() if not driver.flag_call)
#: the drivers whose counter counts at a call of its own method (``engine.step()``), known from use where
#: the run did not see it built: the receiver of a backward with an argument that it then calls so
_STEPPING = tuple(driver for driver in DRIVERS.values() if driver.counts is not None)


class _SyncOff:
    """The context a ``no_sync()`` call returns (DDP's, Accelerate's, Fabric's
    ``no_backward_sync``): while a ``with`` holds it, backwards skip the all-reduce; ``known``
    is False where its ``enabled=`` switch is a value the run does not know; ``at`` the module
    and node where the code names it (where a finding about the choice of context points), None
    for a framework's own."""

    __slots__ = ("at", "known")

    def __init__(self, known: bool, at: tuple[ModuleFunctions, cst.CSTNode] | None = None) -> None:
        self.known = known
        self.at = at


def _construction(label: str, args: list[object], kwargs: dict[str, object], node: cst.Call) -> Construction:
    """The library call ``node`` (its callee ``label``) with its arguments' values in the run."""
    return Construction(label, tuple(args), dict(kwargs), any(arg.star for arg in node.args))


def _no_sync(kwargs: dict[str, object], at: tuple[ModuleFunctions, cst.CSTNode]) -> _SyncOff | None:
    """The context of a ``no_sync()`` call with ``kwargs``, named at ``at``: none where its
    ``enabled=`` switch (Fabric's ``no_backward_sync(module, enabled=...)``) is off."""
    enabled = kwargs.get("enabled", True)
    if isinstance(enabled, Unknown):
        return _SyncOff(False, at)
    return _SyncOff(True, at) if _truth(enabled) else None


class _Frame:
    __slots__ = ("class_def", "function", "names", "owner", "shared")

    def __init__(self, owner: ModuleFunctions, names: dict[str, object],
                 function: cst.FunctionDef | cst.Lambda | None = None, class_def: cst.ClassDef | None = None) -> None:
        self.owner = owner
        self.names = names
        self.function = function
        self.class_def = class_def
        self.shared: set[str] = set()  # names declared `global`


class _Loader:
    """One pass over the data: yields the epoch's microbatches, then ``StopIteration``."""

    def __init__(self, interpreter: Interpreter, label: str) -> None:
        self.interpreter = interpreter
        self.label = label
        self.started = False
        self.done = False
        self.secondary = False  # first drawn while another pass was drawing the epoch's microbatches
        #: a loop that reaches no backward iterates it (an evaluation or a sampling loop): as a secondary
        #: pass, its length unknown, it ends after an epoch's count of items instead of at a budget
        self.untrained = False
        # an iterator made where the run cannot see, whose epochs the code counts (`range(iters_per_epoch)`
        # around `next(it)`): it goes on into the next epoch instead of ending
        self.stream = False
        self.wrapped_by: Counting | None = None  # a framework that counts microbatches wrapped its data
        self.maker: cst.CSTNode | None = None  # the `iter(data)` call that made it, where one did
        self.source: object = None  # the data it passes over (:class:`Fetch`), None where unnamed
        self.serial = 0
        self.position = 0  # items drawn so far
        self.made_at: tuple[ModuleFunctions, cst.CSTNode] | None = None
        #: the run's events when it became the training pass outside every loop (a look at one batch,
        #: ``next(iter(loader))``, before the loop that trains); None: drawn in a loop
        self.peeked_at: int | None = None
        self.started_at = 0  # the run's events when its first item was drawn

    def _peek(self) -> bool:
        """Whether this training pass is still only a look at the data before training: it started
        outside every loop and no backward ran since."""
        run = self.interpreter
        return self.peeked_at is not None and not any(
            e.method in BACKWARD_CALLS for e in itertools.islice(run.events, self.peeked_at, None))

    def _fetched(self, same_data: bool) -> None:
        """Count the item drawn; the run's latest fetch is it where ``same_data`` (the training pass,
        or a new pass over the training pass's data: a restart of the loader)."""
        if same_data:  # (a pass over data the run cannot name: its items' source is unknown)
            self.interpreter.fetched = Fetch(self.source, self.serial, self.position, self.made_at)
        self.position += 1

    def draw(self) -> object:
        run = self.interpreter
        if self.done:
            raise _Raised("StopIteration")
        if not self.started:
            self.started = True
            self.started_at = len(run.events)
            training = run.training_pass
            running = training is not None and not training.done and training is not self
            # the `iter(loader)` that made the training pass makes a new one after that pass drew the
            # whole epoch (counted out with `range(len(loader))`, never asked past its end): the next
            # epoch (a pass made elsewhere, a sample batch, stays another loader)
            renewed = running and training.maker is not None and training.maker is self.maker \
                and run.drawn_in_epoch >= run.configuration.microbatches
            # `batch = next(iter(loader))` in a function called once per microbatch: each call's pass is
            # left after its first item, and the next call's pass gives the epoch's next microbatch
            anew = running and not renewed and training.maker is not None and training.maker is self.maker \
                and training.position == 1 and self not in run._fresh
            if anew:
                training.done = True
                run.training_pass = self
                if training._peek():  # (the call before the loop looked at one batch: the epoch starts here)
                    run.epoch -= 1
                    run.start_epoch()
            elif running and not renewed and self in run._fresh and training._peek():
                # `first = next(iter(loader))` before `for batch in loader:`: the loop trains, the look
                # before it drew no microbatch of the epoch (else the loop is a second pass that only the
                # budget ends)
                training.done = True
                run.training_pass = self
                run.epoch -= 1
                run.start_epoch()
            elif running and not renewed:
                # an evaluation loader, or a second loader zipped with the first: its items are
                # not the epoch's microbatches (the training pass ends the zip, a budget the rest)
                self.secondary = True
            elif renewed:
                training.done = True
                run.training_pass = self
                run.end_epoch()
                run.start_epoch()
            else:
                run.training_pass = self
                run.start_epoch()
                if not run._iteration_starts and run.epochs_from_code:  # (not in a body a driver calls per microbatch)
                    self.peeked_at = len(run.events)
        if self.secondary:
            if self.untrained and self.position >= run.configuration.microbatches:
                self.done = True
                raise _Raised("StopIteration")
            if not self.untrained and self.position >= run.configuration.microbatches:
                run.restart_if_items_train(self)
            training = run.training_pass
            self._fetched(training is not None and self.source is not None and training.source == self.source)
            return Unknown(self.label, Origin.DATA, feeds=frozenset())
        if run.drawn_in_epoch >= run.configuration.microbatches:
            run.end_epoch()
            if not self.stream:
                self.done = True
                raise _Raised("StopIteration")
            run.start_epoch()  # (after the last epoch: the end of the run)
        run.drawn_in_epoch += 1
        run.drawn += 1
        run.loaded += 1
        self._fetched(True)
        return Unknown(self.label, Origin.DATA, feeds=frozenset())


class Interpreter:
    """One run of one entry point under ``configuration``: ``bindings`` (label → A) name the
    accumulation symbol(s), ``choices`` (condition code → value) the run-level choices given;
    one the run meets without a value takes ``False`` and is listed in ``defaulted``, in the
    order met. After :meth:`run_function` or :meth:`run_module`, ``events`` holds the raw events, ``notes``
    what the run assumed, ``undecided`` what leaves it incomplete."""

    def __init__(self, module: ModuleFunctions, configuration: Configuration,
                 bindings: dict[str, int], choices: dict[str, bool], syntax: SyntaxFacts | None = None,
                 lengths: frozenset[str] = frozenset()) -> None:
        self.module = module
        self.syntax = syntax or SyntaxFacts(module)
        self.configuration = configuration
        self.bindings = bindings
        self.lengths = lengths
        self.choices = dict(choices)
        self.defaulted: list[str] = []
        self.eventful: set[str] = set()  # the defaulted choices whose branches hold a training event
        self.shaping: set[str] = set()  # the defaulted choices whose branches shape events (see `_shapes`)
        self.events: list[RawEvent] = []
        self.notes: list[str] = []
        #: a framework-gated reset let through before the backward of a group's last microbatch inside
        #: its counting context (``zero_grad()`` first in ``accumulate()``): where, as (module, call)
        self.early_gated: list[tuple[ModuleFunctions, cst.Call]] = []
        #: the ``with`` statements that entered a counting context already entered in the same microbatch
        #: (two ``accumulate()`` blocks one after the other): where, as (module, statement)
        self.double_entries: list[tuple[ModuleFunctions, cst.With]] = []
        #: the conditions found to start a training phase of their own (:data:`TRAINING_PHASE`): each
        #: an ``if`` statement whose period is no group's A
        self.phase_gates: list[cst.CSTNode] = []
        #: the counting calls of a counter (``engine.step()``) made after more than one microbatch since
        #: the last (ACC502's gate by hand): each as the counter's label where the run knows it from use
        #: alone (None: it saw it built) and the calls that led there and its own, as (module, call),
        #: outermost first
        self.gated_counts: list[tuple[str | None, tuple[tuple[ModuleFunctions, cst.CSTNode], ...]]] = []
        self.undecided: list[str] = []
        #: the reasons in ``undecided`` that a checkpoint's start alone opened (a resumed run's)
        self.resumed_open: set[str] = set()
        self.literal_gates: list[int] = []
        self.reached: set[cst.FunctionDef] = set()  # project functions the run executed
        self.drawn = 0
        self.loaded = 0  # microbatches drawn from a loader or an iterator (not counted by passes)
        #: the items `next(it, None)` drew (by id; the value kept alive): None only at the pass's end
        self._items: dict[int, object] = {}
        self.training_pass: _Loader | None = None  # the pass drawing the epoch's microbatches
        self.fetched: Fetch | None = None  # the item of the training data last drawn
        #: what the run appended to a list while it drew microbatches (by id; the value kept alive):
        #: the microbatch (epoch, index) and the fetch last drawn then
        self._drawn_as: dict[int, tuple[object, int, int | None, Fetch | None]] = {}
        #: the microbatch the loop now iterating such items works on (:meth:`_replay`), None for none
        self._replayed: tuple[int, int | None, Fetch | None] | None = None
        self._serials = itertools.count(1)  # of the passes made
        self.drawn_in_epoch = 0
        self.epoch = -1
        self.epochs_from_code = True  # False where the run, not a pass of the code, ends an epoch
        self.statements = 0
        self.data_conditions = 0  # conditions on the microbatch's data decided so far
        self._grad_off = 0  # `no_grad` contexts and decorated functions being run
        self._stack: list[tuple[ModuleFunctions, cst.CSTNode]] = []
        self._acting: set[int] = set()  # the call nodes recorded as an action (:meth:`_action`)
        self._yields: list[int] = []  # the bare yields counted by each generator run for its count
        self._as_code: object = None  # the generator :meth:`_yielded` runs as code
        self._active: list[cst.FunctionDef | cst.Lambda] = []
        self._globals: dict[int, dict[str, object]] = {}
        #: (module, imported name) → the project function it names, looked up where data is handed to it
        self._data_helpers: dict[tuple[int, str], Function | None] = {}
        self._relays: dict[tuple[int, str], Function | ProjectClass | None] = {}
        self._loop_iterations: dict[int, int] = {}
        self._passes: dict[str, _Loader] = {}  # `next(it)` on an iterator built out of sight
        self._slices: dict[str, _Loader] = {}  # the pass the slices of a list of the epoch's microbatches draw
        self._whole_groups: set[int] = set()  # loaders whose length is built from A (their Obj numbers)
        self._stored: dict[str, object] = {}  # attributes assigned on objects built out of sight
        self._set_by_hand: set[int] = set()  # the countings (ids) whose boundary the code sets by hand
        #: id → (a namespace of parsed command-line options, the whole-number defaults of its options)
        self._options: dict[int, tuple[Unknown, dict[str, int]]] = {}
        self._iteration_starts: list[int] = []  # events recorded when each enclosing loop's iteration began
        self._iteration_depths: list[int] = []  # the call depth (``len(_stack)``) of each enclosing loop
        self._iteration_loops: list[cst.CSTNode] = []  # each enclosing loop (a comprehension's `for` too)
        self._partial = 0  # inside a branch taken for some of a model's parameters only (:meth:`_per_parameter`)
        self._fresh: list[_Loader] = []  # passes a `for` statement's own iterable made (they end with it)
        self._sync_off: list[_SyncOff] = []  # the no-sync contexts the `with` statements being run hold
        #: where each no-sync method referenced without a call was last named (its label's key)
        self._no_sync_named: dict[str, tuple[ModuleFunctions, cst.CSTNode]] = {}
        #: DDP's sync flag as the run last wrote it on each model (its Obj number, or the label of one
        #: built out of sight): off, and where; the flag armed by the latest forward (None: on)
        self._flag_off: dict[object, tuple[ModuleFunctions, cst.CSTNode] | None] = {}
        self._armed_off: tuple[ModuleFunctions, cst.CSTNode] | None = None
        self._forwarded: dict[object, tuple[int | None, int]] = {}  # each model's latest forward: (microbatch, epoch)
        #: the latest forward with gradients on, as (epoch, microbatch); and the microbatch the events
        #: after it belong to where the next microbatch was drawn before its backward (see `_attributed`)
        self._forward_at: tuple[int, int | None] | None = None
        self._ahead: int | None = None
        #: the index in :attr:`events` of the first backward recorded before any microbatch was drawn
        #: (see :meth:`_run_to_end`)
        self._undrawn_backward: int | None = None
        self.reduced_by_hand = False  # the run all-reduces gradients itself (`dist.all_reduce(p.grad)`)
        #: the labels of objects out of sight that were handed a value computed from a forward
        #: (`memory.add(out)`): what is read back from them may have been computed from it
        self._holders: set[str] = set()
        self._discarded: cst.Call | None = None  # the call of the expression statement run last
        self._counting: dict[object, Counting] = {}  # objects that count microbatches themselves (their Obj
        # numbers; the label of one known from use)
        self._backward_with_argument: set[object] = set()  # receivers of `.backward(loss)` (their keys)
        self._counter_writes: set[str] = set()  # attributes the code wrote that a stepping counter keeps itself
        self._counts_written: dict[object, int] = {}  # counts written before the run knew the counter by its use
        self._wrapped: dict[int, Counting] = {}  # what they wrapped (`prepare`), by the value's id
        # what library calls the run saw built (kept alive, so that the ids stay theirs): never wrapped
        # where they were not passed to `prepare`
        self._built_here: dict[int, Unknown] = {}
        #: of those, the module whose code built each and the qualified name of what it called (by id)
        self._made_by: dict[int, tuple[ModuleFunctions, str]] = {}
        #: the run-level names a checkpoint was loaded from (``torch.load(args.resume)``): a number read
        #: out of one (``int(args.resume.split("-")[-1])``) is where the resumed run starts, as what the load returns is
        self._checkpoint_paths: set[str] = set()
        #: the labels of those whose ``step()`` the run called, with what built each (strings only: it
        #: outlives :meth:`close`, for the roles settled from the run's events)
        self.library_built: dict[str, str] = {}

    def close(self) -> None:
        """Drop what refers back to this run (loaders, iterators and the module state that holds
        them), so that reference counting alone frees the run and the trees its events name."""
        self.training_pass = None
        self._passes.clear()
        self._items.clear()
        self._slices.clear()
        self._globals.clear()
        self._stored.clear()
        self._options.clear()
        self._counting.clear()
        self._counts_written.clear()
        self._wrapped.clear()
        self._made_by.clear()
        self._checkpoint_paths.clear()

    # --- data ---------------------------------------------------------------------------------

    def start_epoch(self) -> None:
        if self.epoch + 1 >= self.configuration.epochs:
            raise EndOfRun
        self.epoch += 1
        self.drawn_in_epoch = 0

    def end_epoch(self) -> None:
        self.events.append(RawEvent("epoch_end", None, None, cst.Pass(), self.module, (), self.microbatch, self.epoch))

    @property
    def microbatch(self) -> int | None:
        if self._replayed is not None:
            return self._replayed[1]
        return self.drawn_in_epoch - 1 if self.drawn_in_epoch else None

    @property
    def exhausted(self) -> bool:
        return self.epoch + 1 >= self.configuration.epochs and \
            self.drawn_in_epoch >= self.configuration.microbatches

    # --- entry --------------------------------------------------------------------------------

    def run_module(self) -> None:
        """Execute the module's body from the top (``__name__`` is ``"__main__"``)."""
        names = self._module_names(self.module)
        names["__name__"] = "__main__"
        frame = _Frame(self.module, names)
        self._run_to_end(lambda: self.block(self.module._module.body, frame))

    def run_function(self, function: cst.FunctionDef, class_def: cst.ClassDef | None,
                     handed: Handed = frozenset()) -> None:
        """Execute ``function``, its parameters unknown run-level values named by themselves
        (``self`` an instance of ``class_def`` with ``__init__`` run first), but those the project's
        callers hand an instance of one project class (``handed``: one such instance, built once
        for the run): once, or once per epoch while each call draws data (a ``train_one_epoch`` its
        caller does not show)."""
        self._module_prelude()

        def drive() -> None:
            receiver = self._instance(class_def, function) if class_def is not None else None
            given = {name: self._instance(classes[0][1], function, classes[0][0], name)
                     for name, classes in handed if len(classes) == 1}
            for call in range(self.configuration.epochs):
                self.epochs_from_code = self.epochs_from_code and call == 0
                drawn = self.drawn
                arguments, keywords = self._entry_arguments(function, receiver, Origin.RUN, given=given)
                self._call_function(Function(function, self.module, class_def, receiver), arguments, keywords,
                                    function)
                if self.drawn == drawn or self.exhausted:
                    return

        self._run_to_end(drive)

    def run_body(self, function: cst.FunctionDef, class_def: cst.ClassDef | None) -> None:
        """Drive an implicit microbatch body: call ``function`` once per microbatch of every
        epoch, its ``self`` and the module's state kept between calls, its arguments computed
        by a caller the project does not show, except what a framework's caller is known to pass
        (a LightningModule's ``training_step`` gets the batch's index in the epoch; a function
        handed to an ignite ``Engine`` reads the engine's iteration count)."""
        self._module_prelude()
        self.epochs_from_code = False
        index = fw.lightning.BATCH_INDEX_POSITION if is_microbatch_hook(function, class_def) else None
        # the counters a framework that drives the function keeps on its engine or runner (ignite's
        # `engine.state.iteration`: 1 on the first microbatch, never reset at an epoch's end; mmcv's
        # `runner.inner_iter`, restarted with each epoch); read once for all the entry's runs
        counters, epoch_counters, data = self.syntax._get(  # type: ignore[misc]
            "engine counters", function, lambda: _engine_counters(self.module, function))

        def drive() -> None:
            receiver = self._instance(class_def, function) if class_def is not None else None
            # each call is an iteration of the caller's loop: a `return` in it leaves the microbatch
            self._iteration_starts.append(len(self.events))
            self._iteration_depths.append(len(self._stack))
            self._iteration_loops.append(function)
            while not self.exhausted:
                self._iteration_starts[-1] = len(self.events)
                self._count_microbatch()
                for label, first in counters.items():
                    self._stored[label] = first + self.drawn - 1
                for label, first in epoch_counters.items():
                    self._stored[label] = first + self.drawn_in_epoch - 1
                for label in data:  # (`runner.outputs`: this microbatch's forward outputs)
                    self._stored[label] = Unknown(label, Origin.DATA)
                arguments, keywords = self._entry_arguments(function, receiver, Origin.CALLER)
                if index is not None and index < len(function.params.params):
                    arguments[index] = self.drawn_in_epoch - 1
                self._call_function(Function(function, self.module, class_def, receiver), arguments, keywords,
                                    function)
            self.end_epoch()

        self._run_to_end(drive)

    def _module_prelude(self) -> None:
        """Run the module's top-level assignments before a function entry: what the module
        builds when imported (``accelerator = Accelerator(...)``, ``optimizer = AdamW(...)``,
        ``prepare(...)``) is what its functions read. Compound statements and assignments that
        reach a training event are left out; a raise ends the prelude."""
        frame = _Frame(self.module, self._module_names(self.module))
        for statement in self.module._module.body:
            if isinstance(statement, cst.SimpleStatementLine) and statement.body and \
                    all(isinstance(small, (cst.Assign, cst.AnnAssign)) for small in statement.body) and \
                    not reaches_event(statement, self.module):
                try:
                    self.statement(statement, frame)
                except _Raised:
                    return

    def _run_to_end(self, body) -> None:
        try:
            body()
        except EndOfRun:
            pass
        except _Raised as raised:
            if raised.name != "StopIteration":
                if self.drawn == 0:  # `else: raise ValueError(...)` of a config check: no run takes that path
                    raise Infeasible(f"an uncaught {raised.name} before the first microbatch") from None
                self.notes.append(f"the run ended in an uncaught {raised.name}")
        except (_Break, _Continue, _Return):
            pass
        first = self._undrawn_backward
        if first is not None and self.drawn:  # (a run that draws nothing is left to "no run drew a microbatch")
            reset = self._reset_after(first)
            if reset is None:
                self.undecide(f"`{_code(self.events[first].node)[:60]}` backpropagates before the run drew a "
                              "microbatch, and the run draws some later: where the loop's microbatches come from, "
                              "the simulation does not follow")
            else:  # what they backpropagated reaches no update: no event of any group
                self.events[first:reset] = [e for e in self.events[first:reset]
                                            if e.microbatch is not None or e.method not in BACKWARD_CALLS]

    def _reset_after(self, index: int) -> int | None:
        """The index of the gradient reset that follows the backward recorded at ``index`` before the
        next backward of a microbatch (a reference backward written out before the loop, whose first
        group starts with ``zero_grad()``): its gradients reach no update. None: no such reset."""
        for at in range(index + 1, len(self.events)):
            event = self.events[at]
            if event.method in _RESET_METHODS or event.method == "zero_":
                return at
            if event.method in BACKWARD_CALLS and not event.forward and event.microbatch is not None:
                return None
        return None

    def _instance(self, class_def: cst.ClassDef, function: cst.FunctionDef, owner: ModuleFunctions | None = None,
                  label: str = "self") -> Obj:
        """An instance of ``class_def`` (of ``owner``, this module by default) with its ``__init__``
        run on unknown arguments (not where ``function`` is that ``__init__``)."""
        owner = owner or self.module
        obj = Obj(self._class_role(owner, class_def), "its class", label, class_def, owner)
        init = owner.method(class_def, "__init__")
        if init is not None and init[0] is not function:
            definition, init_owner, init_class = init
            arguments, keywords = self._entry_arguments(definition, obj, Origin.RUN, init_owner)
            try:
                self._call_function(Function(definition, init_owner, init_class, obj), arguments, keywords,
                                    definition)
            except (EndOfRun, BudgetExceeded):
                pass
            # (a raise goes on to end the run: `else: raise ValueError(...)` of a settings check in
            # `__init__` is a path of run-level choices that no run takes)
        return obj

    def _entry_arguments(self, function: cst.FunctionDef, receiver: object, origin: Origin,
                         owner: ModuleFunctions | None = None,
                         given: dict[str, object] | None = None) -> tuple[list[object], dict[str, object]]:
        """The arguments of an entry point's function, which no caller the project shows passes:
        each parameter an unknown of ``origin`` named by itself, but those ``given`` (what every
        caller the project shows hands them). A default does not decide it (the unseen caller may
        pass anything), except a whole-number default, which stays a named constant the
        configurations can rebind (``accum_steps=4``)."""
        values: list[object] = []
        keywords: dict[str, object] = {}
        for i, param in enumerate([*function.params.params, *function.params.kwonly_params]):
            if i == 0 and receiver is not None:
                values.append(receiver)
                continue
            default = self._default(param, owner or self.module) if param.default is not None else None
            value = given[param.name.value] if given and param.name.value in given else \
                default if isinstance(default, LabeledInt) else \
                self._bound(param.name.value, None) if origin is Origin.RUN else Unknown(param.name.value, origin)
            if param in function.params.kwonly_params:
                keywords[param.name.value] = value
            else:
                values.append(value)
        if function.params.star_kwarg is not None:  # `**kwargs`: whatever the unseen caller passes
            keywords[_UNSEEN_KEYWORDS] = Unknown(function.params.star_kwarg.name.value, origin)
        return values, keywords

    # --- statements ---------------------------------------------------------------------------

    def block(self, body: cst.BaseSuite | cst.Module | list, frame: _Frame) -> None:
        statements = body if isinstance(body, (list, tuple)) else body.body
        for statement in statements:
            self.statement(statement, frame)

    def statement(self, node: cst.CSTNode, frame: _Frame) -> None:
        self.statements += 1
        self.syntax.statements += 1
        if self.statements > MAX_STATEMENTS:
            raise BudgetExceeded(f"the statement budget of a run ({MAX_STATEMENTS}) ran out")
        if self.syntax.statements > self.syntax.limit:
            raise BudgetExceeded(f"the statement budget of an entry point ({self.syntax.limit}) ran out")
        kind = type(node)
        compound = _COMPOUND.get(kind)
        if compound is not None:
            getattr(self, compound)(node, frame)
        elif kind is cst.SimpleStatementLine:
            for small in node.body:
                self.small_statement(small, frame)
        elif kind is cst.FunctionDef:
            frame.names[node.name.value] = Function(node, frame.owner, None, None,
                                                    frame.names if frame.function is not None else None)
        elif kind is cst.ClassDef:
            frame.names[node.name.value] = ProjectClass(node, frame.owner)
        elif isinstance(node, cst.BaseSmallStatement):
            self.small_statement(node, frame)
        # match, async constructs and the like: not simulated (their names stay as they were)

    def small_statement(self, node: cst.CSTNode, frame: _Frame) -> None:
        kind = type(node)
        if kind is cst.Expr:
            call = node.value
            if type(call) is cst.Call:
                action = action_of(call, frame.owner.imports.qualify(dotted(call.func)), self._tracks(call, frame))
                if action is not None:
                    self._action(action, call, frame.owner)
                self._discarded = call
            self.expression(node.value, frame)
        elif kind is cst.Assign:
            value = self._rewrapped(node, frame)
            if value is None:
                value = self.expression(node.value, frame)
            if isinstance(value, Unknown) and value.origin is Origin.RUN and len(node.targets) == 1 \
                    and type(node.targets[0].target) is cst.Name and node.targets[0].target.value in self.bindings:
                self._solve_divisor(node.value, self.bindings[node.targets[0].target.value], frame)
            for target in node.targets:
                self.assign(target.target, value, frame)
        elif kind is cst.AnnAssign:
            if node.value is not None:
                self.assign(node.target, self.expression(node.value, frame), frame)
        elif kind is cst.AugAssign:
            self._augmented(node, frame)
        elif kind is cst.Return:
            raise _Return(self.expression(node.value, frame) if node.value is not None else None)
        elif kind is cst.Break:
            raise _Break
        elif kind is cst.Continue:
            raise _Continue
        elif kind is cst.Raise:
            raise _Raised(_exception_name(node.exc) if node.exc is not None else "Exception")
        elif kind is cst.Assert:
            if self.expression(node.test, frame) is False and not (
                    self._set_up_out_of_sight(node.test, frame) and self.expression(node.test, frame) is not False):
                raise Infeasible(_code(node.test))
        elif kind is cst.Global:
            frame.shared.update(n.name.value for n in node.names)
        elif kind is cst.Import:
            for alias in node.names:
                name = alias.asname.name.value if alias.asname else dotted(alias.name).split(".")[0]  # type: ignore[union-attr]
                frame.names[name] = Unknown(frame.owner.imports.qualify(name) or name)
        elif kind is cst.ImportFrom:
            if not isinstance(node.names, cst.ImportStar):
                for alias in node.names:
                    name = alias.asname.name.value if alias.asname else dotted(alias.name)  # type: ignore[union-attr]
                    if name:
                        frame.names[name] = self._module_name(frame.owner, name)

    def _set_up_out_of_sight(self, test: cst.BaseExpression, frame: _Frame) -> bool:
        """An ``assert`` that fails on attributes of ``self`` which another method of its class sets
        (``assert self.feed is not None, "call attach() first"``): the caller the run does not show
        set them up first, as the assert demands. Those attributes become unknown (True); False where
        the test reads none such (the run fails the assert: the configuration is ruled out)."""
        function = frame.function
        if frame.class_def is None or not isinstance(function, cst.FunctionDef) or not function.params.params:
            return False
        this = function.params.params[0].name.value
        receiver = frame.names.get(this)
        if not isinstance(receiver, Obj):
            return False
        writes = frame.owner.attributes(frame.class_def)
        opened = False
        for node in walk(test):
            if type(node) is cst.Attribute and type(node.value) is cst.Name and node.value.value == this:
                name = node.attr.value
                if any(not (type(value) is cst.Name and value.value == "None")
                       for value in writes.get(f"{this}.{name}", ())):
                    receiver.attrs[name] = Unknown(f"{this}.{name}")
                    opened = True
        return opened

    def _solve_divisor(self, expression: cst.BaseExpression, a: int, frame: _Frame) -> None:
        """``accum = max(1, len(loader) // cfg.updates)``, A bound to ``a``: A derived from a number the
        run knows (N) and a run-level one it does not (the updates wanted per epoch). Bind the second to
        a value that makes the derivation give ``a`` (``N // a``), so that the code's later reads of it
        (``if (i + 1) // accum == cfg.updates: break``) agree with the configuration; left open where
        none does (N < A)."""
        floored = False
        while type(expression) is cst.Call and dotted(expression.func) in ("max", "int") and expression.args:
            # `max(1, x)`, `int(x)`: the operand that is not a literal
            operands = [arg.value for arg in expression.args if int_value(arg.value) is None]
            if len(operands) != 1:
                return
            floored = floored or dotted(expression.func) == "int"
            expression = operands[0]
        if type(expression) is not cst.BinaryOperation or type(expression.right) not in (cst.Name, cst.Attribute):
            return
        if not (type(expression.operator) is cst.FloorDivide or floored and type(expression.operator) is cst.Divide):
            return
        known, divisor = self.expression(expression.left, frame), self.expression(expression.right, frame)
        if not (isinstance(known, int) and not isinstance(known, bool) and isinstance(divisor, Unknown)
                and divisor.origin is Origin.RUN and divisor.label == dotted(expression.right)):
            return
        solved = known // a if a <= known else 0
        if solved < 1 or known // solved != a:
            return
        label = divisor.label
        if type(expression.right) is cst.Name:
            frame.names[label] = LabeledInt(solved, label)
        else:
            self._stored[label] = LabeledInt(solved, label)

    def _rewrapped(self, node: cst.Assign, frame: _Frame) -> Function | BoundMethod | None:
        """``fn = torch.compile(fn)``, ``self.step_fn = wrap(self.step_fn)``, ``step = log(...)(track(...)(step))``:
        library calls that wrap a project function, the result bound back to the name it came from,
        keep running that function (a compiled, graph-captured or tracked callable computes what it
        wraps); None for any other assignment, which is then evaluated as written."""
        if len(node.targets) != 1:
            return None
        name, calls, value = _code(node.targets[0].target), [], node.value
        while type(value) is cst.Call and len(value.args) == 1 and not value.args[0].keyword \
                and not value.args[0].star:
            calls.append(value)
            value = value.args[0].value
        if not calls or not isinstance(value, (cst.Name, cst.Attribute)) or _code(value) != name:
            return None
        wrapped = self.expression(value, frame)
        if not isinstance(wrapped, (Function, BoundMethod)):
            return None
        for call in calls:
            callee = self.expression(call.func, frame)
            if not (isinstance(callee, Unknown) and callee.origin is not Origin.DATA and callee.label
                    and (_is_imported(callee.label, frame.owner) or type(call.func) is cst.Call)):
                return None  # (a project function is run: what it returns is what the name holds)
        return wrapped

    def _first_count(self, owner: object, key: str, frame: _Frame, subscript: bool = False) -> int | None:
        """0, where ``owner`` is an object built out of sight whose ``key`` (an attribute, or a string
        subscript) the running function counts up (``state["iter"] += 1``) and the run has not
        stored yet: the counter is assumed to start at 0, as :meth:`_augmented` assumes where the
        increment comes first. A test read before that increment would otherwise be a run-level
        choice for the first iteration and a count for the others."""
        if not isinstance(owner, Unknown) or owner.origin is Origin.DATA or not owner.label \
                or not isinstance(frame.function, cst.FunctionDef) \
                or key not in self.syntax.counted_keys(frame.function):
            return None
        label = _item_label(owner.label, key) if subscript else f"{owner.label}.{key}"
        if label in self._stored:
            return None
        self.note(f"`{label}` is assumed to start at 0 (the code does not show its start)")
        self._stored[label] = 0
        return 0

    def _augmented(self, node: cst.AugAssign, frame: _Frame) -> None:
        if _rescales_gradient(node):
            return  # `p.grad /= A`: normalisation on the gradient side, not gradients written by hand
        current = self.expression(node.target, frame)
        change = self.expression(node.value, frame)
        if isinstance(current, Unknown) and current.origin is not Origin.DATA and isinstance(change, int) \
                and isinstance(node.operator, (cst.AddAssign, cst.SubtractAssign)) and current.label:
            # a counter the run starts: assumed at 0 when the code does not show where it starts
            self.note(f"`{current.label}` is assumed to start at 0 (the code does not show its start)")
            current = 0
        result = _binary(type(node.operator).__name__.replace("Assign", ""), current, change, _code(node.target))
        if frame.function is None and type(node.target) is cst.Name and isinstance(current, LabeledInt) \
                and isinstance(result, int) and not isinstance(result, bool):
            # a script's own arithmetic on a named constant (`accum *= 8` to simulate 8 GPUs): still the
            # constant, which the configuration may bind to A
            result = self._bound(node.target.value, int(result))
        elif isinstance(result, (Literal, Derived)) and isinstance(node.operator, _COUNTING_OPERATORS):
            result = int(result)  # `state["iter_num"] += 1` from a literal start: a counter's number, which varies
        self.assign(node.target, result, frame)

    def _named(self, value: object, name: str) -> object:
        """:func:`_named`, keeping the mark of a library object the run saw built."""
        named = _named(value, name)
        if named is not value and id(value) in self._options:
            self._options[id(named)] = (named, self._options[id(value)][1])
        if named is not value and id(value) in self._built_here:
            self._built_here[id(named)] = named  # type: ignore[assignment]
            if id(value) in self._made_by:
                self._made_by[id(named)] = self._made_by[id(value)]
        return named

    def assign(self, target: cst.BaseExpression, value: object, frame: _Frame) -> None:
        kind = type(target)
        if isinstance(value, (Literal, Derived)) and kind in (cst.Name, cst.Attribute) and (
                target.value if kind is cst.Name else target.attr.value) in self.syntax.counters(frame.owner):
            value = int(value)  # `update_step = 0`, `= START + 1` of a loop that counts it up: a counter's start
        if kind is cst.Name:
            value = self._named(value, target.value)
            if target.value in (*self.bindings, *self.lengths) and isinstance(value, Unknown) \
                    and value.origin is Origin.RUN:
                value = self._bound(target.value, None)
            if frame.function is None and isinstance(value, Literal) or isinstance(value, Derived):
                # `ACCUM = 4`, `accum = batch // micro`: a named constant A may rebind
                value = self._bound(target.value, int(value))
            elif frame.function is None and isinstance(value, dict):  # `config = {"accum": 4}`: its constants too
                for key, item in list(value.items()):
                    if isinstance(item, Literal):
                        value[key] = self._bound(f"{target.value}[{key!r}]", int(item))
            if target.value in frame.shared:
                self._module_names(frame.owner)[target.value] = value
            else:
                frame.names[target.value] = value
        elif kind is cst.Attribute:
            owner = self.expression(target.value, frame)
            if any(target.attr.value == driver.count for driver in _STEPPING) and isinstance(owner, (Obj, Unknown)):
                self._write_count(owner, target.attr.value, value)
            if isinstance(owner, Obj):
                label = f"{owner.label}.{target.attr.value}"
                value = self._named(value, label)
                if label in (*self.bindings, *self.lengths) and isinstance(value, Unknown) \
                        and value.origin is Origin.RUN:
                    value = self._bound(label, None)
                owner.attrs[target.attr.value] = value
            elif isinstance(owner, Unknown) and owner.origin is Origin.RUN and owner.label:
                self._stored[f"{owner.label}.{target.attr.value}"] = value  # an object built out of sight
            if target.attr.value == fw.pytorch.DDP_SYNC_FLAG and _flag_key(owner) is not None:  # `m.… = A == 1`
                # off as the run knows it; a write after this microbatch's forward is misplaced (ACC401's), no plan
                off = (value is False or isinstance(value, Literal) and value == 0) and \
                    self._forwarded.get(_flag_key(owner)) != (self.microbatch, self.epoch)
                self._flag_off[_flag_key(owner)] = (frame.owner, target) if off else None
            if target.attr.value == "grad" and value is None:  # `p.grad = None`: a reset
                self._record("zero_grad", None, None, target, frame)
            elif target.attr.value == "grad":
                self._record(GRADIENT_WRITE, None, None, target, frame)  # judged where it falls in the group
        elif kind in (cst.Tuple, cst.List):
            elements = [e.value for e in target.elements]
            if isinstance(value, (tuple, list)) and len(value) == len(elements) \
                    and not any(isinstance(e, cst.StarredElement) for e in target.elements):
                for element, item in zip(elements, value, strict=True):
                    self.assign(element, item, frame)
            elif isinstance(value, Obj) and value.role is Role.SCHEDULER and value.class_def is None:
                # `sched_gen, sched_disc = self.lr_schedulers()`: a scheduler is not iterable, so what
                # unpacks is a list of them (Lightning's accessor, several configured): each is one
                for element in elements:
                    self.assign(element, Obj(Role.SCHEDULER, value.evidence, _code(element)), frame)
            else:
                origin = value.origin if isinstance(value, Unknown) else Origin.RUN
                for element in elements:
                    # an element of a run-level value is one too, named by its target (`(data_cfg,
                    # train_cfg) = configs`: `train_cfg["accum"]` is a setting the configurations bind)
                    label = _code(element)
                    sources = frozenset({label}) if origin is Origin.RUN else frozenset()
                    feeds = value.feeds if isinstance(value, Unknown) else None
                    self.assign(element, Unknown(label, origin, sources, feeds=feeds), frame)
        elif kind is cst.Subscript:
            owner = self.expression(target.value, frame)
            index = self.expression(target.slice[0].slice.value, frame) if len(target.slice) == 1 and \
                isinstance(target.slice[0].slice, cst.Index) else None
            if isinstance(owner, (dict, list)) and isinstance(index, (int, str)) and not isinstance(index, bool):
                try:
                    owner[index] = value  # type: ignore[index]
                except (IndexError, TypeError):
                    pass
            elif isinstance(owner, Unknown) and owner.origin is not Origin.DATA and owner.label \
                    and isinstance(index, (int, str)) and not isinstance(index, bool):
                # `state["iter_num"] += 1` on a mapping built out of sight: the run keeps the value it stored
                self._stored[_item_label(owner.label, index)] = value
        elif kind is cst.StarredElement:
            self.assign(target.value, Unknown(_code(target), Origin.RUN), frame)

    def _if(self, node: cst.If, frame: _Frame) -> None:
        if self._per_parameter(node.test):
            # `for name, p in model.named_parameters(): if "head" in name: p.grad = None`: the branch
            # runs for some parameters only, so what it resets is a subset (frozen), not the group's;
            # the other arm runs for the rest, so both arms run, each for a part of the model
            self._partial += 1
            try:
                self.block(node.body, frame)
                if isinstance(node.orelse, cst.If):
                    self._if(node.orelse, frame)
                elif isinstance(node.orelse, cst.Else):
                    self.block(node.orelse.body, frame)
            finally:
                self._partial -= 1
            return
        gates = len(self.phase_gates)
        branch = self.decide(node.test, frame, node)
        if branch and len(self.phase_gates) > gates:
            self._phase(node, frame)
        elif branch:
            self.block(node.body, frame)
        elif isinstance(node.orelse, cst.If):
            self._if(node.orelse, frame)
        elif isinstance(node.orelse, cst.Else):
            self.block(node.orelse.body, frame)

    def _phase(self, node: cst.If, frame: _Frame) -> None:
        """Run the branch of a gate that starts a training phase of its own (:data:`TRAINING_PHASE`),
        then end the run: the phase's own groups are what it shows. A phase the run cannot show whole
        (it draws no microbatch, leaves a fact open, or spends the budget) is left out, the functions it
        reached with it (their loops stay entries of their own), and the run ends undecided on the gate."""
        events, undecided, drawn, reached = len(self.events), len(self.undecided), self.drawn, set(self.reached)
        why = (f"the condition `{_code(node.test)}` {TRAINING_PHASE} (a loop over data with its backwards and "
               "updates): what it gates is not a group of microbatches")
        try:
            self.block(node.body, frame)
        except BudgetExceeded:
            self.drawn = drawn
        if self.drawn == drawn or len(self.undecided) > undecided:
            del self.events[events:]
            del self.undecided[undecided:]
            self.reached = reached  # (the phase's loops stay entries of their own)
            self.undecide(why)
        else:
            self.note(f"{why}; the run shows the first phase")
        raise EndOfRun

    def _per_parameter(self, test: cst.BaseExpression) -> bool:
        """Whether ``test`` reads the item of the loop over a model's parameters that the current
        iteration is in (:func:`~accumlint.model.events.tests_one_parameter`)."""
        return bool(self._iteration_loops) and self._iteration_depths[-1] == len(self._stack) \
            and tests_one_parameter(test, self._iteration_loops[-1])

    def _for(self, node: cst.For, frame: _Frame) -> None:
        iterable = self.expression(node.iter, frame)
        # a long loop over concrete values with no training event written in it: its first pass shows
        # whether the values it calls do any (a function passed in, a model's forward with gradients on)
        summarisable = isinstance(iterable, (list, tuple, str, range, dict)) and len(iterable) > MAX_STEPPED \
            and self._event_free(node, frame)
        marks = (len(self.events), self.drawn)
        self._micro_steps(node.iter, node.body, node, frame)
        fresh = len(self._fresh)
        bundled = _built_loader(iterable) and self.syntax.bundles(node, frame.owner)
        if bundled:  # one item: the pass itself, whose microbatches the inner loop draws
            items: Iterator[object] | None = iter([self._fresh_pass(
                iterable, f"an item of {label_text(iterable)}", (frame.owner, node.iter))])
        else:
            items = self._iterate(iterable, node.body, node.iter, node.target, frame, node)
        if items is None:  # unknown, and no training event inside
            if _grown_names(node) and any(_is_next(n) for n in walk(node.body)):
                # `for _ in range(chunks): held.append(next(it))`: the items it keeps are trained on later,
                # and how many microbatches it takes is what the run cannot count
                self.undecide(f"the loop over `{_code(node.iter)}` keeps an unknown number of items it draws: "
                              "the simulation cannot count the microbatches it takes")
            self._havoc(node, frame)
            return
        broke = False
        drawn = self._replays(iterable, node, frame)
        replays = drawn is not None and len(drawn) > 1
        if drawn is None and not bundled and self.syntax.iterates_its_items(node, frame.owner):
            self.undecide(f"`{_code(node.target)}`, an item of a data loader, is iterated for its backwards: each "
                          "item holds several microbatches, which the simulation does not count"
                          if _built_loader(iterable) else
                          f"`{_code(node.target)}` takes one loader after another: an epoch's microbatches "
                          "are those of every loader together, which the simulation does not count")
        self._iteration_starts.append(len(self.events))
        self._iteration_depths.append(len(self._stack))
        self._iteration_loops.append(node)
        before = self._replayed
        try:
            for item in items:
                self._iteration_starts[-1] = len(self.events)
                self.assign(node.target, item, frame)
                if replays:
                    tag = self._drawn_as.get(id(item))
                    self._replayed = tag[1:] if tag is not None and tag[0] is item else before
                try:
                    self.block(node.body, frame)
                except _Break:
                    broke = True
                    break
                except _Continue:
                    pass
                finally:
                    self._replayed = before
                if summarisable:
                    summarisable = False
                    if self._quiet(*marks):
                        self._summarise(node, frame)
                        break
        except _Return:
            self._end_passes(self._fresh[fresh:])  # a `return` drops the statement's iterator, as `break` does
            raise
        finally:
            self._iteration_starts.pop()
            self._iteration_depths.pop()
            self._iteration_loops.pop()
            made = self._fresh[fresh:]
            del self._fresh[fresh:]  # an error or the run's end leaves them as they were
        self._end_passes(made)
        if not broke and node.orelse is not None:
            self.block(node.orelse.body, frame)

    def _replays(self, iterable: object, node: cst.For, frame: _Frame) -> set[tuple[int, int | None]] | None:
        """The microbatches a loop ``node`` goes back over, drawn before it: ``iterable`` is a list
        the run filled while drawing (``held.append(next(it))`` in a first loop), every item of it
        so, and the loop trains; None for any other loop. Where they are two or more, each
        iteration's events are the microbatch its item was drawn as (the group's backwards come
        after all its draws, one per microbatch)."""
        if not isinstance(iterable, list) or not iterable or not self._reaches_backward(node.body, frame):
            return None
        tags = [self._drawn_as.get(id(item)) for item in iterable]
        if any(tag is None or tag[0] is not item for tag, item in zip(tags, iterable, strict=True)):
            return None
        return {(tag[1], tag[2]) for tag in tags if tag is not None}

    def _event_free(self, node: cst.For | cst.While, frame: _Frame) -> bool:
        """Whether no training event is written in the loop ``node`` (nor in the project functions it
        calls by name), no gradient is written by hand and no data is drawn in it."""
        return not self._has_event(node, frame) and not self.syntax.draws_data(node.body, frame.owner) \
            and not _writes_gradients(node)

    def _quiet(self, events: int, drawn: int) -> bool:
        """Whether the run drew no microbatch and recorded no event since it had ``events`` events and
        ``drawn`` microbatches, but forwards made while gradients are off (an evaluation's
        ``for k in range(eval_iters): model(x)`` under ``no_grad``: no graph, nothing in a group)."""
        return self.drawn == drawn and all(e.forward and e.grad_off for e in self.events[events:])

    def _summarise(self, node: cst.For | cst.While, frame: _Frame) -> None:
        """Run a long loop that performs no training event (over concrete values, or a ``while`` with a way
        out past :data:`MAX_STEPPED` passes) as its effect, not its iterations: the names it binds, the
        attributes it sets and the containers it fills become unknown (what it computes decides no event:
        a condition that reads it later leaves the run undecided)."""
        self._havoc(node, frame)
        for child in walk(node.body):
            if type(child) is cst.AssignTarget and isinstance(child.target, (cst.Attribute, cst.Subscript)):
                self._forget(child.target, frame)
            elif type(child) in (cst.AugAssign, cst.AnnAssign) and isinstance(child.target, cst.Attribute):
                self._forget(child.target, frame)
            elif type(child) is cst.Call and isinstance(child.func, cst.Attribute):
                receiver = child.func.value
                if type(receiver) is cst.Name and isinstance(frame.names.get(receiver.value), (list, dict, set)):
                    frame.names[receiver.value] = Unknown(receiver.value, Origin.DATA)  # `tokens.append(...)`
        self.note(f"the loop `{_code(node)[:40]}` performs no training event: its iterations are not stepped, "
                  "what it computes is left unknown")

    def _forget(self, target: cst.BaseExpression, frame: _Frame) -> None:
        """Make what ``target`` (an attribute, or the container a subscript writes into) holds unknown."""
        if isinstance(target, cst.Subscript):
            if type(target.value) is cst.Name and target.value.value in frame.names:
                frame.names[target.value.value] = Unknown(target.value.value, self._havoc_origin())
            return
        try:
            self.assign(target, Unknown(_code(target), self._havoc_origin()), frame)
        except (_Raised, Infeasible):
            pass

    def _comprehension(self, node: cst.ListComp | cst.SetComp | cst.GeneratorExp | cst.DictComp,
                       frame: _Frame) -> object:
        """A comprehension whose element reaches a training event, run as the loops it spells
        (``[train_group(g) for g in groups]``): its values as a list (a dict for a dict
        comprehension; a generator is taken as consumed where it stands, by ``list``/``sum``).
        Its targets are its own, as in Python 3: the frame's names are restored after it."""
        element = (node.key, node.value) if isinstance(node, cst.DictComp) else (node.elt,)
        saved = dict(frame.names)
        values: list[object] = []
        try:
            self._comprehension_level(node.for_in, element, frame, values)
        finally:
            frame.names.clear()
            frame.names.update(saved)
        if isinstance(node, cst.DictComp):
            return {k: v for k, v in values if isinstance(k, (str, int))}  # type: ignore[misc]
        return values

    def _comprehension_level(self, for_in: cst.CompFor, element: tuple[cst.BaseExpression, ...], frame: _Frame,
                             values: list[object]) -> None:
        """One ``for ... in ... if ...`` of a comprehension and what is nested in it, as ``_for``
        runs a statement (its passes over data end with it; an unknown iterable leaves the
        values unknown)."""
        body = for_in.inner_for_in or element[-1]
        iterable = self.expression(for_in.iter, frame)
        self._micro_steps(for_in.iter, body, None, frame)
        fresh = len(self._fresh)
        items = self._iterate(iterable, body, for_in.iter, for_in.target, frame)
        if items is None:
            return
        self._iteration_starts.append(len(self.events))
        self._iteration_depths.append(len(self._stack))
        self._iteration_loops.append(for_in)
        try:
            for item in items:
                self._iteration_starts[-1] = len(self.events)
                self.assign(for_in.target, item, frame)
                if not all(self.decide(test.search, frame) for test in for_in.ifs):
                    continue
                if for_in.inner_for_in is not None:
                    self._comprehension_level(for_in.inner_for_in, element, frame, values)
                    continue
                results = tuple(self.expression(part, frame) for part in element)
                values.append(results if len(results) > 1 else results[0])
                self._tag_drawn(values[-1])
        finally:
            self._iteration_starts.pop()
            self._iteration_depths.pop()
            self._iteration_loops.pop()
            made = self._fresh[fresh:]
            del self._fresh[fresh:]
        self._end_passes(made)

    def _end_passes(self, made: list[_Loader]) -> None:
        """End the passes a ``for`` statement's own iterable ``made``: nothing can draw from them
        after the statement, so a loop left early (``break``, ``return``, an ``islice`` count)
        ends the training pass's epoch there, as Python drops the iterator."""
        for loader in made:
            if loader is self.training_pass and loader.started and not loader.done:
                loader.done = True
                self.end_epoch()

    def _micro_steps(self, iterated: cst.BaseExpression, body: cst.CSTNode, node: cst.For | None,
                     frame: _Frame) -> None:
        """``for micro_step in range(K)`` around the backward, the update after it: K is A; and
        ``for start in range(0, len(batches), K)`` around a backward and the update (a loop over
        groups, each the slice ``batches[start:start + K]``): its stride K is A. A count the
        configuration can bind names the accumulation symbol; a literal one fixes A. So does
        ``for batch in islice(data, K)`` around the backward, the update after it: a group of K.
        ``iterated`` and ``body`` are the loop's (a comprehension's iterable and element: ``node``
        None, no statement for an update to follow). The update may follow in the caller of a helper
        that runs one group's micro-steps (:meth:`_update_follows`)."""
        sliced = _islice_count(iterated)
        if sliced is not None and node is not None and self._reaches_backward(body, frame) \
                and not self.syntax.has_update(body, frame.owner) \
                and self._update_follows(node, frame):
            self._names_a(self.expression(sliced, frame))
            return
        call = iterated
        if type(call) is cst.Call and dotted(call.func) == "enumerate" and call.args:
            call = call.args[0].value  # `enumerate(range(K))` passes as `range(K)` does
        passes = self._pass_count(call, frame) if type(call) is cst.Call and node is not None else None
        if passes is not None and self._reaches_backward(body, frame) \
                and not self.syntax.has_update(body, frame.owner) and self._update_follows(node, frame):
            self._names_a(self.expression(passes, frame))  # `for _ in accumulation_contexts(A, ...)`
            return
        if not (isinstance(call, cst.Call) and dotted(call.func) == "range" and len(call.args) in (1, 2, 3)):
            return
        args = [arg.value for arg in call.args]
        # K passes: `range(K)`, `range(0, K)`
        count = args[-1] if len(args) == 1 or len(args) == 2 and int_value(args[0]) == 0 else None
        if count is not None and node is not None and self.syntax.prefetches(node, frame.owner):
            self._names_a(self.expression(count, frame))
            return
        if not self._reaches_backward(body, frame):
            return
        updates = self.syntax.has_update(body, frame.owner)
        if count is not None and not updates and node is not None and self._update_follows(node, frame):
            self._names_a(self.expression(count, frame))
        elif len(args) == 3 and updates and self.syntax.draws_data(body, frame.owner):
            self._names_a(self.expression(args[2], frame))

    def _update_follows(self, loop: cst.For, frame: _Frame) -> bool:
        """Whether an optimizer update follows ``loop`` in its function (:func:`update_follows`), or, where
        ``loop`` is a statement of its function's own body and the function was called by the code the
        run is in, after that call in the caller (``loss = train_step(model, loader)``, then
        ``optimizer.step()``: the helper runs the micro-steps of one group, in its one loop that
        backpropagates)."""
        if self.syntax.update_follows(loop, frame.owner):
            return True
        if not self._stack or not self.syntax.at_function_level(loop, frame.owner) \
                or not isinstance(frame.function, cst.FunctionDef) or any(
                    other is not loop and type(other) in (cst.For, cst.While)
                    and self.syntax.at_function_level(other, frame.owner) and self._reaches_backward(other.body, frame)
                    for other in walk(frame.function.body)):
            return False  # (several loops that backpropagate, a pipeline schedule's phases: no one group's steps)
        owner, call = self._stack[-1]
        statement = _statements_of_calls(owner).get(id(call))
        return statement is not None and self.syntax.update_follows(statement, owner)

    def _pass_count(self, call: cst.Call, frame: _Frame) -> cst.BaseExpression | None:
        """The argument of ``call`` that counts the passes of a generator of the project yielding no value
        (:func:`_yields_nothing`): the one its parameter of that name is counted by in the generator
        (``range(count)``, ``[...] * count``, ``count - 1``); None otherwise."""
        if type(call.func) not in (cst.Name, cst.Attribute):
            return None
        callee = self.expression(call.func, frame)
        if not isinstance(callee, Function) or not isinstance(callee.definition, cst.FunctionDef) \
                or not _yields_nothing(callee.definition):
            return None
        counted = _counted_parameters(callee.definition)
        params = [p.name.value for p in callee.definition.params.params]
        if callee.self_value is not None and params and not _is_static(callee.definition):
            params = params[1:]
        found = [arg.value for position, arg in enumerate(call.args) if arg.star == "" and (
            arg.keyword.value if arg.keyword is not None else params[position] if position < len(params) else None)
            in counted]
        return found[0] if len(found) == 1 else None

    def _names_a(self, count: object) -> int | None:
        """``count`` is the code's A: a count the configuration can bind names the accumulation
        symbol (the run restarts with it bound, :class:`NeedBinding`); a literal one fixes A.
        Returns A where the run knows it."""
        if isinstance(count, LabeledInt) and not count.bound or isinstance(count, Unknown) and \
                count.origin is Origin.RUN and count.label and count.gate is None:
            raise NeedBinding(frozenset({label_text(count)}))
        if isinstance(count, Literal) and count > 1:
            self.literal_gates.append(int(count))
        return int(count) if isinstance(count, int) and not isinstance(count, bool) and count > 0 else None

    def _count_entry(self, counting: Counting) -> _SyncOff | None:
        """Enter a counting object's context (``accelerator.accumulate(model)``): one microbatch
        counted; off the boundary the body runs under ``no_sync()`` where the driver says so."""
        if counting.foreign:
            self.undecide(f"`{counting.obj.label}` hands the accumulation to another framework's engine")
            return None
        a = self._names_a(counting.a)
        if a is None:
            self.undecide(f"the {counting.driver.a_keyword} of `{counting.obj.label}` is a value the run does not know")
            return None
        if counting.entered_at is not None or counting.entry_drawn == self.drawn:
            self.undecide(f"`{counting.driver.enter}()` is entered more than once per microbatch: "
                          f"{counting.driver.framework} counts each entry {LEFT_TO_ACC501}")
        training = self.training_pass
        at_end = training is not None and training.wrapped_by is counting and \
            self.drawn_in_epoch >= self.configuration.microbatches
        synced = counting.enter(a, at_end)
        counting.entered_at, counting.entry_drawn = len(self.events), self.drawn
        return _SyncOff(True) if not synced and counting.driver.no_sync_off_boundary else None

    def _open_a(self, label: str) -> object:
        """A that a counter's config leaves to a configuration the run does not see: the symbol
        ``label``, which the configurations bind."""
        return self._bound(label, None)

    def _build_counter(self, driver: CountingDriver, args: list[object], kwargs: dict[str, object],
                       node: cst.Call) -> tuple[object, ...]:
        """Call ``driver``'s builder (``deepspeed.initialize``): the counter it builds, with A and
        the scheduler it holds from ``args``/``kwargs``, among the other values it returns."""
        code = _code(node)
        counter = Obj(driver.counter, "construction", code)
        counting = Counting(driver, counter, kwargs, any(arg.star == "**" for arg in node.args), self._open_a)
        counting.entry_drawn = self.drawn
        self._counting[counter.number] = counting
        scheduler = counting.hold_scheduler(args, kwargs, code)
        returned: list[object] = []
        for i, role in enumerate(driver.returns):
            if role is driver.counter:
                returned.append(counter)
            elif role is Role.SCHEDULER and (scheduler is None or not isinstance(scheduler, Unknown)
                                             or scheduler.label is not None):
                returned.append(scheduler)
            else:
                returned.append(Unknown(f"{code}[{i}]", Origin.RUN))
        return tuple(returned)

    def _write_count(self, owner: Obj | Unknown, attribute: str, value: object) -> None:
        """``owner.<attribute> = value`` where ``attribute`` is a counting driver's count of
        microbatches (``engine.micro_steps = 0``): on a counter the run drives, a number the run
        knows becomes its count between passes over the data (a restart at an epoch's start), the
        boundary then following from it as the engine decides it; one that changes the count inside
        a pass moves the boundary (ACC505's bug: the run is left to that rule), and a value the run
        does not know is a write it cannot follow."""
        key = _counter_key(owner)
        counting = self._counting.get(key) if key is not None else None
        known = isinstance(value, int) and not isinstance(value, bool)
        training = self.training_pass
        if known and counting is not None and counting.driver.count == attribute and (
                value == counting.count or training is None or not training.started or training.done):
            counting.count = int(value)  # type: ignore[call-overload]  # (between passes: a restart of the count)
        elif known and counting is None and key is not None:
            self._counts_written[key] = int(value)  # type: ignore[call-overload]  # (an engine known by its use later)
        elif known and counting is not None:
            self.undecide(f"`{label_text(owner)}.{attribute}` is set inside the pass over the data to another "
                          f"number than its own count: {counting.driver.framework}'s boundary moves "
                          "(ACC505 reports it)")
        else:
            self._counter_writes.add(f"{label_text(owner)}.{attribute}")

    def _stepping(self, receiver: object, method: str) -> Counting | None:
        """The counter whose own ``method`` call its driver runs (``engine.step()``,
        ``engine.is_gradient_accumulation_boundary()``): one the run saw built, or one known from
        use (a receiver of ``.backward(loss)`` that steps, or asks the boundary), whose name
        suggests no other role."""
        key = _counter_key(receiver)
        if key is None or not isinstance(receiver, (Obj, Unknown)) or is_data(receiver) \
                or not any(_driven_method(driver, method) for driver in _STEPPING):
            return None
        counting = self._counting.get(key)
        if counting is not None:
            return counting if _driven_method(counting.driver, method) else None
        if not isinstance(receiver, Unknown):
            return None
        if receiver.label in steps_with_argument(self.module._module):
            return None  # `accel.step(opt)`: it steps the optimizer it is given, as a scaler does; no engine
        for driver in _STEPPING:
            if _named_role(receiver.label) not in (None, Role.MODEL, driver.counter):
                continue  # (`optimizer.backward(loss)` of a mixed-precision wrapper: no engine)
            if method != driver.counts or key in self._backward_with_argument:
                counting = self._counting[key] = Counting(driver, receiver, {}, False, self._open_a)
                counting.count = self._counts_written.pop(key, 0)
                counting.entry_drawn = self.drawn - 1
                counting.scheduler = Unknown(None)  # (built out of sight: whether it holds one is unknown)
                return counting
        return None

    def _drive(self, counting: Counting, receiver: object, method: str, node: cst.Call, frame: _Frame) -> object:
        """Run ``method`` of a counter as its driver does: the counting call counts one microbatch
        and, at the boundary, performs the update, the reset and its scheduler's step; the flag
        method returns the boundary; a manual boundary call leaves the run undecided."""
        driver, label = counting.driver, label_text(receiver)
        if method in driver.manual_calls:
            self._set_by_hand.add(id(counting))
            self.undecide(f"`{label}.{method}()` sets the boundary by hand: {driver.framework}'s own micro-step "
                          "count no longer decides it")
            return None
        counts = method == driver.counts
        if counting.refused:
            self.undecide(f"`{label}` ({driver.framework}): {counting.refused}")
            return Unknown(f"{label}.{method}(...)", Origin.DATA)
        a = self._names_a(counting.a)
        if a is None:
            self.undecide(f"the {driver.a_keyword} of `{label}` is a value the run does not know")
            return Unknown(f"{label}.{method}(...)", Origin.DATA)
        if not counts:
            counting.resolved = a
            return counting.synced
        if self.drawn - counting.entry_drawn != 1:
            if self.drawn - counting.entry_drawn > 1 and id(counting) not in self._set_by_hand:
                self.gated_counts.append((None if isinstance(counting.obj, Obj) else label,
                                          (*self._stack, (frame.owner, node))))
            self.undecide(f"`{label}.{method}()` does not run once after every microbatch: {driver.framework} "
                          "counts its calls, not the microbatches (ACC502 reports one gated by hand)")
        if f"{label}.{driver.count}" in self._counter_writes:
            self.undecide(f"`{label}.{driver.count}` is written with a value the run does not know: "
                          f"{driver.framework}'s own count moves (ACC505 reports it inside a loop)")
        counting.entry_drawn = self.drawn
        if counting.step(a):
            for performed in driver.performs:
                self._record(performed, receiver, None, node, frame, driven=driver.counter)
            held = counting.scheduler
            if isinstance(held, Unknown) and held.label is None:
                self.note(f"whether `{label}` holds a scheduler (from a config the run does not see) is unknown: "
                          "its steps are not shown")
            elif held is not None:
                self._record("step", held, None, node, frame, driven=Role.SCHEDULER)
        return None

    def _acts(self, receiver: object, method: str, node: cst.Call, frame: _Frame) -> bool:
        """Whether a call of ``method`` (at ``node``) on ``receiver`` acts: a framework that counts
        microbatches skips its wrapped optimizer's and scheduler's calls off the boundary (a receiver
        whose role the run does not know leaves the run undecided). A gated call that acts before the
        backward of the group's last microbatch is kept in :attr:`early_gated` (ACC501's)."""
        counting = self._wrapped.get(id(receiver))
        if counting is None:
            if isinstance(receiver, Unknown) and receiver.origin is not Origin.DATA and any(
                    not c.synced and any(method == gated for _, gated in c.driver.gated)
                    and not self._built_outside(receiver, c) for c in self._counting.values()):
                # built where the run cannot see, it may be what the framework wrapped
                self.undecide(f"`{label_text(receiver)}.{method}()` off the boundary: whether "
                              "the framework wrapped its receiver is unknown")
            return True
        role = receiver.role if isinstance(receiver, Obj) else _named_role(label_text(receiver)) or Role.UNKNOWN
        acts = counting.acts(role, method)
        if acts and (role, method) in counting.driver.gated and method != "step" and counting.entered_at is not None \
                and not any(e.method in BACKWARD_CALLS for e in self.events[counting.entered_at:]):
            self.early_gated.append((frame.owner, node))
            self.undecide(f"`{label_text(receiver)}.{method}()` acts before the backward of the last microbatch "
                          f"of a group inside `{counting.driver.enter}()` {LEFT_TO_ACC501}")
        if acts is None:
            self.undecide(f"`{label_text(receiver)}.{method}()` may be skipped off the boundary by "
                          f"{counting.driver.framework}, and its role is unknown")
            return True
        return acts

    def _project_method(self, receiver: Unknown, method: str) -> bool:
        """Whether the run saw ``receiver`` built from a class of the project (in a module that
        performs no training event, so not followed) that defines ``method`` itself or through a
        project base (a metric's own ``accumulate()``): no framework's counting entry. Asked only
        here, so the class's module is parsed only for such a call."""
        made = self._made_by.get(id(receiver))
        if made is None or made[0].project is None:
            return False
        owner, qualified = made
        found = owner.project.lookup(owner, qualified, any_module=True)  # type: ignore[attr-defined]
        if found is None or not isinstance(found[1], cst.ClassDef):
            return False
        return found[0].method(found[1], method) is not None

    def _built_outside(self, receiver: Unknown, counting: Counting) -> bool:
        """Whether the run saw ``receiver`` built by a library other than the counting object's
        framework (``EMAModel(net)`` after ``prepare``): only what goes through ``prepare`` is wrapped."""
        return id(receiver) in self._built_here and \
            (receiver.label or "").split(".")[0] != counting.driver.source.package

    def _epoch_count(self, args: list[object], call: cst.Call, frame: _Frame) -> None:
        """``range(iters_per_epoch)`` of a run-level count named as an epoch's, in a function that trains on items it
        takes with ``next()`` from an iterator made where the run cannot see (a stream that goes on
        across epochs), or ``call`` a range whose loop draws with ``next()`` from an iterator made anew
        in each pass of an outer loop (:meth:`SyntaxFacts.pass_ranges`): the count is the epoch's
        length N, as ``len(loader)`` is for a pass."""
        counts = [a for a in args if isinstance(a, Unknown)]
        if len(args) != 1 or len(counts) != 1 or counts[0].origin is not Origin.RUN or not counts[0].label \
                or counts[0].gate is not None or counts[0].label in self.lengths:
            return
        function = frame.function
        if not isinstance(function, cst.FunctionDef) or not self._reaches_backward(function.body, frame):
            return
        named = conventions.EPOCH_LENGTH_NAME.search(last_segment(counts[0].label))
        # (a count named as the whole run's, `range(total_steps)`, is not an epoch's; nor one that draws from
        # an iterator the function does not restart in each pass of an outer loop)
        if named and self.syntax.streams(function, frame.owner) or id(call) in self.syntax.pass_ranges(function):
            # (a count of draws named as A, or computed from one, is the group's: `range(ceil(n / accum))`
            # follows once A is bound)
            group = {label for label in counts[0].sources | {counts[0].label}
                     if conventions.ACCUMULATION_NAME.search(last_segment(label))}
            raise NeedBinding(frozenset(group)) if group else NeedBinding(frozenset(), frozenset({counts[0].label}))

    def _iterate(self, iterable: object, body: cst.CSTNode, iterated: cst.BaseExpression, target: cst.CSTNode,
                 frame: _Frame, loop: cst.For | None = None) -> Iterator[object] | None:
        """The items a loop whose ``body`` runs once per item of ``iterable`` (the value of its
        expression ``iterated``, bound to ``target``; ``loop``: the ``for`` statement, None for a
        comprehension) goes through; None where they are unknown and no training event is inside."""
        if self.syntax.trained_items and id(iterated) in self.syntax.trained_items:
            return self._trained_items(target)
        if loop is not None and not isinstance(iterable, (list, tuple, dict, range)) \
                and self.syntax.steps_its_items(loop):
            # `for opt_idx, optimizer in enumerate(self.optimizers)`, a backward and an update for each: the
            # optimizers the run cannot see, once (not a pass over data)
            return iter([Unknown(_code(target), Origin.RUN)])
        if isinstance(iterable, _Iteration):
            if not iterable.concrete() and not self._reaches_event(body, frame):
                return None
            iterable.in_loop(body, iterated, frame)
            iterable.fresh = True
            return iterable.items()
        if isinstance(iterable, range) and self.passes_are_microbatches(body, frame):
            return self._counted(iterable)  # `for micro_step in range(A)`: each pass is a microbatch
        if isinstance(iterable, (list, tuple, str, range, dict)):
            return _limited(iter(iterable))
        if isinstance(iterable, _Loader):
            iterable.untrained = not self._reaches_backward(body, frame)
            return self._draws(iterable)
        if is_data(iterable) and self.drawn:
            return _parts(iterable)  # `for segment in batch.chunk(k)`: parts of the drawn microbatch
        data = isinstance(iterable, Unknown) or \
            isinstance(iterable, Obj) and iterable.role in (Role.LOADER, Role.UNKNOWN)
        if data and self._reaches_backward(body, frame):
            label = iterable.label if isinstance(iterable, (Obj, Unknown)) and iterable.label else "data"
            return self._draws(self._fresh_pass(iterable, f"an item of {label}", (frame.owner, iterated)))
        if data and (self._has_event(body, frame) or self.syntax.reduces(body, frame.owner)):
            # `for p in model.parameters(): p.grad = None`, `for opt in optimizers: opt.step()`,
            # `for p in model.parameters(): dist.all_reduce(p.grad)`: once, for each
            return iter([Unknown(_code(target), Origin.RUN)])
        return None

    def passes_are_microbatches(self, body: cst.CSTNode, frame: _Frame) -> bool:
        """Whether each pass of a counted loop with ``body`` (run in ``frame``) is a microbatch: it
        reaches a backward and draws no microbatch itself (``for micro_step in range(A)``)."""
        return self._reaches_backward(body, frame) and not self._draws_microbatches(body, frame)

    def _counted(self, passes: range) -> Iterator[object]:
        """Each pass a microbatch, unless the run draws its microbatches from a loader (the
        passes then run over what was drawn: forwards first, backwards in a second loop)."""
        for item in _limited(iter(passes)):
            if not self.loaded:
                self._count_microbatch()
            yield item

    def _trains_on(self, node: cst.Call, frame: _Frame) -> bool:
        """Whether ``len(x)``'s ``x`` is what a training loop of the same function iterates (its
        length is the epoch's microbatches, whatever it is called)."""
        name = dotted(node.args[0].value) if node.args else None
        scope = frame.function if isinstance(frame.function, cst.FunctionDef) else frame.owner._module
        return name is not None and name in self.syntax.trained_on(scope, frame.owner)

    def restart_if_items_train(self, loader: _Loader) -> None:
        """Restart the entry's runs where ``loader``, a pass that trains drawn inside the loop over the
        training pass, has drawn an epoch's microbatches: that loop's items were no microbatches but
        each a run of training over data (``for config in grid: train(config)``, ``for phase in
        schedule: for x in loader: ...``). Its loop then iterates as :meth:`_trained_items`; without the
        restart the nested pass draws on until the statement budget ends the run."""
        training = self.training_pass
        outer = training.made_at if training is not None else None
        if outer is None or loader.made_at is None or loader.made_at[1] is outer[1] \
                or training.position != 1 or id(outer[1]) in self.syntax.trained_items:
            return  # (a loader zipped with the training pass shares its loop)
        if any(e.method in BACKWARD_CALLS for e in itertools.islice(self.events, None, loader.started_at)):
            return  # (a backward on the outer item itself: its items are microbatches)
        self.syntax.trained_items.add(id(outer[1]))
        raise NeedBinding(frozenset())

    def _trained_items(self, target: cst.CSTNode) -> Iterator[object]:
        """The items of a loop each of which trains over data drawn inside it (marked by
        :meth:`restart_if_items_train`): as many as the run's epochs last (the passes inside draw
        them), each a run-level unknown."""
        for count in itertools.count():
            if self.exhausted:
                return
            if count > MAX_ITERATIONS:
                raise BudgetExceeded(f"a loop of unknown length ran past {MAX_ITERATIONS} iterations")
            yield Unknown(_code(target), Origin.RUN)

    def _draws(self, loader: _Loader) -> Iterator[object]:
        while True:
            try:
                yield loader.draw()
            except _Raised:
                return

    def _while(self, node: cst.While, frame: _Frame) -> None:
        test = self.expression(node.test, frame)
        if isinstance(test, Unknown) and not self._reaches_event(node.body, frame):
            self._havoc(node, frame)
            return
        counting = self.unbounded(node.body, frame.owner)
        # `while True:` (or a counter against a fixed bound) around a backward, with no data drawn in it
        # (`x = make_batch()`): each pass is one microbatch, and the run ends when its microbatches are
        # drawn, as at a loader's end; a break the run cannot decide (`if it > cfg.max_iters:`) would
        # otherwise leave it to the iteration budget
        can_end = self.syntax._get("can end", node, lambda: _can_end(node))
        per_microbatch = not isinstance(test, Unknown) and self._reaches_backward(node.body, frame) \
            and can_end and not self._draws_microbatches(node.body, frame)
        stepped = passes = 0
        marks = (len(self.events), self.drawn)
        collects: bool | None = None  # (asked once, where a test on the data first needs it)
        while True:
            if isinstance(test, Unknown) and test.origin is Origin.DATA and collects is None:
                collects = self._collects(node, frame)
            if isinstance(test, Unknown) and test.origin is Origin.DATA and collects:
                # `while not done:` around an environment's steps, with no backward and no data drawn in
                # it: an episode, whose end the data decides; the run takes two passes and its way out
                if passes >= _EPISODE_PASSES:
                    break
            elif isinstance(test, Unknown):
                try:
                    next(counting)
                except StopIteration:
                    break  # the run's data is drawn: the loop ends as its condition would
            elif not _truth(test):
                break
            else:
                self._iterations(node)
                if per_microbatch and not self.loaded:
                    self._count_microbatch()
                stepped += 1
            self._iteration_starts.append(len(self.events))
            self._iteration_depths.append(len(self._stack))
            self._iteration_loops.append(node)
            on_data = self.data_conditions
            before = (len(self.events), self.drawn)
            passes += 1
            try:
                self.block(node.body, frame)
            except _Break:
                return
            except _Continue:
                pass
            finally:
                self._iteration_starts.pop()
                self._iteration_depths.pop()
                self._iteration_loops.pop()
            if self.exhausted and before == (len(self.events), self.drawn) \
                    and self.syntax.draws_data(node.body, frame.owner):
                # `while True:` around an epoch's pass, after the run's last epoch: no pass draws again, and
                # the way out the code has (`if step > max_updates: break`) is what the run cannot reach
                raise EndOfRun
            if not isinstance(test, Unknown) and (stepped > MAX_STEPPED or self.data_conditions != on_data) \
                    and can_end and self._event_free(node, frame) and self._quiet(*marks):
                # `while True: key = f"part_{n}"; if key in batch: ... else: break`: a loop with no training
                # event and a way out that the data (or more passes than are stepped) decides ends as a
                # summary, as its way out would
                self._summarise(node, frame)
                return
            test = self.expression(node.test, frame)
        if node.orelse is not None:
            self.block(node.orelse.body, frame)

    def _collects(self, node: cst.While, frame: _Frame) -> bool:
        """Whether a ``while`` loop's body reaches no backward and draws no data: it collects (an
        environment's steps, acting with the trained network) for a training step after it."""
        return not self._reaches_backward(node.body, frame) and not self.syntax.draws_data(node.body, frame.owner)

    def _draws_microbatches(self, body: cst.CSTNode, frame: _Frame) -> bool:
        """Whether a loop ``body`` may draw microbatches itself (:func:`_draws_data`, where a loop inside
        counts only if it reaches a training event): a call ``self.name(...)`` on an instance the run
        built reaches the method its class defines (or inherits), not every method of that name."""
        receiver = frame.names.get("self")
        if not isinstance(receiver, Obj) or receiver.class_def is None or receiver.owner is None:
            return self.syntax.draws_microbatches(body, frame.owner)
        class_def, owner = receiver.class_def, receiver.owner

        def compute() -> bool:
            resolved: set[int] = set()
            for call in _calls(body):
                func = call.func
                if isinstance(func, cst.Attribute) and type(func.value) is cst.Name and func.value.value == "self":
                    found = owner.method(class_def, func.attr.value)  # type: ignore[attr-defined]
                    if found is not None and self.syntax.draws_microbatches(found[0].body, found[1]):
                        return True
                    if found is not None:
                        resolved.add(id(call))
            return _draws_data(body, frame.owner, loops_that_train=True, skip=frozenset(resolved))

        return self.syntax._get(f"microbatches of {id(class_def)}", body, compute)  # type: ignore[return-value]

    def _iterations(self, node: cst.CSTNode) -> None:
        self._loop_iterations[id(node)] = count = self._loop_iterations.get(id(node), 0) + 1
        if count > MAX_ITERATIONS:
            raise BudgetExceeded(f"the loop `{_code(node)[:40]}` ran past {MAX_ITERATIONS} iterations")

    def unbounded(self, body: cst.CSTNode | None, owner: ModuleFunctions, start: int | Unknown = 0,
                  stride: int = 1) -> Iterator[int]:
        """Iterations of a loop whose count the code does not fix (``while step < max_steps``,
        ``range(args.epochs)``): until the run's data is drawn. An iteration that draws no data
        is one microbatch (``while True: x = make_batch()``). ``body`` None: the values of a
        ``range`` of unknown length that ``next()`` takes, in a loop that draws the data itself.
        ``start``, ``stride``: the first value and the step of a ``range(1, n + 1)`` whose end
        alone is unknown; a ``start`` the code does not fix (``range(resumed + 1, total)``) makes
        every microbatch's index that unknown: where the groups of a gate on it begin is open."""
        draws = body is None or self.syntax.draws_data(body, owner)
        if isinstance(start, Unknown) and (body is None or self.syntax.holds_training_loop(body, owner)):
            start = 0  # an epoch loop's first epoch: a phase of the run, explored as a choice
        index = 0
        drawn = self.drawn
        while not self.exhausted:
            if not draws or (index and self.drawn == drawn):
                draws = False
                self._count_microbatch()
            drawn = self.drawn
            yield start if isinstance(start, Unknown) else start + index * stride
            index += 1
            if index > MAX_ITERATIONS:
                raise BudgetExceeded(f"a loop of unknown length ran past {MAX_ITERATIONS} iterations")

    def _pass(self, data: object, label: str, at: tuple[ModuleFunctions, cst.CSTNode] | None = None) -> _Loader:
        """A new pass over ``data``; a loader whose length the code builds from A (a batch
        sampler given A, ``num_samples=updates * bs * accum``) holds whole groups, so a
        configuration whose epoch is not a multiple of A cannot happen."""
        if isinstance(data, Obj) and data.number in self._whole_groups and \
                self.configuration.microbatches % self.configuration.accumulation:
            raise Infeasible(f"the loader `{data.label}` is sized with A")
        loader = _Loader(self, label)
        loader.wrapped_by = self._wrapped.get(id(data))
        loader.source = _data_source(data)
        loader.serial = next(self._serials)
        loader.made_at = at
        return loader

    def _fresh_pass(self, data: object, label: str, at: tuple[ModuleFunctions, cst.CSTNode] | None = None) -> _Loader:
        """:meth:`_pass`, for an iterable no name holds: the ``for`` statement iterating it ends it."""
        loader = self._pass(data, label, at)
        self._fresh.append(loader)
        return loader

    def _sized_by_a(self, node: cst.Call, frame: _Frame) -> bool:
        """Whether the loader built by ``node`` is given A: a name bound to A (or, where A is the
        update condition's literal, that integer) among its arguments, or among what a local
        name in them was assigned (one step back)."""
        literal = None if self.bindings else self.configuration.accumulation

        def given_a(expression: cst.CSTNode) -> bool:
            return any(_constant_label(n) in self.bindings if isinstance(n, (cst.Name, cst.Attribute, cst.Subscript))
                       else isinstance(n, cst.Integer) and n.evaluated_value == literal for n in walk(expression))

        if any(given_a(arg.value) for arg in node.args):
            return True
        used = {dotted(n) for arg in node.args for n in walk(arg.value) if type(n) in _NAMED}
        scope = frame.function.body if isinstance(frame.function, cst.FunctionDef) else frame.owner._module
        return any(type(assign) is cst.Assign and any(dotted(t.target) in used for t in assign.targets)
                   and given_a(assign.value) for assign in walk(scope))

    def _count_microbatch(self) -> None:
        if self.epoch < 0 or self.drawn_in_epoch >= self.configuration.microbatches:
            if self.epoch >= 0:  # the run's count of microbatches, not a pass of the code, ends this epoch
                self.epochs_from_code = False
                self.end_epoch()
            self.start_epoch()
        self.drawn_in_epoch += 1
        self.drawn += 1

    def _havoc(self, node: cst.CSTNode, frame: _Frame) -> None:
        """A loop the run cannot iterate and that performs no training event: the names it
        binds become unknown data (gradients it writes by hand are recorded as a write)."""
        if _writes_gradients(node):
            self._record(GRADIENT_WRITE, None, None, node, frame)
        for name in _bound_names(node):
            frame.names[name] = Unknown(name, Origin.DATA)
        for name in _grown_names(node):
            # `for _ in range(chunks): held.append(next(it))`: a list the run holds, grown an unknown
            # number of times, has an unknown length (kept empty, `assert len(held) == 1` would rule the
            # path out); a name holding anything else (an object's `append`) keeps its value
            if isinstance(frame.names.get(name), list):
                frame.names[name] = Unknown(name, Origin.RUN)

    def _havoc_origin(self) -> Origin:
        """What a summarised loop leaves in the containers and attributes it writes (:meth:`_forget`):
        before the run's first microbatch nothing it reads varies with one (settings clamped in a
        loop, ``for k, v in meta.items(): hyp[k] = ...``), so a run-level unknown; after it,
        per-microbatch data. (The names it binds stay data: its targets, and values it computes
        only to read them again in the loop.)"""
        return Origin.DATA if self.drawn else Origin.RUN

    def _with(self, node: cst.With, frame: _Frame) -> None:
        held = len(self._sync_off)
        entered: list[Counting] = []
        grad_off = self._grad_off
        try:
            for item in node.items:
                if isinstance(item.item, cst.Call) and dotted(item.item.func) in NO_GRAD:
                    self._grad_off += 1
                value = self.expression(item.item, frame)
                if isinstance(value, _Entry):
                    entered.append(value.counting)
                    if value.counting.entered_at is not None or value.counting.entry_drawn == self.drawn:
                        self.double_entries.append((frame.owner, node))
                    value = self._count_entry(value.counting)
                if isinstance(value, _SyncOff):
                    self._sync_off.append(value)
                if item.asname is not None:
                    self.assign(item.asname.name, value, frame)
            drawn = self.drawn
            self.block(node.body, frame)
            if entered and self.drawn - drawn > 1:
                self.undecide(f"`{entered[0].driver.enter}()` is entered once around several microbatches: "
                              f"{entered[0].driver.framework} counts one {LEFT_TO_ACC501}")
        finally:
            del self._sync_off[held:]
            self._grad_off = grad_off
            for counting in entered:
                counting.entered_at = None

    def _try(self, node: cst.Try, frame: _Frame) -> None:
        try:
            try:
                self.block(node.body, frame)
            except _Raised as raised:
                handler = next((h for h in node.handlers if _catches(h, raised.name)), None)
                if handler is None:
                    raise
                if handler.name is not None:
                    self.assign(handler.name.name, Unknown(raised.name), frame)
                self.block(handler.body, frame)
            else:
                if node.orelse is not None:
                    self.block(node.orelse.body, frame)
        finally:
            if node.finalbody is not None:
                self.block(node.finalbody.body, frame)

    # --- conditions ---------------------------------------------------------------------------

    def decide(self, test: cst.BaseExpression, frame: _Frame, statement: cst.If | None = None,
               arms: cst.IfExp | None = None) -> bool:
        """The branch a condition takes in this run (see the module docstring); ``arms``: the
        conditional expression whose test it is."""
        value = self.expression(test, frame)
        if not isinstance(value, Unknown):
            if statement is not None and self._gates_update(statement, frame):
                self._literal_gate(test, frame)
            return _truth(value)
        if value.origin is Origin.DATA:
            return self._data_branch(test, statement, frame)
        if value.origin is Origin.CALLER:
            if statement is not None and self._has_event(statement, frame):
                open_values = [v for _, v in self._leaves(test, frame)
                               if isinstance(v, Unknown) and v.origin is Origin.CALLER]
                if open_values and all(v.restored for v in open_values):
                    # (an epoch index counted from a start a checkpoint holds: open in the resumed run only)
                    self.undecide(f"the condition `{_code(test)}` depends on where the resumed run starts "
                                  f"({', '.join(sorted({f'`{v.label}`' for v in open_values if v.label}))}), "
                                  "which a checkpoint holds", resumed=True)
                    return self._main_path(statement)
                labels = ", ".join(sorted({f"`{v.label}`" for v in open_values if v.label}))
                self.undecide(f"the condition `{_code(test)}` depends on {labels or 'a parameter'}, which a caller "
                              "the project does not show computes")
            return self._main_path(statement)
        # a threshold on a count whose only group event is a reset (`if it < cfg.freeze_iters: for p in
        # head.parameters(): p.grad = None`) is a phase of the run, taken as a choice, as an epoch's is
        phase = not value.modulo and statement is not None and self._resets_only(statement, frame)
        if value.varies and not (not value.modulo and self._epoch_threshold(test, frame)) and not phase:
            gate = value.gate - set(self.bindings) if value.gate is not None else frozenset()
            # a cadence (a modulo) gates the update from either branch, or by leaving the iteration
            # before it; a threshold (`count >= accum`) only with the update in a branch
            gating = statement is not None and (self._gates_update(statement, frame) if value.modulo
                                                else self._update_in_branch(statement, frame)
                                                or self._held_until_full(test, statement, frame))
            if gating and gate and self.syntax.trains_inside(statement, frame.owner):  # type: ignore[arg-type]
                # `if time % update_every == 0: learn(buffer)`: a training phase with its own loop over
                # data, backwards and updates runs on that period; the period is not a group's A
                # the run shows one phase, its own groups included, and ends after it (:meth:`_phase`):
                # going on would only spend the budget (an RL driver's episodes of generation between
                # its phases)
                self.phase_gates.append(statement)
                return True
            if gating and gate:
                positions, cadence, known_divisors = self._positions(test, frame, gate)
                if positions and positions != gate:
                    raise NeedBinding(gate - positions)
                if positions and cadence:
                    raise NeedBinding(frozenset(), positions)
                if cadence and not positions and known_divisors:
                    # `(pos + 1 + len(loader) * epoch) % accum` with `accum` bound: what is left open is where
                    # the counter starts (an epoch range from a start the run does not know), not A
                    self.undecide(f"the condition `{_code(test)}` counts from a start the code does not fix "
                                  f"({', '.join(f'`{label}`' for label in sorted(gate))})",
                                  resumed=value.restored)
                    return False
                nearest = self._nearest(test, frame, gate)
                if nearest == gate and self._reads_a(test, frame):
                    # `g - last >= self.accumulate` with A bound, `g` counted from `self.start_epoch`: what is
                    # left open is where the count starts (a resumed run's), not a second A
                    self.undecide(f"the condition `{_code(test)}` counts from a start the code does not fix "
                                  f"({', '.join(f'`{label}`' for label in sorted(gate))})", resumed=value.restored)
                    return False
                raise NeedBinding(nearest)
            if statement is not None and self._decides_group(statement, frame):
                if self._clears_clear_gradients(statement, frame):
                    # `if done % check_every == 0: probe(net); net.zero_grad()` after the update and its reset:
                    # either branch leaves the group as it is
                    return False
                self.undecide(f"the condition `{_code(test)}` varies with a counter and a value the code does not fix")
            elif statement is not None and not self._has_event(statement, frame) \
                    and not any(type(n) in (cst.Call, cst.NamedExpr) for n in walk(test)):
                # `if updates % SAVE_EVERY == 0: save()`: a named constant that gates no event is not A; the
                # code fixes it (an action's cadence, ACC010's)
                fixed = self._with_constants(test, frame)
                if not isinstance(fixed, Unknown):
                    return _truth(fixed)
            elif statement is not None and self._has_event(statement, frame):
                self.note(f"`{_code(test)}` takes its quiet branch (a period the code does not fix; "
                          "what it decides is no backward, update or reset)")
            return False  # logging, evaluation, checkpoints: their quiet branch
        dividend = self._unfixed_dividend(test, frame) \
            if statement is not None and self._gates_update(statement, frame) else None
        if dividend is not None:
            # `step = resumed + 1; ... if step % A == 0:`: where the counter starts decides where every group
            # ends; a run-level choice for its first test would make up a start (and groups of A + 1)
            if dividend.restored:
                self.undecide(f"the condition `{_code(test)}` counts from `{dividend.label}`, where the resumed run "
                              "starts, which a checkpoint holds", resumed=True)
            else:
                self.undecide(f"the condition `{_code(test)}` counts from a start the code does not fix")
            return False
        if statement is not None:
            raises = _ends_in(statement.body, (cst.Raise,))
            if raises != (isinstance(statement.orelse, cst.Else) and _ends_in(statement.orelse.body, (cst.Raise,))):
                # a settings check (`if args.fp16 and not cuda: raise ValueError(...)`): the run that raises
                # trains nothing, so the configuration is the one that goes on, as past a failed `assert`
                return not raises
        key, negated = _choice_key(test)
        if key in self.choices:
            return self.choices[key] != negated
        if statement is not None and not self.syntax.matters(statement, frame.owner):
            return False  # `if args.verbose: print(...)`: either branch leaves the group as it is
        # the condition as written takes False first; a test that A exceeds 1 (`if cfg.accum > 1:`,
        # often met in the set-up before the gate) takes its accumulating side first, or the runs a
        # budget allows all skip the gate and A is never bound; so does the only branch that trains
        # (`if args.do_train: ...` with the loop in it)
        first = _tests_accumulation(test) or statement is not None and self._only_body_trains(statement, frame)
        if not first and statement is not None:
            # a choice of training regime met first in the set-up (`if scaler is None: model.zero_grad()`),
            # or before the test that trains (`if self.is_training: log(...)` above `if self.is_training:
            # loss.backward()`)
            later = self._training_side(key, frame)
            first = later != negated if later is not None else first
        self.choices[key] = first != negated
        self.defaulted.append(key)
        if statement is None or self._has_event(statement, frame):
            self.eventful.add(key)
        node = statement if statement is not None else arms
        if node is None or self._has_event(node, frame) or self.syntax.shapes(node, frame.owner) \
                or reaches_event(node, frame.owner, CLIP_CALLS):  # (`if cfg.max_grad_norm > 0: clip(...)`)
            self.shaping.add(key)
        return first

    def _with_constants(self, test: cst.BaseExpression, frame: _Frame) -> object:
        """``test`` evaluated with the named constants the configuration did not bind at their own
        values, and a period the run does not know (``updates % args.save_every``) at 2 (a test
        without calls: evaluating it again changes nothing). A test on a count that changes only at
        the updates is then true on whole groups, on a count of microbatches never on two
        consecutive microbatches, whatever the period: which is all an action's cadence needs."""
        _CONSTANTS_FIXED[0] = True
        try:
            return self.expression(test, frame)
        finally:
            _CONSTANTS_FIXED[0] = False

    def _epoch_threshold(self, test: cst.BaseExpression, frame: _Frame) -> bool:
        """Whether the counters ``test`` reads are all epoch indices (``epoch < args.start_epoch``):
        a threshold on the epoch is a run-level phase (a resume's fast-forward, a warm-up), taken
        as a choice for the whole run, never a group of microbatches whose size A could be."""
        counted = [leaf for leaf, value in self._leaves(test, frame)
                   if varies(value) and not isinstance(value, Unknown)]
        epochs = self.syntax.epoch_indices(frame.function, frame.owner) if isinstance(
            frame.function, cst.FunctionDef) else frozenset()
        return bool(counted) and all(isinstance(leaf, cst.Name) and leaf.value in epochs for leaf in counted)

    def _only_body_trains(self, statement: cst.If, frame: _Frame) -> bool:
        """Whether the body of ``statement`` reaches a backward and its ``else`` (if any) does not."""
        orelse = statement.orelse
        return self._reaches_backward(statement.body, frame) and not (
            orelse is not None and self._reaches_backward(orelse, frame))

    def _training_side(self, key: str, frame: _Frame) -> bool | None:
        """The value of the choice ``key`` under which its function trains, where a test of it there
        has one branch only that reaches a backward (``if scaler is None: model.backward(loss)`` with a
        call the run cannot follow in the ``else``); None where no test of it says. A choice of training
        regime met first in the set-up (``if scaler is None: model.zero_grad()``, a training event in a
        branch) then takes its training side first, so that the few runs ``check`` makes still reach the
        backward the code writes (the other side is run after it, where the runs allow)."""
        function = frame.function
        if not isinstance(function, cst.FunctionDef):
            return None
        for statement in _choice_tests(function).get(key, ()):
            _, negated = _choice_key(statement.test)
            orelse = statement.orelse.body if isinstance(statement.orelse, cst.Else) else None
            body = self._reaches_backward(statement.body, frame)
            other = orelse is not None and self._reaches_backward(orelse, frame)
            if body != other:
                return body != negated
        return None

    def _held_until_full(self, test: cst.BaseExpression, statement: cst.If, frame: _Frame) -> bool:
        """``if len(held) < A: continue`` before the update, ``held`` a list the loop appends each
        microbatch to and empties at the update: the microbatches are held until a group is full,
        then backpropagated and applied (a threshold on a count the update resets, not a warm-up)."""
        if not (type(test) is cst.Comparison and type(test.left) is cst.Call and dotted(test.left.func) == "len"
                and len(test.left.args) == 1 and type(test.left.args[0].value) is cst.Name
                and _leaves_iteration(statement.body) and self.syntax.update_follows(statement, frame.owner)):
            return False
        if not self._iteration_loops:
            return False
        held = test.left.args[0].value.value
        nodes = list(walk(self._iteration_loops[-1]))
        appended = any(type(n) is cst.Call and type(n.func) is cst.Attribute and n.func.attr.value == "append"
                       and type(n.func.value) is cst.Name and n.func.value.value == held for n in nodes)
        emptied = any(type(n) is cst.Assign and len(n.targets) == 1 and type(n.targets[0].target) is cst.Name
                      and n.targets[0].target.value == held and type(n.value) is cst.List and not n.value.elements
                      or type(n) is cst.Call and type(n.func) is cst.Attribute and n.func.attr.value == "clear"
                      and type(n.func.value) is cst.Name and n.func.value.value == held for n in nodes)
        return appended and emptied

    def _update_in_branch(self, statement: cst.If, frame: _Frame) -> bool:
        return self.syntax.has_update(statement.body, frame.owner) or (
            isinstance(statement.orelse, cst.Else) and self.syntax.has_update(statement.orelse.body, frame.owner)) \
            or self._instance_update(statement, frame)

    def _data_branch(self, test: cst.BaseExpression, statement: cst.If | None, frame: _Frame) -> bool:
        """The main path of a condition on the microbatch's data. A branch that leaves the
        iteration before any event of it is a skipped microbatch (a shorter epoch): the main path
        is the other; a check of finiteness (a NaN/inf guard) takes its finite branch. Anything else
        that decides an event is a choice the code leaves open."""
        self.data_conditions += 1
        finite = _finite_branch(test)
        if finite is not None:  # `if not torch.isfinite(norm): skip`: the exceptional path is not the main one
            return finite
        if statement is not None:
            # a branch that first asserts what this configuration contradicts (`assert accum == 1` before
            # rescaling the gradients by a multiplier of the batch): no microbatch of a run that completes
            # takes it, so the data's path is the other one, and the code leaves it no choice
            body = self._asserted_away(statement.body, frame)
            orelse = isinstance(statement.orelse, cst.Else) and self._asserted_away(statement.orelse.body, frame)
            if body != orelse:
                return orelse
        if statement is not None and self._retries(statement, frame):
            # `while True:` around one microbatch's forward, left by `break` once its loss is good: the
            # way out is the main path, each pass again over the same microbatch the exceptional one
            return _ends_in(statement.body, (cst.Break,))
        trains = self._skips_its_backward(statement, frame) if statement is not None else None
        if trains is not None:
            return trains
        branch = self._main_path(statement)
        if statement is None or _ends_in(statement.body, (cst.Raise,)) or (
                isinstance(statement.orelse, cst.Else) and _ends_in(statement.orelse.body, (cst.Raise,))):
            return branch  # (`if not loss.requires_grad: raise ...`: the run stops, it chooses no event)
        # (a `return` in a helper the loop calls leaves the helper, not the loop's iteration; outside
        # every loop, one in a helper of the entry leaves that helper, not the entry)
        own = (self._iteration_depths[-1] if self._iteration_depths else 0) == len(self._stack)
        skipping = _leaves_iteration(statement.body, own) or (
            isinstance(statement.orelse, cst.Else) and _leaves_iteration(statement.orelse.body, own))
        # (before the microbatch's backward: only forwards, if anything, ran in this iteration, and the
        # steps of objects that are no optimizer: an environment's `obs, reward, done = env.step(action)`)
        harmless = skipping and all(
            e.forward or e.method == "step" and type(e.node) is cst.Call and _foreign_step(e.node, "step", e.owner)
            for e in self.events[self._iteration_starts[-1] if self._iteration_starts else 0:])
        if not harmless and (skipping or self._has_event(statement, frame)):
            self.undecide(f"the condition `{_code(test)}` on the microbatch's data decides an event")
        return branch

    def _skips_its_backward(self, statement: cst.If, frame: _Frame) -> bool | None:
        """The branch of a data condition that trains, where only one branch reaches a backward and
        the other runs no training event (``if not has_inf_or_nan(loss): backward ... else: print(...)``):
        the other skips the microbatch's backward, the exceptional path. None: no such branch."""
        orelse = statement.orelse.body if isinstance(statement.orelse, cst.Else) else statement.orelse
        body = self._reaches_backward(statement.body, frame)
        if body == (orelse is not None and self._reaches_backward(orelse, frame)):
            return None
        idle = orelse if body else statement.body
        return body if idle is None or not self._has_event(idle, frame) else None

    def _retries(self, statement: cst.If, frame: _Frame) -> bool:
        """Whether ``statement`` is written in the body of a ``while True:`` of this frame that draws
        no data (a retry loop inside the microbatch's iteration) and exactly one of its branches ends
        in ``break``."""
        if not self._iteration_loops or self._iteration_depths[-1] != len(self._stack):
            return False
        loop = self._iteration_loops[-1]
        if not isinstance(loop, cst.While) or self.expression(loop.test, frame) is not True \
                or self.syntax.draws_data(loop.body, frame.owner):
            return False
        orelse = statement.orelse.body if isinstance(statement.orelse, cst.Else) else None
        return _ends_in(statement.body, (cst.Break,)) != (orelse is not None and _ends_in(orelse, (cst.Break,)))

    def _asserted_away(self, block: cst.BaseSuite, frame: _Frame) -> bool:
        """Whether ``block`` begins with an ``assert`` that is false in this run (its test evaluated
        where it calls nothing, so that the look runs no code); the asserts after a call are not read."""
        for line in block.body:
            if type(line) is not cst.SimpleStatementLine or not all(type(s) is cst.Assert for s in line.body):
                return False
            for small in line.body:
                test = small.test  # type: ignore[attr-defined]
                if any(type(n) is cst.Call for n in walk(test)):
                    return False
                if self.expression(test, frame) is False:
                    return True
        return False

    def _main_path(self, statement: cst.If | None) -> bool:
        if statement is None:
            return True
        orelse = statement.orelse.body if isinstance(statement.orelse, cst.Else) else None
        if _leaves_iteration(statement.body) and (orelse is None or not _leaves_iteration(orelse)):
            return False
        return True

    def _literal_gate(self, test: cst.BaseExpression, frame: _Frame) -> None:
        """Record the literal divisor of a cadence that gates the update: in the condition
        (``(i + 1) % 4 == 0``) or in what the same function assigns to a name it reads
        (``is_accumulating = i % 4 != 0`` ... ``if not is_accumulating``)."""
        pending, read = [test], set()
        while pending:
            for node in walk(pending.pop()):
                if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Modulo) \
                        and isinstance(node.right, cst.Integer) and int(node.right.evaluated_value) > 1:
                    self.literal_gates.append(int(node.right.evaluated_value))
                elif isinstance(node, cst.Name) and node.value not in read and len(read) < _FLAG_NAMES:
                    read.add(node.value)
                    function = frame.function if isinstance(frame.function, cst.FunctionDef) else None
                    pending.extend(frame.owner.values_assigned(function, node.value))

    def _leaves(self, test: cst.BaseExpression, frame: _Frame) -> list[tuple[cst.CSTNode, object]]:
        """The dotted names a condition reads, with their values (no call is evaluated again)."""
        leaves = []
        for node in self.syntax.leaf_nodes(test):
            try:
                leaves.append((node, self.expression(node, frame)))
            except (_Raised, EndOfRun):
                continue
        return leaves

    def _positions(self, test: cst.BaseExpression, frame: _Frame,
                   gate: frozenset[str]) -> tuple[frozenset[str], bool, bool]:
        """The gate's symbols that the condition only sets equal to something (``i + 1 == self.n``),
        never divides by; whether it divides by a symbol already bound to A (``(i + 1) % accum``):
        beside that cadence, they are a position in the epoch; and whether every divisor is a
        number the run knows (no unknown read, no call): what the test leaves open is then in
        the dividends."""
        equal: set[int] = set()
        divisors: set[int] = set()
        called = False
        for node in walk(test):
            if isinstance(node, cst.Comparison) and all(isinstance(c.operator, cst.Equal) for c in node.comparisons):
                for side in (node.left, *(c.comparator for c in node.comparisons)):
                    equal.update(id(n) for n in walk(side))
            elif isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Modulo):
                inside = list(walk(node.right))
                divisors.update(id(n) for n in inside)
                called = called or any(isinstance(n, cst.Call) for n in inside)
        leaves = self._leaves(test, frame)
        divided = {label_text(value) for leaf, value in leaves if id(leaf) in divisors}
        found = {label_text(value) for leaf, value in leaves
                 if isinstance(value, (Unknown, LabeledInt)) and id(leaf) in equal}
        cadence = any(id(leaf) in divisors and isinstance(value, LabeledInt) and value.bound for leaf, value in leaves)
        known = bool(divisors) and not called and not any(
            id(leaf) in divisors and isinstance(value, Unknown) for leaf, value in leaves)
        return frozenset(found & gate) - divided, cadence, known

    def _unfixed_dividend(self, test: cst.BaseExpression, frame: _Frame) -> Unknown | None:
        """The value the run does not know that ``test`` takes modulo A bound by the configuration
        (``step % accum`` with ``step = restore_step + 1``): a counter whose start the code leaves
        open; None where there is none."""
        for node in walk(test):
            if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Modulo):
                dividend, divisor = self.expression(node.left, frame), self.expression(node.right, frame)
                if isinstance(dividend, Unknown) and dividend.origin is Origin.RUN and not dividend.varies \
                        and isinstance(divisor, LabeledInt) and divisor.bound:
                    return dividend
        return None

    def _nearest(self, test: cst.BaseExpression, frame: _Frame, gate: frozenset[str]) -> frozenset[str]:
        """The gate's symbols that the condition reads by name (``ni - last >= accumulate``:
        ``accumulate``, not the batch size it was computed from), else all of them."""
        read = frozenset(label_text(value) for _, value in self._leaves(test, frame)
                         if isinstance(value, (Unknown, LabeledInt))) & gate
        return read or gate

    def _reads_a(self, test: cst.BaseExpression, frame: _Frame) -> bool:
        """Whether the condition reads, by name, a symbol the configuration bound to A."""
        return any(isinstance(value, LabeledInt) and value.bound for _, value in self._leaves(test, frame))

    def _gates_update(self, statement: cst.If, frame: _Frame) -> bool:
        """Whether the ``if`` decides an optimizer update: one runs in a branch, or a branch
        leaves the iteration before the update that follows."""
        return self.syntax.has_update(statement, frame.owner) or (
            _leaves_iteration(statement.body) and self.syntax.update_follows(statement, frame.owner)) \
            or self._instance_update(statement, frame)

    def _instance_update(self, node: cst.CSTNode, frame: _Frame) -> bool:
        """Whether ``node`` calls a method of a project instance the run holds whose code updates
        (``optimizer.step_and_update_lr()`` on a wrapper that a project function of another module
        built from a class this module never names): the run knows the object where the names do not."""
        for receiver, method in self.syntax.method_calls(node):
            value = frame.names.get(receiver)
            if isinstance(value, Obj) and value.class_def is not None and value.owner is not None:
                found = value.owner.method(value.class_def, method)
                if found is not None and self.syntax.has_update(found[0].body, found[1]):
                    return True
        return False

    def _decides_group(self, node: cst.CSTNode, frame: _Frame) -> bool:
        """Whether ``node`` performs an event of the group's structure: a backward, an optimizer
        update or a gradient reset (not a scheduler step, an evaluation forward, a log)."""
        return self._reaches_backward(node, frame) or self.syntax.has_update(node, frame.owner) \
            or self.syntax.resets(node)

    def _resets_only(self, node: cst.CSTNode, frame: _Frame) -> bool:
        """Whether the only group event ``node`` performs is a gradient reset."""
        return self.syntax.resets(node) and not self._reaches_backward(node, frame) \
            and not self.syntax.has_update(node, frame.owner)

    def _clears_clear_gradients(self, node: cst.CSTNode, frame: _Frame) -> bool:
        """Whether the only group event ``node`` performs is a gradient reset, while no backward
        has run since the run's last reset (or its start): the reset changes nothing."""
        if not self._resets_only(node, frame):
            return False
        for event in reversed(self.events):
            if event.method in BACKWARD_CALLS:
                return False
            if event.method in _RESET_METHODS:
                return True
        return True

    def _has_event(self, node: cst.CSTNode, frame: _Frame) -> bool:
        """Whether ``node`` performs a training event, a gradient reset included."""
        return self._reaches_event(node, frame) or self.syntax.resets(node)

    def _reaches_event(self, node: cst.CSTNode, frame: _Frame) -> bool:
        return self.syntax.reaches_event(node, frame.owner) or self._handed_reach(node, frame, EVENT_NAMES)

    def _reaches_backward(self, node: cst.CSTNode, frame: _Frame) -> bool:
        return self.syntax.reaches_backward(node, frame.owner) or self._handed_reach(node, frame, BACKWARD_NAMES)

    def _handed_reach(self, node: cst.CSTNode, frame: _Frame, names: frozenset[str]) -> bool:
        """Whether ``node`` reaches one of ``names`` through a method of a project class's instance
        that ``frame`` holds, where the code alone does not show the class: a parameter handed one by
        a caller in another module (``loss_scaler(loss, optimizer, update_grad=...)`` in an epoch
        function that a script calls with ``NativeScaler()``)."""
        handed = set()
        for call in _calls(node):
            root = call.func.value if type(call.func) is cst.Attribute else call.func
            value = frame.names.get(root.value) if type(root) is cst.Name else None
            if isinstance(value, Obj) and value.class_def is not None and value.owner is not None:
                handed.add((root.value, ((value.owner, value.class_def),)))
        return bool(handed) and _reaches(node, frame.owner, 0, set(), names, frozenset(handed))

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def undecide(self, text: str, resumed: bool = False) -> None:
        """Leave the run undecided for the reason ``text``; ``resumed``: only because it reads where a
        resumed run starts (:attr:`~accumlint.model.values.Unknown.restored`), which its fresh twin
        does not (:attr:`resumed_open`)."""
        if text not in self.undecided:
            self.undecided.append(text)
        if resumed:
            self.resumed_open.add(text)

    # --- expressions --------------------------------------------------------------------------

    def expression(self, node: cst.BaseExpression, frame: _Frame) -> object:
        kind = type(node)
        if kind is cst.Name:
            return self._name(node.value, frame)
        if kind is cst.Integer:
            return Literal(node.evaluated_value)
        if kind is cst.Float:
            return LiteralFloat(node.evaluated_value)
        if kind is cst.Attribute:
            owner = self.expression(node.value, frame)
            first = self._first_count(owner, node.attr.value, frame)
            value = first if first is not None else self._attribute(owner, node.attr.value, node)
            if node.attr.value in fw.NO_SYNC_METHODS and label_text(value):  # `cm = model.no_sync if ...`: called later
                self._no_sync_named[label_text(value)] = (frame.owner, node)
            return value
        if kind is cst.Call:
            return self._call(node, frame)
        if kind is cst.Yield and self._yields and node.value is None:
            self._yields[-1] += 1  # a bare `yield` of a generator run for its count (:meth:`_yielded`)
            return None
        if kind is cst.BinaryOperation:
            left = self.expression(node.left, frame)
            right = self.expression(node.right, frame)
            value = _binary(type(node.operator).__name__, left, right, _code(node))
            if isinstance(value, Unknown) and value.label in self.bindings and value.gate is None:
                # `range((batch - 1) // micro + 1)` around the backward: the count computed from run-level
                # sizes is what the configuration bound to A
                return self._bound(value.label, None)
            return value
        if kind is cst.UnaryOperation:
            operand = self.expression(node.expression, frame)
            if isinstance(operand, Unknown):
                return combined([operand], _code(node))
            operator = type(node.operator).__name__
            try:
                result = {"Not": lambda v: not _truth(v), "Minus": lambda v: -v, "Plus": lambda v: +v,
                          "BitInvert": lambda v: ~v}[operator](operand)
            except (TypeError, KeyError):
                return Unknown(_code(node))
            return Literal(result) if isinstance(operand, Literal) and operator != "Not" else result  # `-1`
        if kind is cst.BooleanOperation:
            return self._boolean(node, frame)
        if kind is cst.Comparison:
            return self._comparison(node, frame)
        if kind is cst.IfExp:
            return self.expression(node.body if self.decide(node.test, frame, arms=node) else node.orelse, frame)
        if kind in (cst.SimpleString, cst.ConcatenatedString):
            value = node.evaluated_value
            return value if isinstance(value, str) else Unknown(_code(node))
        if kind is cst.FormattedString:
            return Unknown("a formatted string")
        if kind in (cst.Tuple, cst.List):
            if any(isinstance(e, cst.StarredElement) for e in node.elements):
                return Unknown(_code(node))
            items = [self.expression(e.value, frame) for e in node.elements]
            return tuple(items) if kind is cst.Tuple else items
        if kind is cst.Dict:
            result: dict = {}
            for element in node.elements:
                if not isinstance(element, cst.DictElement):
                    return Unknown(_code(node))
                key = self.expression(element.key, frame)
                value = self.expression(element.value, frame)
                if isinstance(key, (str, int)):
                    result[key] = value
            return result
        if kind is cst.Subscript:
            return self._subscript(node, frame)
        if kind is cst.Lambda:
            return Function(node, frame.owner, None, None, dict(frame.names))
        if kind is cst.NamedExpr:
            value = self.expression(node.value, frame)
            self.assign(node.target, value, frame)
            return value
        if kind is cst.Await:
            return self.expression(node.expression, frame)
        if kind in (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp):
            if self._reaches_event(node, frame):
                return self._comprehension(node, frame)
            iterable = self.expression(node.for_in.iter, frame)
            return Unknown(_code(node), Origin.DATA if is_data(iterable) else Origin.RUN)
        if kind is cst.Ellipsis:
            return ...
        return Unknown(_code(node))

    def _name(self, name: str, frame: _Frame) -> object:
        if name in frame.names:
            return frame.names[name]
        if frame.function is not None:
            globals_ = self._module_names(frame.owner)
            if name in globals_:
                return globals_[name]
        if name in ("True", "False", "None"):
            return {"True": True, "False": False, "None": None}[name]
        return self._module_name(frame.owner, name)

    def _module_names(self, owner: ModuleFunctions) -> dict[str, object]:
        found = self._globals.get(id(owner))
        if found is None:
            found = self._globals[id(owner)] = {}
        return found

    def _module_name(self, owner: ModuleFunctions, name: str) -> object:
        """A name the module defines at its top level: a function, a class, a constant, an import."""
        if name in owner.functions and owner.class_of.get(owner.functions[name]) is None \
                and owner.enclosing.get(owner.functions[name]) is None:
            return Function(owner.functions[name], owner)
        if name in owner.classes:
            return ProjectClass(owner.classes[name], owner)
        imported = owner.imported(name, any_module=name in owner.base_names)  # (`Base.__init__(self, ...)`)
        if imported is not None:
            found_owner, definition = imported
            if isinstance(definition, cst.ClassDef):
                return ProjectClass(definition, found_owner)
            return Function(definition, found_owner)
        qualified = owner.imports.qualify(name)
        if qualified is not None:
            return Unknown(qualified)
        value = owner.module_value(name)
        if isinstance(value, cst.Integer):
            number = int(value.evaluated_value)
            return self._bound(name, number)
        if isinstance(value, (cst.Float, cst.SimpleString)):
            return value.evaluated_value
        return self._bound(name, None)

    def _bound(self, label: str, number: int | None, restored: bool = False) -> object:
        """The run-level value named ``label``: N or A where the configuration binds it, a named
        constant where ``number`` is given, else an unknown (``restored``: read from a checkpoint)."""
        if label in self.lengths:
            return self.configuration.microbatches  # as `len(loader)` is
        if label in self.bindings:
            return LabeledInt(self.bindings[label], label, bound=True)
        if number is not None:
            return LabeledInt(number, label)
        return Unknown(label, Origin.RUN, frozenset({label}), restored=restored or label in self._checkpoint_paths)

    def _attribute(self, owner: object, name: str, node: cst.CSTNode) -> object:
        if isinstance(owner, Obj):
            if name in owner.attrs:
                return owner.attrs[name]
            if owner.class_def is not None and owner.owner is not None:
                found = owner.owner.method(owner.class_def, name)
                if found is not None:
                    definition, method_owner, class_def = found
                    if _is_property(definition):
                        return self._call_function(Function(definition, method_owner, class_def, owner), [owner], {},
                                                   node, method_owner)
                    return Function(definition, method_owner, class_def, owner)
                inherited = owned_loops.base_method(owner.owner, owner.class_def, name)
                if inherited is not None:  # a framework base class's method (mmcv's `every_n_iters`, HF's
                    # `training_step`)
                    return Function(inherited[0], inherited[1], None, owner)
            # (a number the class sets is no method: `state.step`)
            fixed = self._set_by_methods(owner, name)
            if fixed is not None:
                return fixed
            declared = self._declared_instance(owner, name)
            if declared is not None:
                return declared
            default = _class_default(owner.owner, owner.class_def, name) if owner.class_def is not None \
                and owner.owner is not None else None
            if default is not None:  # what the instance reads until it writes its own (a dataclass field's
                # default, as its `__init__` sets it)
                return self._class_value(*default, f"{owner.label}.{name}" if owner.label else name)
            if name in EVENT_METHODS:
                return BoundMethod(owner, name, f"{owner.label}.{name}")
            return self._bound(f"{owner.label}.{name}", None) if owner.label else Unknown(name)
        if name == "grad":  # a parameter's gradient: whether it is None depends on the backwards run so far
            return Unknown(f"{label_text(owner)}.grad", Origin.DATA)
        if isinstance(owner, Unknown):
            label = f"{owner.label}.{name}" if owner.label else name
            if label in self._stored:
                return self._stored[label]
            options = self._options.get(id(owner))
            if options is not None and name in options[1]:  # `args.accum` of a parsed command line: its default
                return self._bound(label, options[1][name])
            if name in _COUNTED_FLAGS and owner.origin is not Origin.DATA:
                self.undecide(f"`{label}` is the boundary flag of an object built where the run cannot see")
            kept = owner.feeds is None or self._holds(owner)  # (`batch.obs` of `batch = replay.sample()`)
            if owner.origin is Origin.RUN:
                value = self._bound(label, None, owner.restored)
                if kept and isinstance(value, Unknown):
                    value.feeds = None
                return value
            return Unknown(label, owner.origin, restored=owner.restored, feeds=None if kept else owner.feeds)
        if isinstance(owner, ProjectClass):
            return self._class_attribute(owner, name)
        if isinstance(owner, dict):
            return Unknown(name)
        if isinstance(owner, LabeledInt):
            return Unknown(f"{owner.label}.{name}")
        return Unknown(name)

    def _set_by_methods(self, instance: Obj, name: str) -> object:
        """``self.<name>`` of a project instance that the run has not written: the whole number
        that every write of its class and bases sets (a ``setup`` that the caller runs before the
        loop method writes ``self.first_update = 0``; read before any write, Python would raise), as
        a named constant; None where a write sets anything else (a resumed offset) or none shows."""
        if instance.class_def is None or instance.owner is None:
            return None
        numbers = set()
        for owner, class_def in instance.owner.lineage(instance.class_def):
            fixed = owner.fixed_attribute(class_def, name)
            if fixed is None:
                return None
            if fixed is not False:
                numbers.add(fixed)
        if len(numbers) != 1:
            return None
        label = f"{instance.label}.{name}" if instance.label else name
        self.note(f"`{label}` is taken as {next(iter(numbers))}, what every method of its class that writes it sets")
        return self._bound(label, next(iter(numbers)))

    def _declared_instance(self, instance: Obj, name: str) -> Obj | None:
        """``self.<name>`` of a project instance that the run has not written, where the methods of
        its class store there only a parameter annotated with a project class (``def setup(self,
        strategy: EngineStrategy): self.strategy = strategy``, a loop method run alone): an
        instance of that class, kept on the instance, whose methods the run follows. None for a
        library class or where the writes disagree."""
        if instance.class_def is None or instance.owner is None:
            return None
        for module, class_def in instance.owner.lineage(instance.class_def):
            declared = module.declared_attribute(class_def, name)
            located = module.class_named(declared) if declared else None
            if located is not None:
                found = Obj(self._class_role(*located), "the class its setter's parameter declares",
                            f"{instance.label}.{name}", located[1], located[0])
                instance.attrs[name] = found
                return found
        return None

    def _class_attribute(self, owner: ProjectClass, name: str) -> object:
        """``Settings.accum``: a class-level constant (rebindable to A) or a function of the class."""
        found = owner.owner.method(owner.class_def, name)
        if found is not None:
            return Function(found[0], found[1], found[2])
        label = f"{owner.class_def.name.value}.{name}"
        default = _class_default(owner.owner, owner.class_def, name)
        return self._class_value(*default, label) if default is not None else self._bound(label, None)

    def _class_value(self, value: cst.BaseExpression, module: ModuleFunctions, label: str) -> object:
        """A class-level value (:func:`_class_default`): a whole number as a named constant (rebindable
        to A), else what the expression gives in its module."""
        if isinstance(value, cst.Integer):
            return self._bound(label, int(value.evaluated_value))
        return self.expression(value, _Frame(module, {}))

    def _subscript(self, node: cst.Subscript, frame: _Frame) -> object:
        base = self.expression(node.value, frame)
        if len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Slice) and _is_loader(base):
            view = self._group_slice(base, node.slice[0].slice, frame)
            if view is not None:
                return view
        if isinstance(base, _Iteration) and base.kind == "group":
            self.undecide(f"`{_code(node)}` takes a group's microbatches by position: which microbatch each is, "
                          "the run does not follow")
            return Unknown(_code(node), Origin.DATA)
        if len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index):
            index = self.expression(node.slice[0].slice.value, frame)
            if isinstance(base, (list, tuple, dict, str)) and isinstance(index, (int, str)):
                try:
                    return base[index]  # type: ignore[index]
                except (IndexError, KeyError, TypeError):
                    return Unknown(_code(node))
            stored = _item_label(base.label, index) if isinstance(base, Unknown) else None
            if stored in self._stored:
                return self._stored[stored]
            first = self._first_count(base, index, frame, subscript=True) if isinstance(index, str) else None
            if first is not None:
                return first
            if isinstance(base, Unknown) and isinstance(index, (int, str)) and base.origin is Origin.RUN:
                return self._bound(_item_label(base.label, index), None, base.restored)
        origin = base.origin if isinstance(base, Unknown) else Origin.RUN
        return Unknown(_code(node), origin, restored=is_restored(base), feeds=fed_by([base]))

    def _group_slice(self, data: object, part: cst.Slice, frame: _Frame) -> _Iteration | None:
        """``batches[start:start + A]`` of the epoch's microbatches (``batches = list(loader)``):
        the next ``stop - start`` microbatches of one pass over the data, which goes on from slice
        to slice and ends with the loop over the groups that made it (a new pass each epoch)."""
        bounds = [self.expression(b, frame) if b is not None else d
                  for b, d in ((part.lower, 0), (part.upper, None))]
        if part.step is not None or not all(isinstance(b, int) and not isinstance(b, bool) for b in bounds):
            return None
        key = label_text(data)
        loader = self._slices.get(key)
        if loader is None or loader.done:
            loader = self._slices[key] = self._fresh_pass(data, f"an item of {key}")
        return _Iteration(self, "group", loader, max(bounds[1] - bounds[0], 0))  # type: ignore[operator]

    def _boolean(self, node: cst.BooleanOperation, frame: _Frame) -> object:
        left = self.expression(node.left, frame)
        is_and = isinstance(node.operator, cst.And)
        if not isinstance(left, Unknown):
            if _truth(left) != is_and:
                return left
            return self.expression(node.right, frame)
        right = self.expression(node.right, frame)
        # `cfg.eval_during_training and updates % cfg.eval_every == 0`: the setting is a choice of the
        # run, the count's test the microbatch's; merged, the count's cadence would be lost
        setting = left.origin is Origin.RUN and not left.varies \
            and not any(type(n) is cst.Call for n in walk(node.left))
        if not isinstance(right, Unknown):
            if _truth(right) != is_and:
                return right  # `unknown or True` is true, `unknown and False` false
            if setting and _CONSTANTS_FIXED[0]:
                return self.decide(node.left, frame)  # (the count's test at a fixed period: the setting decides)
            return left
        if setting and right.varies and right.modulo:  # (a cadence; a threshold stays one choice with it)
            return right if self.decide(node.left, frame) == is_and else not is_and
        return combined([left, right], _code(node))

    def _comparison(self, node: cst.Comparison, frame: _Frame) -> object:
        left = self.expression(node.left, frame)
        result: object = True
        for target in node.comparisons:
            right = self.expression(target.comparator, frame)
            operator = type(target.operator).__name__
            if operator in ("Is", "IsNot") and None in (left, right) and any(
                    isinstance(v, Unknown) and v.origin is Origin.DATA and (v.label or "").endswith(".grad")
                    for v in (left, right)):
                # `p.grad is not None` in a loop over parameters: the gradient a backward left; where
                # none did, the branch it guards (a reset, a clip) changes nothing
                value: object = operator == "IsNot"
            elif operator in ("Is", "IsNot") and None in (left, right) and any(
                    id(v) in self._items and self._items[id(v)] is v for v in (left, right)):
                value = operator == "IsNot"  # `batch is None` after `next(it, None)`: the pass's end, not a batch
            else:
                value = _compare(operator, left, right, _code(node))
            if isinstance(value, Unknown):
                return value
            if not value:
                return False
            result = value
            left = right
        return result

    # --- calls --------------------------------------------------------------------------------

    def _call(self, node: cst.Call, frame: _Frame) -> object:
        func = node.func
        if type(func) is not cst.Attribute:
            callee = self.expression(func, frame)
            args, kwargs = self._arguments(node, frame)
            return self._call_value(callee, args, kwargs, node, frame)
        method = func.attr.value
        if type(func.value) is cst.Call and dotted(func.value.func) == "super":
            return self._super(method, node, frame)
        receiver = self.expression(func.value, frame)
        args, kwargs = self._arguments(node, frame)
        if isinstance(receiver, Obj):
            if method in receiver.attrs:
                return self._call_value(receiver.attrs[method], args, kwargs, node, frame)
            if receiver.class_def is not None:
                callee = self._attribute(receiver, method, func)
                if isinstance(callee, Function) and receiver.role in _LIBRARY_EVENT_ROLES and method in EVENT_METHODS \
                        and not _delegates(callee.definition, method):
                    # `class WarmupAdam(torch.optim.Optimizer)` with its own `step()`: its update, not code to run
                    return self._method(receiver, method, args, kwargs, node, frame)
                if isinstance(callee, Function):
                    return self._call_function(callee, args, kwargs, node, frame.owner)
        elif isinstance(receiver, ProjectClass):
            found = receiver.owner.method(receiver.class_def, method)
            if found is not None:
                return self._call_function(Function(found[0], found[1], found[2]), args, kwargs, node, frame.owner)
            return Unknown(_code(node))
        elif isinstance(receiver, Unknown) and receiver.origin is Origin.RUN and receiver.label \
                and "(" not in receiver.label \
                and (_is_imported(receiver.label, frame.owner) or _is_imported(dotted(func) or "", frame.owner)):
            # (a module's function; not a method of what one returned: `torch.stack(losses).mean().backward()`)
            local = dotted(func)
            imported = frame.owner.imported(local) if local else None  # `import utils as u; u.helper()`
            if imported is not None:
                found_owner, definition = imported
                callee = ProjectClass(definition, found_owner) if isinstance(definition, cst.ClassDef) \
                    else Function(definition, found_owner)
                return self._call_value(callee, args, kwargs, node, frame)
            helper = self._helper_taking_data(f"{receiver.label}.{method}", args, kwargs, frame.owner)
            if helper is not None:  # `objectives.compute(net, x, y)`
                return self._call_function(helper, args, kwargs, node, frame.owner)
            relay = self._relay(f"{receiver.label}.{method}", args, kwargs, frame.owner)
            if relay is not None:  # `kl_controller.make(args, accelerator)`
                return self._call_value(relay, args, kwargs, node, frame)
            # `torch.nn.utils.clip_grad_norm_(...)`, `optim.AdamW(...)`: a library function
            return self._library_call(Unknown(f"{receiver.label}.{method}"), args, kwargs, node, frame)
        value = self._method(receiver, method, args, kwargs, node, frame)
        if method in stdlib.PARSE_OPTIONS and isinstance(value, Unknown) and frame.owner.option_defaults():
            self._options[id(value)] = (value, frame.owner.option_defaults())
        return value

    def _super(self, method: str, node: cst.Call, frame: _Frame) -> object:
        """``super().method(...)``: the method of the first base that defines it, on the same ``self``."""
        args, kwargs = self._arguments(node, frame)
        function = frame.function
        if frame.class_def is None or not isinstance(function, cst.FunctionDef) or not function.params.params:
            return Unknown(_code(node))
        found = frame.owner.method(frame.class_def, method, skip_own=True)
        if found is None:
            return Unknown(_code(node))
        definition, owner, class_def = found
        receiver = frame.names.get(function.params.params[0].name.value)
        return self._call_function(Function(definition, owner, class_def, receiver), args, kwargs, node, frame.owner)

    def _arguments(self, node: cst.Call, frame: _Frame) -> tuple[list[object], dict[str, object]]:
        args: list[object] = []
        kwargs: dict[str, object] = {}
        for arg in node.args:
            value = self.expression(arg.value, frame)
            if arg.star:
                if arg.star == "*" and isinstance(value, (list, tuple)):
                    args.extend(value)
                elif arg.star == "**" and isinstance(value, dict):
                    kwargs.update({str(k): v for k, v in value.items()})
                continue
            if arg.keyword is not None:
                kwargs[arg.keyword.value] = value
            else:
                args.append(value)
        return args, kwargs

    def _call_value(self, callee: object, args: list[object], kwargs: dict[str, object], node: cst.Call,
                    frame: _Frame) -> object:
        if isinstance(callee, Function):
            return self._call_function(callee, args, kwargs, node, frame.owner)
        if isinstance(callee, ProjectClass):
            return self._construct(callee, args, kwargs, node)
        if isinstance(callee, BoundMethod):
            return self._method(callee.receiver, callee.name, args, kwargs, node, frame)
        if isinstance(callee, Obj):
            call = callee.owner.method(callee.class_def, "__call__") \
                if callee.class_def is not None and callee.owner is not None else None
            if call is not None:  # `loss_scaler(loss, optimizer, update_grad=...)`: its `__call__`
                definition, call_owner, call_class = call
                return self._call_function(Function(definition, call_owner, call_class, callee), args, kwargs, node,
                                           frame.owner)
            if callee.role in FORWARD_ROLES or callee.role is Role.UNKNOWN and callee.class_def is not None:
                self._record("forward", callee, args[0] if args else None, node, frame, forward=True)
                return self._forward_output(callee, args, kwargs)
            return Unknown(f"{callee.label}(...)", _combined(args, kwargs))
        if isinstance(callee, Unknown):
            if callee.origin is Origin.RUN and (_named_role(callee.label) in FORWARD_ROLES
                                                or callee.label in self.syntax.trained(frame.owner)) and \
                    _combined(args, kwargs) is not Origin.RUN:
                self._record("forward", callee, args[0] if args else None, node, frame, forward=True)
                return self._forward_output(callee, args, kwargs)
            helper = self._helper_taking_data(callee.label, args, kwargs, frame.owner) \
                if callee.origin is Origin.RUN else None
            if helper is not None:  # `loss = compute_loss(net, x, y, accum)` of `losses.py`
                return self._call_function(helper, args, kwargs, node, frame.owner)
            relay = self._relay(callee.label, args, kwargs, frame.owner) if callee.origin is Origin.RUN else None
            if relay is not None:  # `Relay(net, Stepper(...))` of `relay.py`, which calls no backward itself
                return self._call_value(relay, args, kwargs, node, frame)
            return self._library_call(callee, args, kwargs, node, frame)
        return Unknown(_code(node.func), _combined(args, kwargs), feeds=fed_by([*args, *kwargs.values()]))

    def _relay(self, qualified: str | None, args: list[object], kwargs: dict[str, object],
               owner: ModuleFunctions) -> Function | ProjectClass | None:
        """The project function or class that ``qualified`` (an imported name) names, in a module
        that performs no training event itself (the project index does not follow it), where the
        call hands it an instance of a project class whose code performs events (a trainer built
        with the optimizer wrapper that steps) or the object that counts the microbatches (a
        controller built with the accelerator, which may ``prepare`` what it builds): what it does
        with that object is the loop's. None for a library name, or where no argument is such an
        instance."""
        if not qualified or "(" in qualified or owner.project is None:
            return None
        performing = owner.project.index.event_names()  # type: ignore[attr-defined]
        if not any(isinstance(value, Obj) and (value.number in self._counting or value.class_def is not None
                                               and value.class_def.name.value.encode() in performing)
                   for value in (*args, *kwargs.values())):
            return None
        key = (id(owner), qualified)
        if key not in self._relays:
            found = owner.project.lookup(owner, qualified, any_module=True)  # type: ignore[attr-defined]
            self._relays[key] = None if found is None else ProjectClass(found[1], found[0]) \
                if isinstance(found[1], cst.ClassDef) else Function(found[1], found[0])
        return self._relays[key]

    def _helper_taking_data(self, qualified: str | None, args: list[object], kwargs: dict[str, object],
                            owner: ModuleFunctions) -> Function | None:
        """The project function that ``qualified`` (an imported name) names, where the call hands
        it per-microbatch data and it may compute a loss (:func:`_may_compute_loss`): also in a
        module that performs no training event, which the project index does not follow otherwise
        (``loss = compute_loss(net, x, y, accum)`` of a ``losses.py``: its forwards and its factor
        are the loss's). None for a library function, or a helper that prepares data (following
        it would spend the run's statements on what feeds no backward's factor)."""
        if not qualified or "(" in qualified or owner.project is None or _combined(args, kwargs) is not Origin.DATA:
            return None
        key = (id(owner), qualified)
        if key not in self._data_helpers:
            found = owner.project.lookup(owner, qualified, any_module=True)  # type: ignore[attr-defined]
            self._data_helpers[key] = Function(found[1], found[0]) \
                if found is not None and isinstance(found[1], cst.FunctionDef) and _may_compute_loss(found[1]) else None
        return self._data_helpers[key]

    def _forward_output(self, model: Obj | Unknown, args: list[object], kwargs: dict[str, object]) -> Unknown:
        """What the forward just recorded returns: data computed from its own event and from what
        its inputs were computed from (a model fed another's output)."""
        event = self.events[-1]
        inputs = fed_by([*args, *kwargs.values()])
        # (under `no_grad` it builds no graph: its output feeds no backward)
        feeds = frozenset() if event.grad_off else \
            None if inputs is None else inputs | {(event.epoch, event.microbatch)}
        return Unknown(f"{model.label}(...)", Origin.DATA, feeds=feeds)

    def _parameters_of(self, node: cst.Call, frame: _Frame) -> object:
        """The value whose parameters an optimizer's construction ``node`` takes (``model`` of
        ``SGD(model.parameters())``, ``list(model.parameters())``), None for other parameters."""
        params = node.args[0].value if node.args and not node.args[0].star else None
        if isinstance(params, cst.Call) and dotted(params.func) == "list" and len(params.args) == 1:
            params = params.args[0].value
        if isinstance(params, cst.Call) and isinstance(params.func, cst.Attribute) \
                and params.func.attr.value == "parameters" and isinstance(params.func.value, (cst.Name, cst.Attribute)):
            return self.expression(params.func.value, frame)  # (a name or an attribute: no side effect)
        return None

    def _library_call(self, callee: Unknown, args: list[object], kwargs: dict[str, object], node: cst.Call,
                      frame: _Frame) -> object:
        label = callee.label or ""
        segment = last_segment(label) if label else ""
        if label == "functools.partial" and args and isinstance(args[0], Function):
            # `partial(run_backward, half)`: the function with its first arguments fixed
            function = args[0]
            return replace(function, partial_args=(*function.partial_args, *args[1:]),
                           partial_kwargs=(*function.partial_kwargs, *kwargs.items()))
        if callee.origin is Origin.RUN and label in BUILDERS:  # `deepspeed.initialize(...)`: the engine among others
            return self._build_counter(BUILDERS[label], args, kwargs, node)
        if callee.origin is Origin.RUN and label:
            role = constructor_role(label, "." in label)
            if role is not None:  # (OTHER: a library object that is no training role, an EMA's shadow weights)
                built = Obj(role, "construction", _code(node), over=self._parameters_of(node, frame)
                            if role is Role.OPTIMIZER else None, built=_construction(label, args, kwargs, node))
                if role is Role.LOADER and self._sized_by_a(node, frame):
                    self._whole_groups.add(built.number)
                if role in DRIVERS and DRIVERS[role].builder is None:
                    self._counting[built.number] = Counting(DRIVERS[role], built, kwargs,
                                                            any(arg.star == "**" for arg in node.args))
                return built
        if segment in MANUAL_REDUCTIONS:
            self.reduced_by_hand = True
        if segment in fw.NO_SYNC_METHODS and "." in label:  # `cm = model.no_sync if ... else nullcontext; cm()`
            return _no_sync(kwargs, self._no_sync_named.get(label, (frame.owner, node)))
        if segment in ("SimpleNamespace", "Namespace") and not args:  # `types.SimpleNamespace(count=0)`
            return Obj(Role.OTHER, "construction", _code(node), attrs=dict(kwargs))
        carried = carrier_attrs(segment, args, kwargs)  # `GradientAccumulationPlugin(num_steps=A)`
        if carried is not None:
            return Obj(Role.OTHER, "construction", _code(node), attrs=carried,
                       built=_construction(label, args, kwargs, node))
        if segment in CLIP_FUNCTIONS:
            self._record(segment, None, args[0] if args else None, node, frame, clip=True)
            return Unknown("the gradient norm", Origin.DATA)
        if segment == "range" and label == "range" or segment == "trange" and _from_tqdm(label) and args:
            # (`tqdm.trange(a, b)` is `tqdm(range(a, b))`: the same values, with a progress bar)
            return self._range(args, node, frame)
        if label == "isinstance" and len(args) == 2 and len(node.args) == 2:
            decided = _is_builtin_instance(args[0], node.args[1].value)
            if decided is not None:
                return decided
        if label == "len" and args:
            if isinstance(args[0], (list, tuple, dict, str)):
                return len(args[0])
            if isinstance(args[0], (Obj, Unknown)) and (_is_loader(args[0]) or self._trains_on(node, frame)):
                return self.configuration.microbatches
            return Unknown(f"len({label_text(args[0])})", _combined(args, {}))
        if label == "enumerate" and args:
            start = args[1] if len(args) > 1 else kwargs.get("start", 0)
            return _Iteration(self, "enumerate", args[0], start if isinstance(start, int) else 0)
        if label == "zip" and args:
            return _Iteration(self, "zip", args[0], 0, args[1:])
        if segment == "islice" and len(args) == 2 and isinstance(args[1], int) and not isinstance(args[1], bool):
            return _Iteration(self, "islice", args[0], args[1])  # `islice(loader, k)`: its first k items
        if label == "iter" and len(args) == 1 and isinstance(args[0], (Obj, Unknown)) \
                and not _member_iterator(node.args[0].value):
            # a new pass over the data
            made = self._pass(args[0], f"an item of {label_text(args[0])}", (frame.owner, node))
            made.maker = node
            return made
        if label == "iter" and len(args) == 1 and isinstance(args[0], (list, tuple, range, str, dict)):
            return _Iteration(self, "iter", args[0])  # its items, one per `next()`
        if segment in TRANSPARENT_ITERABLES and args and (label in ("iter", "list", "tuple") or "." in label
                                                          or label in ("tqdm", "trange", "track")):
            return args[0]
        if label == "next" and args:
            iterator = args[0]
            if isinstance(iterator, _Iteration):
                return iterator.next()
            if _member_iterator(node.args[0].value):
                # `next(model.parameters()).device`: a tensor of the model, not a draw (a draw here would
                # make the training loop after it a second pass, run until the budget ends it)
                return Unknown(f"next({label_text(iterator)})")
            if isinstance(iterator, (Obj, Unknown)):  # an iterator made where the run cannot see
                key = label_text(iterator)
                if key not in self._passes:
                    self._passes[key] = self._pass(iterator, f"an item of {key}", (frame.owner, node))
                    self._passes[key].stream = bool(self.lengths)
                iterator = self._passes[key]
            if isinstance(iterator, _Loader) and len(args) == 2:
                return self._next_or(iterator, args[1])
            if isinstance(iterator, _Loader):
                return iterator.draw()
        if label == "int" and len(args) == 1 and isinstance(args[0], LabeledInt):
            return args[0]  # `int(cfg.get("accumulation_steps", 1))`: still the named value a configuration binds
        if label in ("int", "float", "bool", "abs", "min", "max") and args and \
                all(isinstance(a, (int, float)) for a in args):
            try:
                return {"int": int, "float": float, "bool": bool, "abs": abs, "min": min, "max": max}[label](*args)
            except (TypeError, ValueError):
                pass
        if label in _ROUNDINGS and len(args) == 1 and isinstance(args[0], (int, float)) \
                and not isinstance(args[0], bool):
            return _ROUNDINGS[label](args[0])
        if label in ("int", "float") and len(args) == 1 and isinstance(args[0], Unknown):
            return args[0]
        if label in _ROUNDINGS and len(args) == 1 and isinstance(args[0], Unknown):
            # (what it is computed from stays: `ceil(n / accum)` follows once A is bound)
            return Unknown(f"{label}(...)", _combined(args, kwargs), args[0].sources, feeds=args[0].feeds)
        if label == "getattr" and len(node.args) in (2, 3) and isinstance(args[1], str) and args[1].isidentifier():
            # `getattr(cfg, "accum", 1)`: the attribute, as `cfg.accum` reads it (its label what configurations bind)
            return self.expression(cst.Attribute(node.args[0].value, cst.Name(args[1])), frame)
        if label == "setattr" and len(args) == 3 and isinstance(args[0], Obj) and isinstance(args[1], str):
            # `for key, value in values.items(): setattr(self, key, value)`, the keys a call's keywords: the
            # object holds what is set (a progress object's `epoch`, not its constructor's value)
            args[0].attrs[args[1]] = args[2]
            return None
        if segment in ("get_world_size", "num_processes") and not args:
            return self.configuration.replicas
        # (what a checkpoint load returns is where a resumed run starts: restored)
        if label in fw.pytorch.CHECKPOINT_LOADS and args and isinstance(args[0], Unknown) and args[0].label:
            self._checkpoint_paths.add(args[0].label)
        built = Unknown(f"{label or '?'}(...)", _combined(args, kwargs), restored=label in fw.pytorch.CHECKPOINT_LOADS,
                        feeds=frozenset() if segment in _DETACHING else fed_by([*args, *kwargs.values()]))
        if callee.origin is Origin.RUN and label and not any(
                isinstance(a, Obj) and a.number in self._counting for a in (*args, *kwargs.values())):
            # `EMA(net)`: an object the run saw built (not by a call handed the accelerator, which may prepare it)
            self._built_here[id(built)] = built
            self._made_by[id(built)] = (frame.owner, label)
        return built

    def _next_or(self, iterator: _Loader, default: object) -> object:
        """``next(it, default)`` on a pass over data: its next item, or ``default`` at the pass's end
        (where ``next(it)`` raises). With the default None the code tests for the end with ``is None``
        (``batch = next(it, None); if batch is None: it = iter(loader)``): the items drawn are
        remembered, so that the test is false for them (a batch is no None), not a condition on data."""
        try:
            item = iterator.draw()
        except _Raised as raised:
            if raised.name != "StopIteration":
                raise
            return default
        if default is None:
            self._items[id(item)] = item
        return item

    def _range(self, args: list[object], node: cst.Call, frame: _Frame) -> object:
        """The values of ``range(*args)`` (``node`` the call): a range where they are concrete, else
        an iteration of unknown length that ends with the run's data."""
        numbers = [a for a in args if isinstance(a, int)]
        if len(numbers) == len(args) and args:
            return range(*numbers)
        if any(is_data(a) for a in args):
            # `range(0, len(batch), micro)`: the parts of one microbatch, not more microbatches
            return [Unknown("an offset into the microbatch", Origin.DATA)] * 2
        self._epoch_count(args, node, frame)
        # a literal start (and step) still fixes the values: `range(1, total + 1)` counts from 1;
        # a start the code does not fix (`range(resumed + 1, total)`) leaves every value open
        first: int | Unknown = 0
        if len(args) > 1 and _plain_int(args[0]):
            first = args[0]
        elif len(args) > 1 and isinstance(args[0], Unknown):
            first = Unknown(_code(node.args[0].value), Origin.CALLER, restored=args[0].restored)
        stride = args[2] if len(args) == 3 and _plain_int(args[2]) and args[2] > 0 else 1
        return _Iteration(self, "range", None, first, stride=stride)

    def _construct(self, callee: ProjectClass, args: list[object], kwargs: dict[str, object], node: cst.Call) -> object:
        obj = Obj(self._class_role(callee.owner, callee.class_def), "its class", _code(node),
                  callee.class_def, callee.owner)
        init = callee.owner.method(callee.class_def, "__init__")
        if init is not None:
            definition, owner, class_def = init
            self._call_function(Function(definition, owner, class_def, obj), [obj, *args], kwargs, node, owner)
        elif obj.role in DRIVERS and DRIVERS[obj.role].builder is None:
            # `class MyAccelerator(Accelerator)` with no `__init__` of its own: built as its library base is
            self._counting[obj.number] = Counting(DRIVERS[obj.role], obj, kwargs,
                                                  any(arg.star == "**" for arg in node.args))
        return obj

    def _class_role(self, owner: ModuleFunctions, class_def: cst.ClassDef, seen: frozenset[int] = frozenset()) -> Role:
        if id(class_def) in seen or len(seen) > 16:
            return Role.UNKNOWN  # a cycle of bases, or a hierarchy too deep to matter
        seen = seen | {id(class_def)}
        for base in class_def.bases:
            name = dotted(base.value) or ""
            qualified = owner.imports.qualify(name) or name
            role = constructor_role(qualified, "." in qualified)
            if role is not None:
                return role
            located = owner.class_named(name)
            if located is not None and located[1] is not class_def:
                found = self._class_role(*located, seen)
                if found is not Role.UNKNOWN:
                    return found
        return Role.UNKNOWN

    def _method(self, receiver: object, method: str, args: list[object], kwargs: dict[str, object], node: cst.Call,
                frame: _Frame) -> object:
        if isinstance(receiver, (list, dict)) and method in ("append", "extend", "update", "pop", "get", "items",
                                                            "keys", "values", "setdefault"):
            return self._container_method(receiver, method, args)
        if isinstance(receiver, _Loader) or isinstance(receiver, Obj) and receiver.role is Role.LOADER \
                and method == "__iter__":
            return receiver
        if method in fw.torchvision.ITERATION_WRAPPERS and args and isinstance(receiver, (Obj, Unknown)):
            return args[0]  # `metric_logger.log_every(loader, 10)` (a logger passed in): the loader's items
        stepping = self._stepping(receiver, method)
        if stepping is not None:
            return self._drive(stepping, receiver, method, node, frame)
        if not self._acts(receiver, method, node, frame):
            return None  # a wrapped optimizer's or scheduler's call off the boundary: the framework skips it
        if method in EVENT_METHODS:
            if method == "step" and id(receiver) in self._made_by and isinstance(receiver, Unknown) and receiver.label:
                self.library_built[receiver.label] = self._made_by[id(receiver)][1]
            argument = args[0] if args else kwargs.get("loss")
            self._record(method, receiver, argument, node, frame, clip=method.startswith("clip_grad"))
            if method not in BACKWARD_CALLS:  # (`meter.update(loss)`)
                self._keeps(receiver, method, fed_by([*args, *kwargs.values()]), node)
            if method == "scale" and args:
                return args[0]
            if method == "step" and isinstance(receiver, (Obj, Unknown)) and _is_loader(receiver):
                return None
            # (`obs, reward = env.step(action)`: computed from the arguments, not from the receiver's gradients)
            return Unknown(f"{label_text(receiver)}.{method}(...)", Origin.DATA,
                           feeds=fed_by([*args, *kwargs.values()]))
        if method in MANUAL_REDUCTIONS:
            self.reduced_by_hand = True
        if method in fw.NO_SYNC_METHODS and isinstance(receiver, (Obj, Unknown)):
            return _no_sync(kwargs, (frame.owner, node))
        counting = self._counting.get(receiver.number) if isinstance(receiver, Obj) else None
        if counting is not None and method == counting.driver.enter:
            return _Entry(counting)
        if isinstance(receiver, Unknown) and receiver.origin is not Origin.DATA and method in _COUNTED_ENTRIES \
                and not self._project_method(receiver, method):
            self.undecide(f"`{receiver.label}.{method}()` counts the microbatches of an object built where the run "
                          "cannot see: its A is unknown")
        if isinstance(receiver, Obj) and method in ("accumulate", "autocast"):
            return None
        origin = receiver.origin if isinstance(receiver, Unknown) else _combined(args, kwargs)
        if method in ("item", "detach", "cpu", "float", "mean", "sum") and isinstance(receiver, Unknown):
            return Unknown(f"{receiver.label}.{method}()", receiver.origin, factor=receiver.factor,
                           restored=receiver.restored, feeds=frozenset() if method in _DETACHING else receiver.feeds)
        if counting is not None and method == counting.driver.wrap:
            for value in args:
                counting.wrapped.append(value)
                self._wrapped[id(value)] = counting
            return tuple(args) if len(args) != 1 else args[0]
        if isinstance(receiver, Unknown) and receiver.origin is Origin.RUN and not receiver.restored \
                and method == "get" and args and isinstance(args[0], str) and args[0].isidentifier():
            # `kwargs.get("accum_grad", 1)`, `cfg.get("accum", 4)` of a mapping the run does not show: a named
            # run-level value (a whole-number default stays a constant the configurations can rebind); not
            # a checkpoint's `ckpt.get("epoch", -1)`: where the resumed run starts, not a setting
            default = args[1] if len(args) > 1 else None
            number = default if isinstance(default, int) and not isinstance(default, bool) else None
            return self._bound(args[0], None if number is None else int(number))
        if fw.lightning.ACCESSORS.get(f"{_code(node.func)}()") is Role.SCHEDULER and not args and not kwargs:
            # `self.lr_schedulers()` of a LightningModule: its scheduler, or a list of them (unpacked in
            # `assign`); (the optimizers' accessor keeps its roles from use)
            return Obj(Role.SCHEDULER, "construction", _code(node))
        fed = frozenset() if method in _DETACHING else None if self._holds(receiver) \
            else fed_by([receiver, *args, *kwargs.values()])
        self._keeps(receiver, method, fed, node)
        # (`state.pop("epoch")` of a checkpoint is restored too)
        return Unknown(f"{label_text(receiver)}.{method}(...)", origin, restored=is_restored(receiver), feeds=fed)

    def _keeps(self, receiver: object, method: str, fed: Feeds | None, node: cst.Call) -> None:
        """Note what a call of ``method`` on ``receiver`` keeps of the forwards ``fed`` (what its
        arguments were computed from): a tensor changed in place (``total.add_(loss)``) holds them;
        an object out of sight whose method's result goes unused (``memory.add(out)``) may give them
        back: what is read from it later is computed from forwards the run does not know (None)."""
        if not isinstance(receiver, Unknown) or fed is not None and not fed:
            return
        if is_data(receiver) and method.endswith("_"):
            receiver.feeds = fed
        elif not is_data(receiver) and node is self._discarded:
            receiver.feeds = None
            if receiver.label:
                self._holders.add(receiver.label)

    def _holds(self, value: object) -> bool:
        """Whether ``value`` is, or is read from, an object out of sight that keeps a forward's output
        (:meth:`_keeps`): ``memory``, ``memory.items`` after ``memory.add(out)``."""
        return bool(self._holders) and isinstance(value, Unknown) and value.label is not None and (
            value.label in self._holders or any(value.label.startswith(f"{h}.") for h in self._holders))

    def _tag_drawn(self, value: object) -> None:
        """Remember the microbatch ``value`` is put into a list as (a list filled while drawing)."""
        if self.drawn_in_epoch and self._replayed is None:
            self._drawn_as[id(value)] = (value, self.epoch, self.microbatch, self.fetched)

    def _container_method(self, receiver: list | dict, method: str, args: list[object]) -> object:
        if isinstance(receiver, list) and method == "append" and args:
            if len(receiver) < MAX_ITERATIONS:
                receiver.append(args[0])
                self._tag_drawn(args[0])
            return None
        if isinstance(receiver, dict):
            if method == "get" and args and isinstance(args[0], (str, int)):
                return receiver.get(args[0], args[1] if len(args) > 1 else None)
            if method in ("items", "keys", "values"):
                return list(getattr(receiver, method)())
        return Unknown(method)

    def _record(self, method: str, receiver: object, argument: object, node: cst.CSTNode, frame: _Frame | None,
                forward: bool = False, clip: bool = False, driven: Role | None = None,
                owner: ModuleFunctions | None = None) -> None:
        """Record an event at ``node`` of ``owner`` (by default the module of ``frame``)."""
        if self._partial and (method == "zero_" or method == "zero_grad" and receiver is None):
            return  # a reset of some parameters only (frozen ones): no reset of the group's gradients
        synced = None if any(not c.known for c in self._sync_off) else not self._sync_off
        at = next((c.at for c in reversed(self._sync_off) if c.at is not None), None)
        if forward:  # DDP reads its flag at the forward: the next backward of this model syncs by it
            key = _flag_key(receiver)
            self._armed_off = self._flag_off.get(key) if key is not None else None
            if key is not None:
                self._forwarded[key] = (self.microbatch, self.epoch)
        if self._armed_off is not None and synced is True and (forward or method in BACKWARD_CALLS):
            synced, at = False, self._armed_off
        fetch = (self.fetched if self._replayed is None else self._replayed[2]) if method in BACKWARD_CALLS else None
        if method in BACKWARD_CALLS and argument is not None and _counter_key(receiver) is not None:
            self._backward_with_argument.add(_counter_key(receiver))
        epoch = self.epoch if self._replayed is None else self._replayed[0]
        micro = self._attributed(method, forward)
        if micro is None and method in BACKWARD_CALLS and not forward and self._undrawn_backward is None:
            self._undrawn_backward = len(self.events)
        self.events.append(RawEvent(method, receiver, argument, node, owner or frame.owner,  # type: ignore[union-attr]
                                    tuple(self._stack),
                                    micro, max(epoch, 0), forward, clip, synced, at,
                                    fetch, driven=driven, grad_off=self._grad_off > 0,
                                    feeds=_loss_feeds(receiver, argument) if method in BACKWARD_CALLS else None))

    def _attributed(self, method: str, forward: bool) -> int | None:
        """The microbatch an event being recorded belongs to: the latest drawn, but where the next
        microbatch was drawn between a forward and its backward (``x, y = next(it)`` right after
        ``loss = model(x, y)``, prefetching), the backward and what follows it up to the next forward
        belong to the forward's microbatch: the group's backwards ran on the microbatches its
        forwards did."""
        micro = self.microbatch
        if self._replayed is not None:
            return micro
        if forward:
            if self._grad_off == 0:
                self._forward_at, self._ahead = (self.epoch, micro), None
            return micro
        at = self._forward_at
        if method in BACKWARD_CALLS and self._ahead is None and at is not None and at[0] == self.epoch \
                and at[1] is not None and micro is not None and at[1] == micro - 1:
            self._ahead = at[1]
        return self._ahead if self._ahead is not None else micro

    def _tracks(self, call: cst.Call, frame: _Frame) -> bool:
        """Whether ``call`` is ``x.log(...)`` on a tracker (:data:`accumlint.model.actions.TRACKER_LIBRARIES`,
        an accelerator), its receiver a name or an attribute (reading it runs nothing)."""
        func = call.func
        if not (isinstance(func, cst.Attribute) and func.attr.value == "log" and dotted(func.value)):
            return False
        receiver = self.expression(func.value, frame)
        if isinstance(receiver, Obj):
            return receiver.role is Role.ACCELERATOR
        return isinstance(receiver, Unknown) and label_text(receiver).startswith(TRACKER_LIBRARIES)

    def _action(self, action: str, node: cst.CSTNode, owner: ModuleFunctions) -> None:
        """Record ``action`` (:mod:`accumlint.model.actions`), called at ``node`` of ``owner``: once for
        a call named for an evaluation that is one by its body too, and never inside a call that is one
        (its ``model.eval()`` is part of the evaluation the call stands for)."""
        if self.events and self.events[-1].method == "action" and self.events[-1].node is node \
                or any(id(call) in self._acting for _, call in self._stack):
            return
        self._acting.add(id(node))
        self.events.append(RawEvent("action", None, None, node, owner, tuple(self._stack), self._attributed("", False),
                                    max(self.epoch, 0), action=action))

    def _call_function(self, callee: Function, args: list[object], kwargs: dict[str, object],
                       node: cst.CSTNode, site_owner: ModuleFunctions | None = None) -> object:
        definition = callee.definition
        if definition in self._active:
            self.note(f"a recursive call of `{_name_of(definition)}` was not followed")
            return Unknown(f"{_name_of(definition)}(...)")
        if len(self._active) >= MAX_DEPTH:
            self.undecide(f"calls nest deeper than {MAX_DEPTH} at `{_name_of(definition)}`")
            return Unknown(f"{_name_of(definition)}(...)")
        if isinstance(definition, cst.FunctionDef):
            self.reached.add(definition)
            if not isinstance(node, cst.FunctionDef) and self.syntax.evaluates(definition, callee.owner):
                self._action(EVALUATION, node, site_owner or self.module)
            if not isinstance(node, cst.FunctionDef) and self.syntax.clips_by_hand(definition):
                # a norm clip written by hand (`coef = max_norm / norm; if coef < 1: g.mul_(coef)`): a clip
                # of what its first argument holds, as PyTorch's, not a rescale on a test of the data
                self._record("clip_grad_norm_", None, args[0] if args else None, node, None, clip=True,
                             owner=site_owner or self.module)
                return Unknown("the gradient norm", Origin.DATA)
            if is_abstract(definition):
                # `def load_model(self): raise NotImplementedError`: what a subclass the run does not
                # construct returns, not a raise that ends the run
                return Unknown(f"{_name_of(definition)}(...)")
            if not isinstance(node, cst.FunctionDef) and definition is not self._as_code \
                    and _yields_nothing(definition):
                # `for _ in accumulation_contexts(A, ...): ...`: a generator that yields no value is no
                # data source; it stands for as many passes as its body yields
                return self._yielded(callee, args, kwargs, node, site_owner)
            if not isinstance(node, cst.FunctionDef) and _is_generator(definition) and definition is not self._as_code \
                    and not any(is_data(a) for a in [*args, *kwargs.values()]):
                # `cycle(loader)`, `batches(dataset)`: a generator over the data yields one
                # microbatch per `next` (a generator over one batch's parts is run as code)
                return _Loader(self, f"an item of {_name_of(definition)}(...)")
        names: dict[str, object] = dict(callee.closure) if callee.closure is not None else {}
        arguments = list(callee.partial_args) + list(args)
        if callee.self_value is not None and not _is_static(definition) and \
                (not arguments or arguments[0] is not callee.self_value):
            arguments.insert(0, callee.self_value)
        self._bind(definition, arguments, {**dict(callee.partial_kwargs), **kwargs}, names, callee.owner)
        frame = _Frame(callee.owner, names, definition, callee.class_def)
        entry = isinstance(node, cst.FunctionDef)  # the entry itself, called by no site of the code
        if not entry:
            self._stack.append((site_owner or self.module, node))
        self._active.append(definition)
        grad_off = self._grad_off
        if isinstance(definition, cst.FunctionDef) and decorated_without_grad(definition):
            self._grad_off += 1
        try:
            if isinstance(definition, cst.Lambda):
                return self.expression(definition.body, frame)
            self.block(definition.body, frame)
        except _Return as returned:
            return returned.value
        finally:
            self._grad_off = grad_off
            self._active.pop()
            if not entry:
                self._stack.pop()
        return None

    def _yielded(self, callee: Function, args: list[object], kwargs: dict[str, object], node: cst.CSTNode,
                 site_owner: ModuleFunctions | None) -> object:
        """Run a generator whose every ``yield`` is bare for the number of passes it stands for: a list of
        that many ``None`` (what it does around each ``yield``, a ``with`` it enters, runs all at once)."""
        self._yields.append(0)
        outer, self._as_code = self._as_code, callee.definition
        try:
            self._call_function(callee, args, kwargs, node, site_owner)
        finally:
            self._as_code = outer
            count = self._yields.pop()
        return [None] * count

    def _bind(self, definition: cst.FunctionDef | cst.Lambda, args: list[object], kwargs: dict[str, object],
              names: dict[str, object], owner: ModuleFunctions) -> None:
        params = definition.params
        unseen = kwargs.pop(_UNSEEN_KEYWORDS, None)
        positional = list(params.posonly_params) + list(params.params)
        for i, param in enumerate(positional):
            name = param.name.value
            if i < len(args):
                names[name] = args[i]
            elif name in kwargs:
                names[name] = kwargs.pop(name)
            elif param.default is not None:
                names[name] = self._default(param, owner)
            else:
                names[name] = self._bound(name, None)
        for param in params.kwonly_params:
            name = param.name.value
            if name in kwargs:
                names[name] = kwargs.pop(name)
            elif param.default is not None:
                names[name] = self._default(param, owner)
            else:
                names[name] = self._bound(name, None)
        if isinstance(params.star_arg, cst.Param):
            names[params.star_arg.name.value] = tuple(args[len(positional):])
        if params.star_kwarg is not None:
            names[params.star_kwarg.name.value] = unseen if unseen is not None else dict(kwargs)

    def _default(self, param: cst.Param, owner: ModuleFunctions) -> object:
        value = self.expression(param.default, _Frame(owner, {}))  # type: ignore[arg-type]
        if isinstance(value, int) and not isinstance(value, (bool, LabeledInt)):
            return self._bound(param.name.value, value)
        return value


class _Iteration:
    """``enumerate``/``zip``/``range``/``iter`` over a value: concrete where the value is, drawing data
    where it is the loader."""

    def __init__(self, interpreter: Interpreter, kind: str, base: object, start: int | Unknown = 0,
                 others: list[object] | None = None, stride: int = 1) -> None:
        self.interpreter = interpreter
        self.kind = kind
        self.base = base
        self.start = start
        self.stride = stride  # a range's step
        self.others = others or []
        self.body: cst.CSTNode | None = None  # the loop's body, for a range of unknown length
        self.owner: ModuleFunctions = interpreter.module  # the module that holds the loop
        self.node: cst.CSTNode | None = None  # the loop's iterable, where a `for` iterates it
        self.frame: _Frame | None = None  # the loop's frame, where a `for` iterates it
        self._iterator: Iterator[object] | None = None
        self.fresh = False  # iterated by a `for` statement: a pass it makes ends with the statement

    def in_loop(self, body: cst.CSTNode, node: cst.CSTNode | None, frame: _Frame) -> None:
        """Iterated by the ``for`` with ``body`` and iterable ``node``, run in ``frame``."""
        self.body, self.node, self.frame, self.owner = body, node, frame, frame.owner

    def concrete(self) -> bool:
        """Whether every value iterated is concrete (no data drawn, no unknown length)."""
        return self.kind != "range" and all(
            isinstance(v, (list, tuple, range, str)) or isinstance(v, _Iteration) and v.concrete()
            for v in (self.base, *self.others))

    def items(self) -> Iterator[object]:
        run = self.interpreter
        if self.kind == "range":  # range over an unknown count: until the run's data ends
            # (no body: drawn by `next()` in a loop)
            yield from run.unbounded(self.body, self.owner, self.start, self.stride)
            return
        base = self._source(self.base)
        if self.kind == "enumerate":
            if isinstance(self.base, range) and self.body is not None and self.frame is not None \
                    and run.passes_are_microbatches(self.body, self.frame):
                base = run._counted(self.base)  # `for k, _ in enumerate(range(A))`: as `range(A)` is
            yield from enumerate(base, self.start)
        elif self.kind in ("islice", "group"):  # a group: the next `start` microbatches of the pass
            yield from itertools.islice(base, self.start)
        elif self.kind == "iter":
            yield from base
        else:
            others = [self._source(o) for o in self.others]
            for items in zip(base, *others, strict=False):
                yield tuple(items)

    def _source(self, value: object) -> Iterator[object]:
        if isinstance(value, _Iteration):
            value.fresh = value.fresh or self.fresh  # `enumerate(islice(loader, k))` in a `for`
            if value.body is None and self.body is not None and self.frame is not None:
                value.in_loop(self.body, self.node, self.frame)  # `enumerate(range(n))`: the loop's body is its too
            return value.items()
        run = self.interpreter
        untrained = self.body is not None and not run.syntax.reaches_backward(self.body, self.owner)
        if isinstance(value, _Loader):
            value.untrained = untrained
            return run._draws(value)
        if isinstance(value, (list, tuple, range, str)):
            return _limited(iter(value))
        if is_data(value) and run.drawn:
            return _parts(value)
        label = label_text(value)
        make = run._fresh_pass if self.fresh else run._pass
        at = (self.owner, self.node) if self.node is not None else None
        made = make(value, f"an item of {label}", at)
        made.untrained = untrained
        return run._draws(made)

    def next(self) -> object:
        if self._iterator is None:
            self._iterator = self.items()
        try:
            return next(self._iterator)
        except StopIteration:
            raise _Raised("StopIteration") from None


# --- helpers ----------------------------------------------------------------------------------

def _islice_count(iterable: cst.BaseExpression) -> cst.BaseExpression | None:
    """The count ``K`` of ``islice(data, K)`` (also under ``enumerate``), None for another iterable."""
    if isinstance(iterable, cst.Call) and dotted(iterable.func) == "enumerate" and iterable.args:
        iterable = iterable.args[0].value
    if isinstance(iterable, cst.Call) and last_segment(dotted(iterable.func) or "") == "islice" \
            and len(iterable.args) == 2 and not any(a.keyword or a.star for a in iterable.args):
        return iterable.args[1].value
    return None


def _from_tqdm(label: str) -> bool:
    """Whether ``label`` (a call's qualified name) is tqdm's: ``trange`` imported from it, or named through
    one of its modules (``tqdm.auto.trange``)."""
    return label == "trange" or label.split(".")[0] == "tqdm"


def _data_source(data: object) -> object:
    """What a pass over ``data`` iterates, for telling two passes over the same loader apart from
    passes over other data (:class:`Fetch`): a loader the run saw built (its number), or one built
    out of sight by its name; None for anything else, an iterator among them (a new pass over an
    iterator continues where the last one stopped, one over a loader starts again)."""
    if not _is_loader(data):
        return None
    if isinstance(data, Obj):
        return ("object", data.number)
    return ("name", data.label) if isinstance(data, Unknown) and data.origin is Origin.RUN else None


class SyntaxFacts:
    """What the interpreter asks of the code's shape, computed once per node and shared by
    every run of an entry point (the runs re-execute the same statements many times)."""

    def __init__(self, owner: ModuleFunctions, limit: int = MAX_ENTRY_STATEMENTS) -> None:
        self.owner = owner
        self.limit = limit  # statements every run of the entry may execute together
        self.statements = 0  # executed by every run of the entry so far
        #: ids of the iterables of loops whose items each train over data drawn inside them (not microbatches)
        self.trained_items: set[int] = set()
        self._memo: dict[tuple[str, int], tuple[cst.CSTNode, object]] = {}

    def _get(self, kind: str, node: cst.CSTNode, compute) -> object:
        key = (kind, id(node))
        found = self._memo.get(key)
        if found is None or found[0] is not node:
            found = self._memo[key] = (node, compute())
        return found[1]

    def reaches_event(self, node: cst.CSTNode, owner: ModuleFunctions) -> bool:
        return self._get("event", node, lambda: reaches_event(node, owner))  # type: ignore[return-value]

    def method_calls(self, node: cst.CSTNode) -> tuple[tuple[str, str], ...]:
        """The ``name.method(...)`` calls in ``node`` that no module-level lookup resolves to an
        update, as (receiver name, method name) pairs."""
        def compute() -> tuple[tuple[str, str], ...]:
            return tuple(dict.fromkeys(
                (call.func.value.value, call.func.attr.value) for call in walk(node)
                if type(call) is cst.Call and type(call.func) is cst.Attribute and type(call.func.value) is cst.Name
                and call.func.attr.value not in _UPDATE_METHODS))
        return self._get("method calls", node, compute)  # type: ignore[return-value]

    def shapes(self, node: cst.If | cst.IfExp, owner: ModuleFunctions) -> bool:
        """Whether a run-level choice's branches (``node``) build an object that the code calls
        later: they call a class or a project function, and a name they bind (or that the
        conditional expression is assigned to) is the callee or the receiver of a call
        (``stepper = AmpStep() if args.amp else None`` … ``stepper(loss, opt)``; ``net = DDP(net)``
        … ``net(x)``). The driver takes these choices the other way first: a choice that only moves
        data (``x.cuda() if args.gpu else x``) or builds what nothing calls leaves the events as
        they are."""
        def compute() -> bool:
            if not any(last_segment(dotted(call.func) or "")[:1].isupper()
                       or _callees(call.func, _call_name(call.func), owner, call) for call in _calls(node)):
                return False
            bound = _bound_names(node) if isinstance(node, cst.If) else _assigned_to(owner._module).get(id(node), ())
            return any(name in _called_names(owner._module) for name in bound)

        return self._get("shapes", node, compute)  # type: ignore[return-value]

    def clips_by_hand(self, function: cst.FunctionDef) -> bool:
        """:func:`accumlint.model.events.clips_by_hand`, once per function."""
        return self._get("clips", function, lambda: clips_by_hand(function))  # type: ignore[return-value]

    def evaluates(self, function: cst.FunctionDef, owner: ModuleFunctions) -> bool:
        """Whether calling ``function`` is an evaluation (:func:`accumlint.model.actions.evaluates`, or
        named for one: :data:`~accumlint.model.actions.EVALUATION_NAMES`) that trains nothing."""
        return self._get("evaluates", function,
                         lambda: (evaluates(function) or function.name.value in EVALUATION_NAMES)
                         and not self.reaches_backward(function.body, owner))

    def reaches_backward(self, node: cst.CSTNode, owner: ModuleFunctions) -> bool:
        return self._get("backward", node,  # type: ignore[return-value]
                         lambda: reaches_event(node, owner, names=BACKWARD_NAMES))

    def has_update(self, node: cst.CSTNode, owner: ModuleFunctions) -> bool:
        return self._get("update", node, lambda: has_update(node, owner))  # type: ignore[return-value]

    def iterates_its_items(self, loop: cst.For, owner: ModuleFunctions) -> bool:
        """Whether ``loop`` takes items that its body iterates for its backwards (``for loader in
        shards(): for x in loader: ... backward``): each item is a pass over data, not a microbatch."""
        def compute() -> bool:
            items = {n.value for n in every_node(loop.target) if isinstance(n, cst.Name)}  # (`_, _, loader`)
            return any(type(inner) is cst.For and dotted(conventions.passed_over(inner.iter)) in items
                       and self.reaches_backward(inner.body, owner) for inner in walk(loop.body))
        return self._get("items", loop, compute)  # type: ignore[return-value]

    def bundles(self, loop: cst.For, owner: ModuleFunctions) -> bool:
        """Whether ``loop`` takes items that each bundle several microbatches for an inner loop
        (``for batches in loader: for batch in batches: ... backward``, a ``collate_fn`` that sorts
        a large batch and splits it) and does nothing else per item that the inner loop could see:
        no training event, no assignment (``if not training: break``, a progress bar's
        ``update(1)``). Where one bundle ends and the next begins then changes no event, so the
        inner loop's items are the epoch's microbatches, one stream."""
        def compute() -> bool:
            if type(loop.target) is not cst.Name or not self.iterates_its_items(loop, owner):
                return False
            item = loop.target.value
            return all(
                type(statement) is cst.For and dotted(conventions.passed_over(statement.iter)) == item
                or not self.reaches_event(statement, owner) and not any(type(n) in _ASSIGNING for n in walk(statement))
                for statement in loop.body.body)
        return self._get("bundles", loop, compute)  # type: ignore[return-value]

    def steps_its_items(self, loop: cst.For) -> bool:
        """Whether ``loop``'s body updates or resets what the loop takes (``for i, opt in
        enumerate(optimizers): ... opt.step()``, or a gradient scaler's ``scaler.step(opt)`` beside its
        ``scaler.update()``): its items are optimizers, not microbatches, even where a backward runs
        for each. (``scheduler.step(epoch)`` takes an epoch, not a scheduler: no ``update()`` beside it.)"""
        def compute() -> bool:
            items = {n.value for n in every_node(loop.target) if isinstance(n, cst.Name)}
            calls = [call for call in walk(loop.body)
                     if type(call) is cst.Call and isinstance(call.func, cst.Attribute)]
            updated = {dotted(call.func.value) for call in calls if call.func.attr.value == "update"}
            for call in calls:
                method, receiver = call.func.attr.value, dotted(call.func.value)
                if (method == "step" or method in _RESET_METHODS) and receiver in items:
                    return True
                if method == "step" and receiver in updated and call.args and dotted(call.args[0].value) in items:
                    return True
            return False
        return self._get("steps items", loop, compute)  # type: ignore[return-value]

    def trains_inside(self, statement: cst.If, owner: ModuleFunctions) -> bool:
        """Whether a branch of ``statement`` holds a loop over data that runs a backward: a whole
        training phase, not the update of the group the iterations before it accumulated (once per
        statement: every run asks it)."""
        return self._get("trains", statement, lambda: self._trains(statement, owner))  # type: ignore[return-value]

    def _trains(self, statement: cst.If, owner: ModuleFunctions) -> bool:
        branches = [statement.body] + ([statement.orelse.body] if isinstance(statement.orelse, cst.Else) else [])
        for branch in branches:
            loops = [n for n in walk(branch) if isinstance(n, (cst.For, cst.While))]
            if any(self.reaches_backward(loop.body, owner) for loop in loops):
                return True
            # a loop without a backward (over the optimizers to step, the parameters to clip) is
            # the group's update; a branch with no loop of its own trains on data it draws only
            # through `next()` or a project function that loops
            if not loops and _draws_data(branch, owner, peeks=False) and self.reaches_backward(branch, owner):
                return True
        return False

    def reduces(self, node: cst.CSTNode, owner: ModuleFunctions) -> bool:
        """Whether ``node`` all-reduces gradients by hand, directly or through the project's functions."""
        return self._get("reduces", node,  # type: ignore[return-value]
                         lambda: reaches_event(node, owner, names=MANUAL_REDUCTIONS))

    def matters(self, statement: cst.If, owner: ModuleFunctions) -> bool:
        """Whether a branch of ``statement`` can change a run's events: it performs one (a clip
        included), binds a name or leaves the iteration or the function."""
        return self._get("matters", statement, lambda: self.reaches_event(statement, owner)  # type: ignore[return-value]
                         or self.resets(statement) or reaches_event(statement, owner, CLIP_CALLS)
                         or any(type(n) in _MATTERING for n in walk(statement)))

    def trained_on(self, scope: cst.CSTNode, owner: ModuleFunctions) -> frozenset[str]:
        """The dotted names that the loops of ``scope`` reaching a backward iterate, through
        ``enumerate``/``tqdm``/``zip`` (``for i, b in enumerate(loader_train)``: ``loader_train``)."""
        def compute() -> frozenset[str]:
            found = set()
            for loop in walk(scope.body if isinstance(scope, cst.FunctionDef) else scope):
                if isinstance(loop, cst.For) and self.reaches_backward(loop.body, owner):
                    source = loop.iter
                    while isinstance(source, cst.Call) and source.args and (
                            last_segment(dotted(source.func) or "") in TRANSPARENT_ITERABLES | {"enumerate", "zip"}):
                        source = source.args[0].value
                    name = dotted(source)
                    if name is not None:
                        found.add(name)
            return frozenset(found)

        return self._get("trained_on", scope, compute)  # type: ignore[return-value]

    def update_follows(self, statement: cst.CSTNode, owner: ModuleFunctions) -> bool:
        """Whether an optimizer update follows ``statement`` in its loop's body (or its
        function's): what a ``continue`` or ``return`` in it would skip."""
        return update_follows(statement, owner, self.has_update)

    def at_function_level(self, statement: cst.CSTNode, owner: ModuleFunctions) -> bool:
        """:func:`_at_function_level`, memoised."""
        return self._get("at_function_level", statement,  # type: ignore[return-value]
                         lambda: _at_function_level(statement, owner))

    def prefetches(self, loop: cst.For, owner: ModuleFunctions) -> bool:
        """:func:`prefetches`, memoised."""
        return self._get("prefetches", loop, lambda: prefetches(loop, owner))  # type: ignore[return-value]

    def trained(self, owner: ModuleFunctions) -> frozenset[str]:
        """The dotted names whose ``.parameters()`` build an optimizer or are clipped somewhere in
        ``owner`` (``SGD(net.parameters())``, ``clip_grad_norm_(net.parameters(), 1.0)``), and
        those whose gradient sync a ``no_sync`` switches (``net.no_sync()``, ``acc.no_sync(net)``):
        each is a model whatever it is called, so calling it is a forward."""
        return _trained(owner._module, owner.imports)

    def counters(self, owner: ModuleFunctions) -> frozenset[str]:
        """The names (and attribute names) ``owner`` increments somewhere (``step += 1``,
        ``self.step += 1``): a literal assigned to one is a counter's start, which changes as the
        run goes on, not a constant."""
        return _counters(owner._module)

    def resets(self, node: cst.CSTNode) -> bool:
        """Whether ``node`` resets gradients itself (``zero_grad()``, ``p.grad = None``, ``grad.zero_()``)."""
        def compute() -> bool:
            for n in walk(node):
                if type(n) is cst.Call and type(n.func) is cst.Attribute \
                        and n.func.attr.value in ("zero_grad", "zero_"):
                    return True
                if type(n) is cst.AssignTarget and type(n.target) is cst.Attribute \
                        and n.target.attr.value == "grad":
                    return True
            return False

        return self._get("resets", node, compute)  # type: ignore[return-value]

    def draws_data(self, node: cst.CSTNode, owner: ModuleFunctions) -> bool:
        return self._get("draws", node, lambda: _draws_data(node, owner))  # type: ignore[return-value]

    def draws_microbatches(self, node: cst.CSTNode, owner: ModuleFunctions) -> bool:
        return self._get("microbatches", node,  # type: ignore[return-value]
                         lambda: _draws_data(node, owner, loops_that_train=True))

    def epoch_indices(self, scope: cst.CSTNode, owner: ModuleFunctions) -> frozenset[str]:
        """The names that loops of ``scope`` count epochs with: the targets of a ``for`` whose
        iterable draws no data and whose body holds a loop that trains (``for epoch in
        range(n): ... for batch in loader: ... loss.backward()``). A loop over the microbatch's
        own tokens (``while idx < labels.shape[1]``) inside the microbatch loop trains nothing:
        the microbatch index is no epoch index."""
        def compute() -> frozenset[str]:
            found: set[str] = set()
            for loop in walk(scope.body if isinstance(scope, cst.FunctionDef) else scope):
                if isinstance(loop, cst.For) and not self.draws_data(loop.iter, owner) \
                        and self.holds_training_loop(loop.body, owner):
                    found.update(n.value for n in walk(loop.target) if isinstance(n, cst.Name))
            return frozenset(found)

        return self._get("epochs", scope, compute)  # type: ignore[return-value]

    def holds_training_loop(self, body: cst.CSTNode, owner: ModuleFunctions) -> bool:
        """Whether ``body`` (a loop's) holds a loop that reaches a backward: it runs passes of
        training (an epoch loop), not one microbatch per iteration."""
        return self._get("inner", body, lambda: any(
            type(inner) in (cst.For, cst.While) and inner is not body and self.reaches_backward(inner.body, owner)
            for inner in walk(body)))  # type: ignore[return-value]

    def streams(self, function: cst.FunctionDef, owner: ModuleFunctions) -> bool:
        """Whether ``function`` takes items with ``next()`` from a parameter or an attribute: an
        iterator made where its caller, not its own code, decides (it is not restarted here)."""
        return self._get("streams", function, lambda: _streams(function, owner))  # type: ignore[return-value]

    def counted_keys(self, function: cst.FunctionDef) -> frozenset[str]:
        """The attributes and string subscripts ``function`` counts up (``self.it += 1``,
        ``state["iter_num"] += 1``), by their last name or key."""
        def compute() -> frozenset[str]:
            found = set()
            for node in walk(function.body):
                if type(node) is not cst.AugAssign or type(node.operator) not in _COUNTING_OPERATORS:
                    continue
                if type(node.target) is cst.Attribute and node.target.attr.value != "grad":  # (a sum of gradients)
                    found.add(node.target.attr.value)
                elif type(node.target) is cst.Subscript and len(node.target.slice) == 1 \
                        and type(node.target.slice[0].slice) is cst.Index \
                        and type(node.target.slice[0].slice.value) is cst.SimpleString:
                    found.add(node.target.slice[0].slice.value.evaluated_value)
            return frozenset(found)

        return self._get("counted_keys", function, compute)  # type: ignore[return-value]

    def pass_ranges(self, function: cst.FunctionDef) -> frozenset[int]:
        """The ``range(...)`` calls (by id) of ``function``'s loops that draw with ``next(it)`` where
        ``it = iter(...)`` is made anew in the body of an outer loop, before them: each pass of the
        outer loop restarts the data, and the range counts the microbatches of that pass."""
        return self._get("pass_ranges", function, lambda: _pass_ranges(function))  # type: ignore[return-value]

    def leaf_nodes(self, test: cst.BaseExpression) -> list[cst.CSTNode]:
        """The whole dotted names a condition reads (not a callee, not part of a longer name)."""
        return self._get("leaves", test, lambda: [  # type: ignore[return-value]
            n for n in walk(test)
            if isinstance(n, (cst.Name, cst.Attribute)) and dotted(n) is not None and not _is_callee(n, test)])


def _renamed(value: Unknown, fresh: Unknown) -> Unknown:
    """``fresh``, ``value`` under a new name, keeping what it knows of its number's shape."""
    fresh.computed = value.computed
    return Multiple(fresh, value.count, value.unit) if isinstance(value, Multiple) else fresh


def _named(value: object, name: str) -> object:
    """A value built by a call takes the name it is assigned to (``args = parser.parse_args()``
    is ``args``; ``opt = AdamW(...)`` is ``opt``), so that labels read as the code does. A
    run-level number computed from the configuration (``accumulate = max(round(nbs / bs), 1)``)
    becomes a source of its own: the name is what a configuration binds, not what it is
    computed from (a clamped number that varies, a warm-up's ``max(1, interp(ni, ...))``, too)."""
    if isinstance(value, Unknown) and value.origin is Origin.RUN and value.label is not None \
            and value.label != name and _computed(value.label):
        if value.gate is None:  # (an A-named source stays: `groups = ceil(n / accum)` follows once A is bound)
            kept = frozenset(s for s in value.sources if conventions.ACCUMULATION_NAME.search(last_segment(s)))
            return _renamed(value, Unknown(name, Origin.RUN, kept | {name}, restored=value.restored,
                                           feeds=value.feeds))
        if value.label.startswith(_CLAMPS):
            return _renamed(value, Unknown(name, Origin.RUN, value.sources | {name}, value.gate | {name},
                                           value.modulo, restored=value.restored, feeds=value.feeds))
    if isinstance(value, Unknown) and value.origin is Origin.RUN and (value.label is None or "(" in value.label):
        return _renamed(value, Unknown(name, Origin.RUN, value.sources, value.gate, value.modulo,
                                       restored=value.restored, feeds=value.feeds))
    if isinstance(value, Obj) and "(" in value.label:
        value.label = name
    return value


#: rounding functions of one number the runs compute (``math.ceil(n / accum)``: a count of groups)
#: (not ``round``: a warm-up ramp ``round(k / 3)`` that the runs compute would stand for A, which the
#: configurations bind by the name it is assigned to)
_ROUNDINGS: dict[str, Callable[[float], int]] = {"math.ceil": math.ceil, "math.floor": math.floor, "ceil": math.ceil,
                                                 "floor": math.floor}
#: calls that make a whole number of a ratio (how A is computed from batch sizes)
_CLAMPS = ("max(", "min(", "int(", "round(", "math.ceil(", "math.floor(", "ceil(", "floor(")


def _computed(label: str) -> bool:
    """Whether a label is arithmetic on other values (``nbs / bs``, ``max(a, 1)``), not a plain
    read (``args.accum``), a call that builds an object (``parser.parse_args()``), a lookup or a
    condition (``(i + 1) % accum == 0`` is a flag, not a number)."""
    if any(f" {op} " in label for op in ("==", "!=", "<", ">", "<=", ">=", "and", "or", "in", "is")) \
            or label.startswith("not "):
        return False
    return any(f" {op} " in label for op in ("/", "//", "*", "+", "-", "%")) or label.startswith(_CLAMPS)


def label_text(value: object) -> str:
    """A short name for a value in notes and event targets."""
    if isinstance(value, (Unknown, Obj)):
        return value.label or "?"
    if isinstance(value, LabeledInt):
        return value.label
    if isinstance(value, (int, float, str, bool)) or value is None:
        return repr(value)[:40]
    if isinstance(value, Function):
        return _name_of(value.definition)
    if isinstance(value, BoundMethod):
        return value.label
    return type(value).__name__  # never repr(): a value may hold a syntax tree


#: set while a test is evaluated with the named constants at their values (:meth:`Interpreter._with_constants`)
_CONSTANTS_FIXED = [False]


def _constant(value: object) -> bool:
    """Whether ``value`` is fixed by the code alone: a literal, a named constant the configuration
    has not bound, or a number computed from them (:class:`Derived`)."""
    return isinstance(value, (Literal, Derived)) or isinstance(value, LabeledInt) and not value.bound


def _meets_counter(left: object, right: object) -> bool:
    """A named constant the configuration has not bound, set against a counter: until the run
    knows whether it is A, the result is unknown (its gate names the constant)."""
    return not _CONSTANTS_FIXED[0] and any(isinstance(a, LabeledInt) and not a.bound and varies(b)
                                           for a, b in ((left, right), (right, left)))


def _constant_label(node: cst.BaseExpression) -> str | None:
    """The label a configuration binds for ``node``: a dotted name, or a string key of a dict
    constant (``config["accum"]`` is ``config['accum']``)."""
    if isinstance(node, cst.Subscript) and len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index) \
            and isinstance(node.slice[0].slice.value, cst.SimpleString):
        return f"{dotted(node.value)}[{node.slice[0].slice.value.evaluated_value!r}]"
    return dotted(node)


def _limited(iterator: Iterator[object]) -> Iterator[object]:
    for count, item in enumerate(iterator):
        if count >= MAX_ITERATIONS:
            raise BudgetExceeded(f"a loop over concrete values ran past {MAX_ITERATIONS} iterations")
        yield item


def _may_compute_loss(function: cst.FunctionDef) -> bool:
    """Whether ``function`` may compute a loss: its name says so (:data:`LOSS_HELPER_NAME`), or it calls
    one of its parameters (``crit(net(x), y)``: a model or a criterion handed in)."""
    if LOSS_HELPER_NAME.search(function.name.value.encode()) is not None:
        return True
    params = {p.name.value for p in (*function.params.posonly_params, *function.params.params)}
    return any(type(node) is cst.Call and type(node.func) is cst.Name and node.func.value in params
               for node in walk(function.body))


def _loss_feeds(receiver: object, argument: object) -> Feeds | None:
    """The forwards the loss of a backward was computed from: ``loss.backward()``'s receiver, or
    the loss handed to ``backward(loss)``; None where a forward's output went to an object out of
    sight and read back (:meth:`Interpreter._holds`), or where the loss is no value the run holds."""
    loss = receiver if is_data(receiver) or argument is None else argument
    return loss.feeds if isinstance(loss, Unknown) else None


#: tensor methods whose results hold no autograd graph: what they return feeds no backward
_DETACHING = frozenset({"item", "detach", "argmax", "argmin", "tolist", "numpy"})


def _combined(args: list[object], kwargs: dict[str, object]) -> Origin:
    values = [*args, *kwargs.values()]
    if any(is_data(v) or isinstance(v, (list, tuple)) and any(is_data(i) for i in v) for v in values):
        return Origin.DATA  # (`torch.stack(losses)` of a list of data too)
    if any(isinstance(v, Unknown) and v.origin is Origin.CALLER for v in values):
        return Origin.CALLER
    return Origin.RUN


def _flag_key(value: object) -> object:
    """The key of a model's DDP sync flag: an object's number, or the label of one built out of sight."""
    return value.number if isinstance(value, Obj) else value.label if isinstance(value, Unknown) else None


def _truth(value: object) -> bool:
    try:
        return bool(value)
    except Exception:  # noqa: BLE001 — a value whose truth we cannot take counts as true
        return True


_BINARY = {
    "Add": lambda a, b: a + b, "Subtract": lambda a, b: a - b, "Multiply": lambda a, b: a * b,
    "Divide": lambda a, b: a / b, "FloorDivide": lambda a, b: a // b, "Modulo": lambda a, b: a % b,
    "Power": lambda a, b: a ** b if abs(b) < 64 else None, "BitAnd": lambda a, b: a & b,
    "BitOr": lambda a, b: a | b, "LeftShift": lambda a, b: a << b if b < 64 else None,
    "RightShift": lambda a, b: a >> b,
}


def _binary(operator: str, left: object, right: object, code: str) -> object:
    if _CONSTANTS_FIXED[0] and operator == "Modulo" and _plain_int(left) and isinstance(right, Unknown) \
            and right.origin is Origin.RUN:
        return left % 2  # a period the run does not know (:meth:`Interpreter._with_constants`)
    if isinstance(left, Unknown) or isinstance(right, Unknown) or _meets_counter(left, right):
        counted = _counted_in_units(operator, left, right)
        if counted is not None:
            return counted
        value = combined([left, right], code, modulo=operator == "Modulo")
        value.computed = True
        if value.origin is Origin.DATA:
            value.factor = scaled(operator, left, right)
        multiple = _multiple(operator, left, right)
        return value if multiple is None else Multiple(value, *multiple)
    function = _BINARY.get(operator)
    if function is None:
        return Unknown(code)
    try:
        result = function(left, right)
    except Exception:  # noqa: BLE001 — division by zero, a type mismatch: an unknown, as at run time
        return Unknown(code)
    if isinstance(left, Literal) and isinstance(right, Literal) and type(result) is int:
        return Literal(result)  # `2 * 8` written in the code is as constant as its parts
    if _constant(left) and _constant(right) and type(result) is int:
        return Derived(result)  # `batch_size // micro_batch_size` of named constants: fixed for the run
    return Unknown(code) if result is None else result


def _unit(value: object) -> bool:
    """Whether ``value`` can be the unit of a :class:`Multiple`: a number fixed for the run, unknown."""
    return isinstance(value, Unknown) and not isinstance(value, Multiple) and value.origin is Origin.RUN \
        and not value.varies


def _multiple(operator: str, left: object, right: object) -> tuple[int, Unknown] | None:
    """``(count, unit)`` of ``left <operator> right`` as copies of one run-level unknown: 0 plus
    the unit is one copy, a multiple plus or minus its unit one more or one less."""
    if operator == "Add" and _unit(right) and isinstance(left, int) and not isinstance(left, bool) and left == 0:
        return 1, right  # type: ignore[return-value]
    if operator in ("Add", "Subtract") and isinstance(left, Multiple) and left.same_unit(right):
        return left.count + (1 if operator == "Add" else -1), left.unit
    if operator == "Add" and (isinstance(right, Multiple) or _unit(left) and not _unit(right)):
        return _multiple(operator, right, left)  # (`unit + seen`)
    return None


def _counted_in_units(operator: str, left: object, right: object) -> object:
    """A multiple divided by its own unit: the count of copies (a plain, varying integer), 0 for zero
    copies; None otherwise."""
    if operator not in ("FloorDivide", "Divide"):
        return None
    if isinstance(left, Multiple) and left.same_unit(right):
        count = left.count
    elif isinstance(left, int) and not isinstance(left, bool) and left == 0 and _unit(right):
        count = 0  # no copy yet (the counter as it starts)
    else:
        return None
    return count if operator == "FloorDivide" else float(count)


_COMPARE = {
    "Equal": lambda a, b: a == b, "NotEqual": lambda a, b: a != b, "LessThan": lambda a, b: a < b,
    "LessThanEqual": lambda a, b: a <= b, "GreaterThan": lambda a, b: a > b,
    "GreaterThanEqual": lambda a, b: a >= b, "Is": lambda a, b: a is b, "IsNot": lambda a, b: a is not b,
    "In": lambda a, b: a in b, "NotIn": lambda a, b: a not in b,
}


def _compare(operator: str, left: object, right: object, code: str) -> object:
    if operator in ("Is", "IsNot") and None in (left, right) and any(
            isinstance(side, Unknown) and side.computed for side in (left, right)):
        return operator == "IsNot"  # a number the code computed is never None
    if isinstance(left, Unknown) or isinstance(right, Unknown) or _meets_counter(left, right):
        value = combined([left, right], code)
        value.computed = True
        return value
    if isinstance(left, (Obj, Function, ProjectClass, BoundMethod, _Loader, _Iteration)) or \
            isinstance(right, (Obj, Function, ProjectClass, BoundMethod, _Loader, _Iteration)):
        if operator in ("Is", "IsNot", "Equal", "NotEqual"):
            same = left is right
            return same if operator in ("Is", "Equal") else not same
        return Unknown(code)
    try:
        return bool(_COMPARE[operator](left, right))
    except Exception:  # noqa: BLE001
        return Unknown(code)


def _item_label(label: str | None, key: int | str) -> str:
    """The name of ``label[key]``, an item of a mapping the run does not show (``state['iter_num']``):
    what the run stores it under and binds it by."""
    return f"{label}[{key!r}]"


@functools.lru_cache(maxsize=8192)
def _code(node: cst.CSTNode) -> str:
    """The node's code on one line, cut at 80 characters (nodes hash by identity)."""
    try:
        text = cst.Module([]).code_for_node(node)
    except Exception:  # noqa: BLE001
        return type(node).__name__
    text = " ".join(text.split())
    return text if len(text) <= 80 else text[:77] + "..."


#: the statements that make a branch matter to a run (:meth:`SyntaxFacts.matters`) beside its events
_MATTERING = exact_kinds(cst.Assign, cst.AugAssign, cst.AnnAssign, cst.Return, cst.Raise, cst.Continue, cst.Break,
                         cst.Assert)
#: the code :func:`walk` does not enter: it runs when called, not where it is written
_NESTED_CODE = exact_kinds(cst.Lambda, cst.FunctionDef)
#: the nodes that name a value read (the hot walks test the exact type: see :func:`exact_kinds`)
_NAMED = exact_kinds(cst.Name, cst.Attribute)


def walk(node: cst.CSTNode, statements_only: bool = False) -> Iterator[cst.CSTNode]:
    """``node`` and the nodes below it in source order, not inside nested definitions (that code
    runs when called, not where it is written). ``statements_only``: nor inside expressions and
    small statements, where no statement is (the scans of a module's assignments)."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        kind = type(current)  # exact types: isinstance on LibCST's (ABC) node classes is slow
        if kind in _NESTED_CODE or (statements_only and not holds_statements(kind)):
            continue
        stack.extend(reversed(children(current)))


def _is_callee(node: cst.CSTNode, root: cst.CSTNode) -> bool:
    for parent in walk(root):
        if isinstance(parent, cst.Call) and parent.func is node:
            return True
        if isinstance(parent, cst.Attribute) and (parent.value is node or parent.attr is node):
            return True  # only the whole dotted name is a leaf
    return False


def _engine_counters(module: ModuleFunctions,
                     function: cst.FunctionDef) -> tuple[dict[str, int], dict[str, int], frozenset[str]]:
    """The counters (dotted name → value on the first microbatch) of the framework loop that
    drives ``function`` (the engine the module hands it to, the runner that calls its hook),
    else none: those counting across epochs, those restarted with each epoch, and the names
    that hold each microbatch's data (:class:`~accumlint.model.owned_loops.OwnedLoop`)."""
    owned = owned_loops.find(module._module, module).get(function)
    return (owned.counters, owned.epoch_counters, owned.data) if owned is not None else ({}, {}, frozenset())


def _leaves_iteration(body: cst.BaseSuite, returns: bool = True) -> bool:
    """Whether a block ends by leaving the iteration (``continue``, ``break``, ``raise`` and, where
    ``returns``, ``return``)."""
    return _ends_in(body, (cst.Continue, cst.Break, cst.Return, cst.Raise) if returns
                    else (cst.Continue, cst.Break, cst.Raise))


def _ends_in(body: cst.BaseSuite, kinds: tuple[type[cst.BaseSmallStatement], ...]) -> bool:
    """Whether a block's last statement is one of ``kinds``."""
    statements = body.body
    if not statements:
        return False
    last = statements[-1]
    smalls = last.body if isinstance(last, cst.SimpleStatementLine) else \
        (statements if isinstance(body, cst.SimpleStatementSuite) else [])
    return any(isinstance(s, kinds) for s in smalls[-1:])


def _can_end(loop: cst.While) -> bool:
    """Whether the code gives ``loop`` a way out: a ``break`` of its own or a ``return`` in its body, or
    a name (or attribute) of its condition written there. One without (``while x < 10:`` that never
    moves ``x``) runs until a budget ends it."""
    tested = {dotted(n) for n in walk(loop.test) if isinstance(n, (cst.Name, cst.Attribute))} - {None}
    stack: list[tuple[cst.CSTNode, bool]] = [(loop.body, True)]
    while stack:
        node, own = stack.pop()
        kind = type(node)
        if kind is cst.Return or kind is cst.Break and own:
            return True
        if kind in (cst.Assign, cst.AugAssign, cst.AnnAssign):
            targets = [t.target for t in node.targets] if kind is cst.Assign else [node.target]
            if any(dotted(n) in tested for t in targets for n in walk(t) if isinstance(n, (cst.Name, cst.Attribute))):
                return True
        if kind in (cst.FunctionDef, cst.ClassDef, cst.Lambda):
            continue
        inner = own and kind not in (cst.For, cst.While)  # (a `break` in a nested loop leaves that loop)
        stack.extend((child, inner) for child in children(node))
    return False


def _parts(value: object) -> Iterator[object]:
    """The parts of a microbatch already drawn (its chunks, its slices): two of them, none a
    microbatch of its own."""
    return iter([Unknown(f"a part of {label_text(value)}", Origin.DATA)] * 2)


def _yields_nothing(definition: cst.FunctionDef) -> bool:
    """A generator whose every ``yield`` is a statement of its own with no value (it marks passes)."""
    yields = [n for n in walk(definition.body) if type(n) in (cst.Yield, cst.From)]
    return bool(yields) and all(type(n) is cst.Yield and n.value is None for n in yields) and all(
        type(s) is cst.Expr and type(s.value) is cst.Yield or not any(type(n) is cst.Yield for n in walk(s))
        for s in walk(definition.body) if isinstance(s, cst.BaseSmallStatement))


def _counted_parameters(function: cst.FunctionDef) -> set[str]:
    """The parameters of ``function`` that count something in it: ``range(n)``, ``[x] * n``, ``n - 1``."""
    params = {p.name.value for p in function.params.params}
    found: set[str] = set()
    for node in walk(function.body):
        if type(node) is cst.Call and dotted(node.func) == "range":
            found.update(a.value.value for a in node.args if type(a.value) is cst.Name)
        elif type(node) is cst.BinaryOperation and type(node.operator) in (cst.Multiply, cst.Subtract):
            found.update(side.value for side in (node.left, node.right) if type(side) is cst.Name)
    return found & params


@functools.lru_cache(maxsize=4096)
def _is_generator(definition: cst.FunctionDef) -> bool:
    """Whether ``definition`` yields (not in a nested definition): calling it makes an iterator.
    Cached: a helper is called again and again in every run (walking its body each time was
    a large share of the simulator's time on the corpus loop files)."""
    return any(type(node) is cst.Yield for node in walk(definition.body))


def _rescales_gradient(node: cst.AugAssign) -> bool:
    """``p.grad /= A``, ``p.grad *= s``: the gradient rescaled in place, which the group-structure
    rules do not count as gradients written by hand (as ``checks/resets.py`` does not)."""
    return isinstance(node.target, cst.Attribute) and node.target.attr.value == "grad" \
        and isinstance(node.operator, (cst.DivideAssign, cst.MultiplyAssign))


@functools.lru_cache(maxsize=4096)
def _writes_gradients(node: cst.CSTNode) -> bool:
    """Whether ``node`` sets gradients to something (``p.grad = buf``, ``p.grad += g``,
    ``p.grad.copy_(g)``), not only resets them."""
    for child in walk(node):
        if isinstance(child, cst.Assign) and not (isinstance(child.value, cst.Name) and child.value.value == "None"):
            if any(isinstance(t.target, cst.Attribute) and t.target.attr.value == "grad" for t in child.targets):
                return True
        if isinstance(child, cst.AugAssign) and isinstance(child.target, cst.Attribute) \
                and child.target.attr.value == "grad" and not _rescales_gradient(child):
            return True
        if isinstance(child, cst.Call) and isinstance(child.func, cst.Attribute) \
                and child.func.attr.value in ("copy_", "add_") and isinstance(child.func.value, cst.Attribute) \
                and child.func.value.attr.value == "grad":
            return True
    return False


_NEGATED = {"IsNot": "is", "NotEqual": "==", "NotIn": "in"}
#: ``A > 1``, ``A >= 2``, ``A != 1`` (and mirrored): the side of a comparison where A accumulates
_ABOVE_ONE = {("GreaterThan", 1), ("GreaterThanEqual", 2), ("NotEqual", 1)}
_MIRRORED = {"LessThan": "GreaterThan", "LessThanEqual": "GreaterThanEqual", "NotEqual": "NotEqual"}


def _tests_accumulation(test: cst.BaseExpression) -> bool:
    """Whether a condition reads as "A is more than 1" on a name that looks like A."""
    if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1):
        return False
    operator = type(test.comparisons[0].operator).__name__
    left, right = test.left, test.comparisons[0].comparator
    if isinstance(left, cst.Integer):  # `1 < cfg.accum`
        left, right, operator = right, left, _MIRRORED.get(operator, "")
    name = dotted(left) if isinstance(left, (cst.Name, cst.Attribute)) else None
    return (name is not None and isinstance(right, cst.Integer)
            and (operator, int(right.evaluated_value)) in _ABOVE_ONE
            and conventions.ACCUMULATION_NAME.search(last_segment(name)) is not None)


def _choice_key(test: cst.BaseExpression) -> tuple[str, bool]:
    """The run-level choice a condition reads, and whether it reads its negation: ``not x``,
    ``x is not None``, ``x != y`` are the choices of ``x``, ``x is None`` and ``x == y``, so
    a run never takes both a condition and its negation as true."""
    negated = False
    while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        test, negated = test.expression, not negated
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        operator = type(test.comparisons[0].operator).__name__
        if operator in _NEGATED:
            return f"{_code(test.left)} {_NEGATED[operator]} {_code(test.comparisons[0].comparator)}", not negated
    return _code(test), negated


@functools.lru_cache(maxsize=4096)
def _bound_names(node: cst.CSTNode) -> frozenset[str]:
    """The plain names a loop (or a branch) binds (cached, as :func:`_writes_gradients`: each run meets
    the loop again)."""
    names = set()
    for child in walk(node):
        if type(child) is cst.AssignTarget and type(child.target) is cst.Name:
            names.add(child.target.value)
        elif (type(child) is cst.AugAssign or type(child) is cst.AnnAssign) and type(child.target) is cst.Name:
            names.add(child.target.value)
    if isinstance(node, cst.For) and isinstance(node.target, cst.Name):
        names.add(node.target.value)
    return frozenset(names)


@functools.lru_cache(maxsize=1024)
def _choice_tests(function: cst.FunctionDef) -> dict[str, tuple[cst.If, ...]]:
    """The ``if`` statements of ``function`` (not of its nested definitions) by the run-level choice
    their test reads (:func:`_choice_key`), in order."""
    found: dict[str, list[cst.If]] = {}
    for node in walk(function.body, statements_only=True):
        if type(node) is cst.If:
            found.setdefault(_choice_key(node.test)[0], []).append(node)
    return {key: tuple(statements) for key, statements in found.items()}


#: the list methods that add items
_GROWING = frozenset({"append", "extend", "insert"})


@functools.lru_cache(maxsize=4096)
def _grown_names(node: cst.For | cst.While) -> frozenset[str]:
    """The plain names a loop calls a growing list method on (``held.append(x)``), cached as
    :func:`_bound_names`."""
    return frozenset(call.func.value.value for call in _calls(node)  # type: ignore[union-attr]
                     if isinstance(call.func, cst.Attribute) and call.func.attr.value in _GROWING
                     and type(call.func.value) is cst.Name)


def _catches(handler: cst.ExceptHandler, name: str) -> bool:
    if handler.type is None:
        return True
    names = [dotted(e.value) for e in handler.type.elements] if isinstance(handler.type, cst.Tuple) \
        else [dotted(handler.type)]
    return any(n is not None and last_segment(n) in (name, "Exception", "BaseException") for n in names)


def _exception_name(node: cst.BaseExpression) -> str:
    target = node.func if isinstance(node, cst.Call) else node
    name = dotted(target)
    return last_segment(name) if name else "Exception"


def _member_iterator(node: cst.BaseExpression) -> bool:
    """Whether ``node`` is ``x.parameters()`` or another of ``nn.Module``'s iterators over its own
    members (:data:`accumlint.frameworks.pytorch.MODULE_MEMBER_ITERATORS`), or ``iter()`` of one."""
    if type(node) is cst.Call and type(node.func) is cst.Name and node.func.value == "iter" and len(node.args) == 1:
        node = node.args[0].value
    return type(node) is cst.Call and type(node.func) is cst.Attribute \
        and node.func.attr.value in fw.pytorch.MODULE_MEMBER_ITERATORS


def _name_of(definition: cst.FunctionDef | cst.Lambda) -> str:
    return definition.name.value if isinstance(definition, cst.FunctionDef) else "<lambda>"


def _is_static(definition: cst.FunctionDef | cst.Lambda) -> bool:
    return isinstance(definition, cst.FunctionDef) and any(
        dotted(d.decorator) in ("staticmethod", "classmethod") for d in definition.decorators)


def _is_property(definition: cst.FunctionDef) -> bool:
    return any(dotted(d.decorator) in ("property", "functools.cached_property", "cached_property")
               for d in definition.decorators)


def is_abstract(definition: cst.FunctionDef) -> bool:
    """Whether ``definition`` is a stub that subclasses implement: a body of only a docstring,
    ``pass``, ``...`` and ``raise NotImplementedError``, with that raise or ``@abstractmethod``
    (what follows the raise never runs)."""
    body = definition.body.body if isinstance(definition.body, cst.IndentedBlock) else ()
    raises = False
    for statement in body:
        if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
            return False
        small = statement.body[0]
        raised = small.exc.func if isinstance(small, cst.Raise) and isinstance(small.exc, cst.Call) else \
            small.exc if isinstance(small, cst.Raise) else None
        if raised is not None and last_segment(dotted(raised) or "") == "NotImplementedError":
            raises = True
            break
        if not isinstance(small, cst.Pass) and not (isinstance(small, cst.Expr) and isinstance(
                small.value, (cst.SimpleString, cst.ConcatenatedString, cst.Ellipsis))):
            return False
    return raises or any(last_segment(dotted(d.decorator) or "") == "abstractmethod" for d in definition.decorators)


def _is_imported(label: str, owner: ModuleFunctions) -> bool:
    return owner.imports.qualify(label.split(".")[0]) is not None


@functools.lru_cache(maxsize=4096)
def _named_role(label: str | None) -> Role | None:
    """The role a variable's name suggests (the weakest evidence), if any. Cached: every run asks
    it of the same few labels, each a scan of :data:`~accumlint.model.conventions.NAME_PATTERNS`."""
    if not label:
        return None
    segment = last_segment(label).lower()
    return next((r for p, r in conventions.NAME_PATTERNS if p.match(segment)), None)


def _driven_method(driver: CountingDriver, method: str) -> bool:
    """Whether the driver runs ``method`` of its counter itself: the counting call, the boundary
    flag asked by a call, a call that sets the boundary by hand."""
    return method == driver.counts or driver.flag_call and method == driver.flag or method in driver.manual_calls


def _counter_key(value: object) -> object:
    """The key of a value that may count microbatches: an object's number, an unknown's label."""
    if isinstance(value, Obj):
        return value.number
    return value.label if isinstance(value, Unknown) and value.label else None


#: statements that bind or change a name, an attribute or an item
_ASSIGNING = (cst.Assign, cst.AugAssign, cst.AnnAssign, cst.Del, cst.NamedExpr, cst.For, cst.While, cst.With)


def _built_loader(value: object) -> bool:
    """Whether ``value`` is a data loader the run saw a library build (``DataLoader(dataset, ...)``):
    its items are microbatches, or bundles of them that an inner loop trains on one by one
    (:meth:`SyntaxFacts.bundles`), never loaders of their own."""
    return isinstance(value, Obj) and value.role is Role.LOADER and value.built is not None


def _is_loader(value: object) -> bool:
    if isinstance(value, Obj):
        return value.role is Role.LOADER
    return isinstance(value, Unknown) and _named_role(value.label) is Role.LOADER


def _draws_data(body: cst.CSTNode, owner: ModuleFunctions, depth: int = 0, loops_that_train: bool = False,
                skip: frozenset[int] = frozenset(), peeks: bool = True, handed: Handed = frozenset()) -> bool:
    """Whether a loop body draws data itself: it holds a loop or a ``next(...)``, or calls a
    project function that trains on data it draws (``for epoch in range(n): train_one_epoch(...)``)
    or that takes the next item (``batch = stepper.draw()`` returning ``next(self.stream)``).
    ``loops_that_train``: a loop inside counts only where it reaches a training event (a loop over
    the optimizer's parameter groups that sets the learning rate draws no microbatch; one that steps
    each of several optimizers is left as drawing, as before); ``skip``: the calls (their ids)
    already answered for; ``peeks``: whether a project function's ``next(iter(loader))`` counts
    (:func:`_peeks`: a sample plotted, or a fetch that restarts the data, ACC009's); ``handed``: as
    :func:`_reaches_function`'s."""
    for child in walk(body):
        if isinstance(child, (cst.For, cst.While)) and (
                not loops_that_train or _reaches(child.body, owner, 0, set(), EVENT_NAMES, handed)):
            return True
        if _is_next(child):
            return True
    if depth < 3:
        for call in _calls(body):
            if id(call) in skip:
                continue
            if any(any(_is_next(n) and (peeks or not _peeks(n)) for n in _calls(c.body)) or
                   _draws_data(c.body, o, depth + 1, loops_that_train, peeks=peeks, handed=given)
                   and _reaches(c.body, o, 0, set(), BACKWARD_NAMES, given)
                   for c, o, given in _runs(call, owner, handed)):
                return True
    return False


def _plain_int(value: object) -> bool:
    """Whether ``value`` is a number the code wrote (not a run-level count bound to one)."""
    return isinstance(value, int) and not isinstance(value, (bool, LabeledInt))


def _is_next(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == "next"


def _peeks(call: cst.Call) -> bool:
    """Whether a ``next(...)`` call takes the first item of an iterator made for it
    (``next(iter(val_loader))``): a look at the data (a sample to plot), not a draw from a stream."""
    return bool(call.args) and isinstance(call.args[0].value, cst.Call) and dotted(call.args[0].value.func) == "iter"


def _finite_branch(test: cst.BaseExpression) -> bool | None:
    """The branch ``test`` takes when every value it checks is finite, if it is a NaN/inf guard
    (``torch.isnan(loss)``, ``not torch.isfinite(norm).all()``, ``math.isinf(x) or math.isnan(x)``),
    else None."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, (cst.Not, cst.BitInvert)):
        inner = _finite_branch(test.expression)
        return None if inner is None else not inner
    if isinstance(test, cst.BooleanOperation):
        left, right = _finite_branch(test.left), _finite_branch(test.right)
        if left is None or right is None:
            return None
        return (left and right) if isinstance(test.operator, cst.And) else (left or right)
    if not isinstance(test, cst.Call) or not isinstance(test.func, (cst.Name, cst.Attribute)):
        return None
    name = test.func.value if isinstance(test.func, cst.Name) else test.func.attr.value
    if name in ("any", "all", "item") and isinstance(test.func, cst.Attribute) and not test.args:
        return _finite_branch(test.func.value)  # (any/all of a tensor check: the same on finite values)
    return fw.pytorch.NON_FINITE_CHECKS.get(name)


def _pass_ranges(function: cst.FunctionDef) -> frozenset[int]:
    """:meth:`SyntaxFacts.pass_ranges`."""
    found: set[int] = set()
    for outer in walk(function.body):
        if type(outer) not in (cst.For, cst.While):
            continue
        restarted: set[str] = set()  # iterators made anew in this pass, so far
        for statement in outer.body.body:
            for node in walk(statement):
                if type(node) is cst.Assign and type(node.value) is cst.Call and dotted(node.value.func) == "iter":
                    restarted.update(t.target.value for t in node.targets if type(t.target) is cst.Name)
                elif type(node) is cst.For and type(node.iter) is cst.Call and dotted(node.iter.func) == "range" \
                        and any(type(c.func) is cst.Name and c.func.value == "next" and c.args
                                and type(c.args[0].value) is cst.Name and c.args[0].value.value in restarted
                                for c in _calls(node.body)):
                    found.add(id(node.iter))
    return frozenset(found)


def _streams(function: cst.FunctionDef, owner: ModuleFunctions, depth: int = 0, seen: set[int] | None = None) -> bool:
    """:meth:`SyntaxFacts.streams`, through the project functions and methods ``function``
    calls (a few levels: ``stepper.run(i)`` that draws ``next(self.data_iter)``)."""
    parameters = {p.name.value for p in (*function.params.posonly_params, *function.params.params,
                                          *function.params.kwonly_params)}
    seen = seen if seen is not None else {id(function)}
    for call in _calls(function.body):
        if isinstance(call.func, cst.Name) and call.func.value == "next" and call.args:
            source = call.args[0].value
            if isinstance(source, cst.Attribute) or isinstance(source, cst.Name) and source.value in parameters:
                return True
        if depth < 2:
            for candidate, candidate_owner in _callees(call.func, _call_name(call.func), owner, call):
                if id(candidate) not in seen:
                    seen.add(id(candidate))
                    if _streams(candidate, candidate_owner, depth + 1, seen):
                        return True
    return False


@functools.lru_cache(maxsize=64)
def _assigned_to(module: cst.Module) -> dict[int, frozenset[str]]:
    """Per conditional expression that is an assignment's whole value (``s = A() if c else None``),
    the names it is assigned to, over the whole module."""
    return {id(n.value): frozenset(t.target.value for t in n.targets if type(t.target) is cst.Name)
            for n in every_node(module) if type(n) is cst.Assign and type(n.value) is cst.IfExp}


@functools.lru_cache(maxsize=64)
def _called_names(module: cst.Module) -> frozenset[str]:
    """The names that are the callee or the receiver's root of a call anywhere in ``module``
    (``stepper(loss, opt)``, ``net(x)``, ``scaler.step(opt)``)."""
    found = set()
    for call in every_node(module):
        if type(call) is cst.Call:
            root = call.func
            while isinstance(root, cst.Attribute):
                root = root.value
            if type(root) is cst.Name:
                found.add(root.value)
    return frozenset(found)


def reaches_function(node: cst.CSTNode, owner: ModuleFunctions, function: cst.FunctionDef) -> bool:
    """Whether ``node`` (code of ``owner``) calls ``function``, directly or through the project's
    functions and methods (a few levels), by the syntactic resolution the walkers use (a function or
    method by name or import, an instance's ``__call__``): where the project shows who drives a body."""
    return _reaches_function(node, owner, function, 0, set())


def _reaches_function(node: cst.CSTNode, owner: ModuleFunctions, function: cst.FunctionDef, depth: int,
                      seen: set[int], handed: Handed = frozenset()) -> bool:
    """``handed``: the instances of project classes the caller hands the code's parameters (:data:`Handed`)."""
    for call in _calls(node):
        for candidate, candidate_owner, given in _runs(call, owner, handed):
            if candidate is function:
                return True
            if depth < 3 and id(candidate) not in seen:
                seen.add(id(candidate))
                if _reaches_function(candidate.body, candidate_owner, function, depth + 1, seen, given):
                    return True
    return False


#: per parameter name, the project classes (each with its module) whose instance a caller hands it
#: (``train_one_epoch(model, loader, loss_scaler)`` with ``loss_scaler = NativeScaler()``: in the
#: callee, calling ``loss_scaler`` runs that class's ``__call__``); a frozenset, so that the cached
#: walkers can take it
Handed = frozenset[tuple[str, tuple[tuple[ModuleFunctions, cst.ClassDef], ...]]]


def _runs(call: cst.Call, owner: ModuleFunctions,
          handed: Handed = frozenset()) -> list[tuple[cst.FunctionDef, ModuleFunctions, Handed]]:
    """The project functions and methods ``call`` (code of ``owner``) may run: by name or import
    (:func:`_callees`), or a method of an instance ``handed`` to the code it is in; each with the
    instances the call hands to its parameters, for the walkers that follow it."""
    found = [*_callees(call.func, _call_name(call.func), owner, call), *_handed_methods(call, handed)]
    stored = _stored_handed(call, owner)
    if type(call.func) is cst.Attribute and dotted(call.func.value) == "self":  # (`self.m()`: the same instance)
        stored |= {given for given in handed if given[0].startswith("self.")}
    return [(callee, module, _handed_classes(call, callee, module, owner) | stored) for callee, module in found]


def _handed_classes(call: cst.Call, callee: cst.FunctionDef, callee_owner: ModuleFunctions,
                    owner: ModuleFunctions) -> Handed:
    """The parameters of ``callee`` (of ``callee_owner``) that ``call`` (code of ``owner``) hands an
    instance of a project class, with the class: a name ``owner`` binds to one built from a class of
    its own or imported (:func:`_instance_classes`)."""
    built = _instance_classes(owner)
    if not built or not any(dotted(arg.value) in built for arg in call.args):
        return frozenset()
    params = [p.name.value for p in (*callee.params.posonly_params, *callee.params.params)]
    if callee_owner.class_of.get(callee) is not None and type(call.func) is cst.Attribute:
        params = params[1:]  # `self.fit(loader, scaler)`: the receiver is the first
    positional = [arg for arg in call.args if arg.keyword is None and not arg.star]
    found = {(param, built[dotted(arg.value)]) for param, arg in zip(params, positional, strict=False)  # type: ignore[index]
             if dotted(arg.value) in built}
    found |= {(arg.keyword.value, built[dotted(arg.value)]) for arg in call.args  # type: ignore[index]
              if arg.keyword is not None and dotted(arg.value) in built}
    return frozenset(found)


@functools.lru_cache(maxsize=64)
def _instance_classes(owner: ModuleFunctions) -> dict[str, tuple[tuple[ModuleFunctions, cst.ClassDef], ...]]:
    """The names ``owner`` binds to an instance of a project class, its own (:func:`_instances`) or
    imported (:func:`_imported_instance_classes`), with the classes each may hold."""
    built = dict(_imported_instance_classes(owner))
    for name, class_def in _instances(owner).items():
        built[name] = (*built.get(name, ()), (owner, class_def))
    return built


def _handed_methods(call: cst.Call, handed: Handed) -> list[tuple[cst.FunctionDef, ModuleFunctions]]:
    """The methods ``call`` runs on an instance ``handed`` to the code it is in: ``scaler(...)``
    runs the class's ``__call__``, ``scaler.m(...)`` its ``m`` (written in the class's own body)."""
    if not handed:
        return []
    func = call.func
    if type(func) is cst.Name:
        receiver, method = func.value, "__call__"
    elif type(func) is cst.Attribute and type(func.value) in (cst.Name, cst.Attribute):
        receiver, method = dotted(func.value) or "", func.attr.value  # (`self.stepper.m`: :func:`_stored_handed`)
    else:
        return []
    return [(m, module) for name, classes in handed if name == receiver for module, class_def in classes
            for m in _methods_of(class_def) if m.name.value == method]


def handed_by(code_of: ModuleFunctions, function: cst.FunctionDef, module: ModuleFunctions) -> list[Handed]:
    """Per call in ``code_of``'s module (its functions' and methods' code too) that may run
    ``function`` (of ``module``), what it hands its parameters (:func:`_handed_classes`)."""
    name = function.name.value
    return [_handed_classes(call, function, module, code_of) for call in every_node(code_of._module)
            if type(call) is cst.Call and _call_name(call.func) == name
            and any(c is function for c, _ in _callees(call.func, name, code_of, call))]


def _class_default(owner: ModuleFunctions, class_def: cst.ClassDef,
                   name: str) -> tuple[cst.BaseExpression, ModuleFunctions] | None:
    """The value ``class_def``'s body, or a project base's, assigns to ``name`` at class level
    (``accum = 4``; ``step: int = 0``, a dataclass field's default), with its module; None: none."""
    for module, current in owner.lineage(class_def):
        for statement in current.body.body:
            small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and statement.body else None
            target = small.targets[0].target if isinstance(small, cst.Assign) and len(small.targets) == 1 \
                else small.target if isinstance(small, cst.AnnAssign) else None
            value = small.value if isinstance(small, (cst.Assign, cst.AnnAssign)) else None
            if isinstance(target, cst.Name) and target.value == name and value is not None:
                return value, module
    return None


def _methods_of(class_def: cst.ClassDef) -> tuple[cst.FunctionDef, ...]:
    """The methods written in ``class_def``'s own body."""
    return tuple(s for s in class_def.body.body if type(s) is cst.FunctionDef)


@functools.lru_cache(maxsize=16384)
def _calls(node: cst.CSTNode) -> tuple[cst.Call, ...]:
    """The calls of ``node`` outside nested definitions, in order (asked again and again by the
    syntactic walkers of every entry and run; nodes hash by identity)."""
    return tuple(child for child in walk(node) if type(child) is cst.Call)


#: methods that update the parameters: an optimizer's step, mmengine's update_params
_UPDATE_METHODS = frozenset({"step", fw.mmengine.BACKWARD.method})
#: the calls that make a backward (a loop holding one iterates microbatches)
BACKWARD_NAMES = BACKWARD_CALLS
#: the calls that make a training event of the group: a backward or an update
EVENT_NAMES = BACKWARD_NAMES | {"step"}


def reaches_through(node: cst.CSTNode, owner: ModuleFunctions, handed: Handed,
                    names: frozenset[str] = EVENT_NAMES) -> bool:
    """:func:`reaches_event` where the code's parameters hold the instances ``handed`` to them."""
    return _reaches(node, owner, 0, set(), names, handed)


@functools.lru_cache(maxsize=16384)
def reaches_event(node: cst.CSTNode, owner: ModuleFunctions, names: frozenset[str] = EVENT_NAMES) -> bool:
    """Whether ``node`` calls one of ``names`` (a backward or an optimizer-like ``step``),
    directly or through the project's functions and methods (a few levels). Cached: entry points,
    every run and the rules ask it of the same nodes."""
    return _reaches(node, owner, 0, set(), names)


def _reaches(node: cst.CSTNode, owner: ModuleFunctions, depth: int, seen: set[int], names: frozenset[str],
             handed: Handed = frozenset()) -> bool:
    """``handed``: as :func:`_reaches_function`'s (an instance's ``__call__`` that backpropagates)."""
    for call in _calls(node):
        name = _call_name(call.func)
        if name in names and not _foreign_step(call, name, owner):
            return True
        if depth < 3:
            for candidate, candidate_owner, given in _runs(call, owner, handed):
                if id(candidate) not in seen:
                    seen.add(id(candidate))
                    if _reaches(candidate.body, candidate_owner, depth + 1, seen, names, given):
                        return True
    return False


def _foreign_step(call: cst.Call, name: str, owner: ModuleFunctions) -> bool:
    """Whether ``call`` (named ``name``) is a ``.step(...)`` of an object that is no optimizer
    (:func:`~accumlint.model.events.no_update_steps`). That walk of the whole module is asked for
    a call named ``step`` only: it holds nothing else (a large module without one is never walked)."""
    return name == "step" and id(call) in no_update_steps(owner._module)


@functools.lru_cache(maxsize=16384)
def has_update(node: cst.CSTNode, owner: ModuleFunctions, depth: int = 0, handed: Handed = frozenset()) -> bool:
    """Whether ``node`` performs an optimizer update: ``x.step()`` on a receiver not named a
    scheduler, directly or through the project's functions (cached, as :func:`reaches_event`;
    ``handed``: as :func:`_reaches_function`'s)."""
    for call in _calls(node):
        func = call.func
        if isinstance(func, cst.Attribute) and func.attr.value in _UPDATE_METHODS \
                and not _foreign_step(call, func.attr.value, owner):
            receiver = (dotted(func.value) or "").rsplit(".", 1)[-1].lower()
            if not any(p.match(receiver) and r is Role.SCHEDULER for p, r in conventions.NAME_PATTERNS):
                return True
        if depth < 2:
            for candidate, candidate_owner, given in _runs(call, owner, handed):
                if has_update(candidate.body, candidate_owner, depth + 1, given):
                    return True
    return False


def gated_update(node: cst.CSTNode, owner: ModuleFunctions, depth: int = 0, handed: Handed = frozenset()) -> bool:
    """Whether ``node`` (or a project function it calls, a few levels down) holds an ``if`` that
    decides an optimizer update (holds it, or leaves the iteration before it), or a loop of
    micro-steps (``for _ in range(k)``, or over a generator of the project that yields no value)
    that a backward runs in and that does not update on each pass, or enters a framework's counting
    context (``accelerator.accumulate(model)``), or calls the counting method of a receiver it hands a
    loss to (``engine.backward(loss)``, ``engine.step()``): what binds A. Without one, no run of it can
    show a group of A. ``handed``: as :func:`_reaches_function`'s."""
    if _steps_a_counter(node):
        return True
    for child in walk(node):
        kind = type(child)  # exact types: isinstance on LibCST's (ABC) node classes is slow
        if kind is cst.If and not _is_main_guard(child.test) and (
                has_update(child, owner, 0, handed) or (  # or skips one: `if ...: continue`
                    _leaves_iteration(child.body) and update_follows(child, owner))):
            return True
        if kind is cst.WithItem and isinstance(child.item, cst.Call) and \
                isinstance(child.item.func, cst.Attribute) and child.item.func.attr.value in _COUNTED_ENTRIES:
            return True
        if kind is cst.For and isinstance(child.iter, cst.Call) and (
                dotted(child.iter.func) == "range" or _islice_count(child.iter) is not None) \
                and (_backward_at_own_level(child, owner) and not _updates_each_pass(child, owner)
                     or prefetches(child, owner)):
            return True
        if kind is cst.For and type(child.iter) is cst.Call and _backward_at_own_level(child, owner) \
                and not _updates_each_pass(child, owner) \
                and any(_yields_nothing(callee) for callee, _, _ in _runs(child.iter, owner, handed)):
            return True  # passes counted by a generator of the project (`for _ in contexts(A, ...)`)
    if depth < 3:  # (as deep as :func:`_reaches` looks for the backward: a relay's method, its helper, the stepper)
        for call in _calls(node):
            name = _call_name(call.func)
            # (an optimizer of the project whose `step()` computes the update in place is the update,
            # as the run records it: the tests inside it gate no group)
            if any(gated_update(c.body, o, depth + 1, given) for c, o, given in _runs(call, owner, handed)
                   if name not in _UPDATE_METHODS or _delegates(c, name)):
                return True
    return False


def _is_main_guard(test: cst.BaseExpression) -> bool:
    """``__name__ == "__main__"``: a script run is always its true side, never a choice of updates."""
    return type(test) is cst.Comparison and dotted(test.left) == "__name__" and len(test.comparisons) == 1 \
        and type(test.comparisons[0].operator) is cst.Equal \
        and isinstance(test.comparisons[0].comparator, cst.SimpleString) \
        and test.comparisons[0].comparator.evaluated_value == "__main__"


def _backward_at_own_level(loop: cst.For, owner: ModuleFunctions) -> bool:
    """Whether ``loop``'s body reaches a backward outside the loops nested in it that update: an
    epoch loop around a loop that trains and updates (``for epoch in range(n): for step in range(k):
    ...; opt.step()``) leaves its groups, if any, to the inner loop (a loop over a microbatch's slices,
    which updates nothing, is part of the outer loop's pass)."""
    stack: list[cst.CSTNode] = [loop.body]
    while stack:
        node = stack.pop()
        kind = type(node)
        if kind in (cst.For, cst.While) and has_update(node.body, owner):  # type: ignore[attr-defined]
            continue
        if kind in (cst.SimpleStatementLine, cst.Call):  # (a statement's calls at once: no walk below it)
            if reaches_event(node, owner, names=BACKWARD_NAMES):
                return True
            continue
        stack.extend(children(node))
    return False


def _updates_each_pass(loop: cst.For, owner: ModuleFunctions) -> bool:
    """Whether each pass of ``loop`` updates once, after backwards made at its own level: a statement
    of its body (not under an ``if`` nor a loop) updates, and no loop in its body, nor in a project
    function its body calls, runs a backward (``for _ in range(steps): opt.zero_grad();
    loss_of(batch).backward(); opt.step()``, a test's or a benchmark's loop). Such a loop counts
    optimizer updates, not the micro-steps of a group."""
    statements = loop.body.body if isinstance(loop.body, cst.IndentedBlock) else ()
    if not any(type(s) is cst.SimpleStatementLine and has_update(s, owner) for s in statements):
        return False
    bodies = [(loop.body, owner)] + [(c.body, o) for call in _calls(loop.body)
                                     for c, o in _callees(call.func, _call_name(call.func), owner, call)]
    return not any(type(inner) in (cst.For, cst.While) and reaches_event(inner.body, o, names=BACKWARD_NAMES)
                   for body, o in bodies for inner in every_node(body))


def prefetches(loop: cst.For, owner: ModuleFunctions) -> bool:
    """Whether ``loop`` draws a group's microbatches ahead of their backwards: it draws data and
    trains on none, it fills a list (``held.append(next(it))``, at any depth), and a later
    statement of its block iterates that list in a loop that reaches a backward, an update
    following (``for x, y in held: loss(x, y).backward()`` then ``opt.step()``)."""
    if reaches_event(loop.body, owner, names=BACKWARD_NAMES) or not _draws_data(loop.body, owner):
        return False
    filled = {call.func.value.value for call in _calls(loop.body)  # type: ignore[union-attr]
              if isinstance(call.func, cst.Attribute) and call.func.attr.value == "append"
              and type(call.func.value) is cst.Name}
    place = _following(owner._module).get(id(loop))
    if not filled or place is None:
        return False
    later = itertools.islice(place[1], place[2] + 1, None)
    return any(isinstance(inner, cst.For) and dotted(conventions.passed_over(inner.iter)) in filled
               and reaches_event(inner.body, owner, names=BACKWARD_NAMES)
               for statement in later for inner in walk(statement)) and update_follows(loop, owner)


def _delegates(definition: cst.FunctionDef | cst.Lambda, method: str) -> bool:
    """Whether a project class's ``method`` hands the call on to another object's method of the same
    name (``self.optimizer.step()`` in a wrapper's ``step``; ``super()``'s excluded): the wrapper's
    code then decides when that runs, and is run; else (the update computed in place) it is the event."""
    return any(isinstance(call.func, cst.Attribute) and call.func.attr.value == method
               and not (isinstance(call.func.value, cst.Call) and dotted(call.func.value.func) == "super")
               for call in _calls(definition.body))


def _steps_a_counter(node: cst.CSTNode) -> bool:
    """Whether ``node`` calls a stepping driver's counting method (``engine.step()``) on a receiver it
    also calls ``backward(loss)`` on, or asks a counter's boundary (``is_gradient_accumulation_boundary()``)."""
    methods = {(c.func.attr.value, dotted(c.func.value), bool(c.args)) for c in _calls(node)
               if isinstance(c.func, cst.Attribute)}
    backed = {receiver for method, receiver, argued in methods if method in BACKWARD_CALLS and argued and receiver}
    return any(method == driver.counts and receiver in backed or driver.flag_call and method == driver.flag
               for method, receiver, _ in methods for driver in _STEPPING)


def update_follows(statement: cst.CSTNode, owner: ModuleFunctions,
                   updates: Callable[[cst.CSTNode, ModuleFunctions], bool] = has_update) -> bool:
    """Whether an optimizer update (``updates`` tells) follows ``statement`` in its loop's body
    (or its function's): what a ``continue`` or ``return`` in it would skip."""
    following = _following(owner._module)
    current = statement
    while id(current) in following:
        parent, statements, position = following[id(current)]
        if any(updates(r, owner) for r in itertools.islice(statements, position + 1, None)):
            return True
        if parent is None or isinstance(parent, (cst.For, cst.While, cst.FunctionDef)):
            return False
        current = parent
    return False


def forget_syntax() -> None:
    """Drop the cached syntactic facts (they hold the trees they were asked about): the
    simulator calls it when it is done with a module, so a long run keeps no tree alive."""
    for cached in (_calls, no_update_steps, reaches_event, has_update, _counters, _following, _instances,
                   _instance_classes, _function_aliases, _imported_instances, _declared_classes, _is_generator,
                   _writes_gradients, _bound_names, _assigned_to, _called_names, _grown_names, _choice_tests,
                   _statements_of_calls, _stored_handed, _performing_bindings):
        cached.cache_clear()


@functools.lru_cache(maxsize=64)
def _trained(module: cst.Module, imports: ImportMap) -> frozenset[str]:
    found: set[str] = set()
    switched: set[int] = set()  # the no-sync methods called with the model as their argument
    stack: list[cst.CSTNode] = [module]
    while stack:  # every function's body too, unlike walk()
        node = stack.pop()
        kind = type(node)
        if kind is cst.Call:
            name = dotted(node.func) or ""
            if last_segment(name) in CLIP_CALLS or constructor_role(
                    imports.qualify(name) or name, imports.qualify(name) is not None) is Role.OPTIMIZER:
                found |= parameter_owners(node)
            if last_segment(name) in fw.NO_SYNC_METHODS and node.args:  # `accelerator.no_sync(model)`
                found.add(dotted(node.args[0].value) or "")
                switched.add(id(node.func))
        elif kind is cst.Attribute and node.attr.value in fw.NO_SYNC_METHODS and id(node) not in switched:
            found.add(dotted(node.value) or "")  # `ddp_model.no_sync()`, or the method itself
        stack.extend(children(node))
    return frozenset(found - {""})


#: the augmented assignments that count (``step += 1``); ``accum *= 8`` or ``//= world_size`` scale a
#: setting once
_COUNTING_OPERATORS = (cst.AddAssign, cst.SubtractAssign)


@functools.lru_cache(maxsize=64)
def _counters(module: cst.Module) -> frozenset[str]:
    found: set[str] = set()
    stack: list[cst.CSTNode] = [module]
    while stack:  # every function's body too, unlike walk()
        node = stack.pop()
        if type(node) is cst.AugAssign and isinstance(node.target, (cst.Name, cst.Attribute)) \
                and type(node.operator) in _COUNTING_OPERATORS:
            found.add(node.target.value if isinstance(node.target, cst.Name) else node.target.attr.value)
        if holds_statements(type(node)):  # (an assignment is a statement: none inside an expression)
            stack.extend(children(node))
    return frozenset(found)


def _at_function_level(statement: cst.CSTNode, owner: ModuleFunctions) -> bool:
    """Whether ``statement`` runs once per call of its function: no loop holds it there (``if``,
    ``with`` and ``try`` may)."""
    following = _following(owner._module)
    current = statement
    while id(current) in following:
        parent = following[id(current)][0]
        if parent is None or isinstance(parent, (cst.For, cst.While)):
            return False
        if isinstance(parent, cst.FunctionDef):
            return True
        current = parent
    return False


@functools.lru_cache(maxsize=64)
def _statements_of_calls(owner: ModuleFunctions) -> dict[int, cst.CSTNode]:
    """Each call of ``owner``'s code written in a simple statement line → that line (the statement
    an update may follow)."""
    found: dict[int, cst.CSTNode] = {}
    for node in every_node(owner._module):
        if type(node) is cst.SimpleStatementLine:
            found.update((id(call), node) for call in every_node(node) if type(call) is cst.Call)
    return found


@functools.lru_cache(maxsize=64)
def _following(module: cst.Module) -> dict[int, tuple[cst.CSTNode | None, Sequence[cst.CSTNode], int]]:
    """Each statement of ``module`` → (the compound statement holding it, its block's statements,
    its position there): the statements after it, unsliced (a block of n statements would copy
    n²/2 of them)."""
    found: dict[int, tuple[cst.CSTNode | None, Sequence[cst.CSTNode], int]] = {}
    stack: list[tuple[cst.CSTNode, cst.CSTNode | None]] = [(module, None)]
    while stack:
        node, holder = stack.pop()
        if type(node) is cst.Module or type(node) is cst.IndentedBlock:  # (exact types: a walk of every node)
            statements = node.body
            for i, child in enumerate(statements):
                found[id(child)] = (holder, statements, i)
                stack.append((child, child))
            continue
        stack.extend((child, holder) for child in children(node))
    return found


#: the builtin types ``isinstance`` is decided for, by the name the code writes
_BUILTIN_TYPES: dict[str, type] = {"dict": dict, "list": list, "tuple": tuple, "set": set, "str": str, "int": int,
                                   "float": float, "bool": bool, "bytes": bytes}


def _is_builtin_instance(value: object, types: cst.BaseExpression) -> bool | None:
    """``isinstance(value, types)`` where ``types`` names builtin types only (``dict``, ``(list,
    tuple)``): decided for a value the run holds (a number, a string, a container) and for an
    object of a known training role (an optimizer, a model, a scheduler ... is none of them: a
    helper's ``if isinstance(part, dict)`` branch is no run-level choice); None otherwise."""
    names = [e.value for e in types.elements] if isinstance(types, cst.Tuple) else [types]
    classes = [_BUILTIN_TYPES.get(n.value) if isinstance(n, cst.Name) else None for n in names]
    if not classes or None in classes:
        return None
    if isinstance(value, Obj):
        return False if value.role not in (Role.OTHER, Role.UNKNOWN) else None
    if isinstance(value, (int, float, str, bytes, list, tuple, dict, set)):
        return isinstance(value, tuple(classes))  # type: ignore[arg-type]
    return None


def _call_name(func: cst.BaseExpression) -> str:
    """A callee's last name (``f`` of ``f(...)`` and ``x.f(...)``), "" for anything else."""
    return func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""


def _callees(func: cst.BaseExpression, name: str, owner: ModuleFunctions,
             call: cst.Call | None = None) -> list[tuple[cst.FunctionDef, ModuleFunctions]]:
    """The project functions a call of ``func`` (last segment ``name``; ``call``: the call, where
    known) may reach, by name: the module's methods and functions of that name, or what the import
    of its dotted name finds."""
    if not name:
        return []
    if call is not None and name in fw.pytorch.MODULE_MODE_METHODS and isinstance(func, cst.Attribute):
        # `self.encoder.train()`: a project method `train(self, data, ...)` that its arguments cannot
        # bind to is not what it calls (a module's mode switch is)
        return [(f, o) for f, o in _callees(func, name, owner) if can_bind(call, f)]
    if isinstance(func, cst.Attribute) and (
            name in fw.pytorch.MODULE_MODE_METHODS and (_named_role(dotted(func.value)) in conventions.MODEL_ROLES
                                                        or not may_be_project_instance(func.value, owner))
            or name in EVENT_METHODS and _named_role(dotted(func.value)) in _LIBRARY_EVENT_ROLES):
        # `model.train()`, `self.components.transformer.train()`, `self.optimizer.step()`: the module's mode,
        # the optimizer's update, not a project method of that name (a trainer's own `train` or `step`)
        return []
    declared = _declared_class(func.value, owner) if isinstance(func, cst.Attribute) else None
    if declared is not None:
        # `env_runner: BaseRunner` or `assert isinstance(env_runner, BaseRunner)`: the method of that
        # class (of the module, or imported from the project), never another class's of the same name
        return _method_of_class(declared, name, owner)
    found = [(f, owner) for (_, method), f in owner.methods.items() if method == name]
    if name in owner.functions and not isinstance(func, cst.Attribute):  # (`x.f()` is no module function here)
        found.append((owner.functions[name], owner))
    elif owner.project is not None:
        imported = owner.imported(dotted(func) or name)  # `helper(...)`, `utils.helper(...)`, `u.helper(...)`
        if imported is None and call is not None and _hands_performing(call, owner):
            imported = owner.imported(dotted(func) or name, any_module=True)  # a relay: `one(stepper, x)`
        if imported is not None and isinstance(imported[1], cst.FunctionDef):
            found.append((imported[1], imported[0]))
        elif isinstance(func, cst.Attribute) and not found:
            # `learner = agents.Learner(...)`, then `learner.learn(batch)`: the method of the class built
            for module, class_def in _imported_instance_classes(owner).get(dotted(func.value) or "", ()):
                method = module.method(class_def, name)
                if method is not None:
                    found.append((method[0], method[1]))
        if isinstance(func, cst.Attribute) and not found:
            found.extend(owner.imported_class_methods(name))  # `trainer.fit()`, `Trainer` imported from the project
            if not found:  # `optim.step_and_update_lr()` of an object a project function built
                found.extend(owner.methods_of_built_classes(name))
    if not found and isinstance(func, cst.Name):
        # `step_fn = accum_step if cfg.accumulate else plain_step; ... step_fn(...)`
        found.extend((owner.functions[f], owner) for f in _function_aliases(owner).get(name, ()))
    elif not found and isinstance(func, cst.Attribute) and dotted(func.value) == "self":
        # `self.fwd_bwd = self._fwd_bwd` in a constructor, `self.fwd_bwd(...)` in the loop
        found.extend((f, owner) for (_, method), f in owner.methods.items()
                     if method in _function_aliases(owner).get(f"self.{name}", ()))
    if not found:
        # `scaler = Scaler(); ... scaler(loss, optimizer)`, the class the module's own or imported from the project
        built = _instances(owner).get(name)
        calls = [owner.method(built, "__call__")] if built is not None else []
        if not any(calls):
            calls = [module.method(class_def, "__call__")
                     for module, class_def in _imported_instance_classes(owner).get(name, ())]
        found.extend((call[0], call[1]) for call in calls if call is not None)
    return found


def _declared_class(receiver: cst.BaseExpression, owner: ModuleFunctions) -> str | None:
    """The class the code declares for a plain-name ``receiver``: its annotation (``runner:
    BaseRunner``, in a body or a parameter list) or an ``isinstance`` assertion on it, when every
    declaration of that name in the module names the same class (None: none, or several)."""
    if not isinstance(receiver, cst.Name) or receiver.value in ("self", "cls"):
        return None
    classes = _declared_classes(owner).get(receiver.value)
    return next(iter(classes)) if classes is not None and len(classes) == 1 else None


@functools.lru_cache(maxsize=64)
def _declared_classes(owner: ModuleFunctions) -> dict[str, frozenset[str]]:
    """Per plain name of ``owner``, the dotted classes its annotations and ``isinstance``
    assertions name (an annotation that is not a plain or dotted name: ``"?"``)."""
    found: dict[str, set[str]] = {}

    def declare(name: str, annotation: cst.BaseExpression) -> None:
        found.setdefault(name, set()).add(dotted(annotation) or "?")

    for node in every_node(owner._module):  # (parameters and bodies of every definition too)
        if type(node) is cst.AnnAssign and isinstance(node.target, cst.Name):
            declare(node.target.value, node.annotation.annotation)
        elif type(node) is cst.Param and node.annotation is not None:
            declare(node.name.value, node.annotation.annotation)
        elif type(node) is cst.Assert and isinstance(node.test, cst.Call) and dotted(node.test.func) == "isinstance" \
                and len(node.test.args) == 2 and isinstance(node.test.args[0].value, cst.Name):
            declare(node.test.args[0].value.value, node.test.args[1].value)
    return {name: frozenset(classes) for name, classes in found.items()}


def _method_of_class(declared: str, name: str,
                     owner: ModuleFunctions) -> list[tuple[cst.FunctionDef, ModuleFunctions]]:
    """The method ``name`` of the class ``declared`` (dotted): one of ``owner``'s classes or one
    it imports from the project; none for a library class or a class it cannot find."""
    if declared in owner.classes:
        method = owner.method(owner.classes[declared], name)
        return [(method[0], method[1])] if method is not None else []
    imported = owner.imported(declared) if owner.project is not None else None
    if imported is not None and isinstance(imported[1], cst.ClassDef):
        method = imported[0].method(imported[1], name)
        return [(method[0], method[1])] if method is not None else []
    return []


def may_be_project_instance(receiver: cst.BaseExpression, owner: ModuleFunctions) -> bool:
    """Whether ``receiver`` may hold an instance of a project class: ``self``, a name the module
    binds to one of its classes, a name built from a class it imports from the project, or a call
    that is no library constructor (``Trainer().train()``); a receiver the module does not build
    (``self.components.transformer``, a parameter ``model``) holds a library object."""
    if type(receiver) is cst.Call:
        callee = dotted(receiver.func)
        return callee is None or constructor_role(owner.imports.qualify(callee) or callee, True) is None
    name = dotted(receiver)
    if name is None:
        return True
    if name in ("self", "cls") or last_segment(name) in _instances(owner):
        return True
    return last_segment(name) in _imported_instances(owner)


def holds_own_instance(receiver: cst.BaseExpression, owner: ModuleFunctions) -> bool:
    """Whether ``receiver`` may hold an instance of one of ``owner``'s own classes: ``self``, a
    name or attribute the module binds to one of them, or a call that is no library constructor
    (``Trainer().train()``). Narrower than :func:`may_be_project_instance`: what a module's method
    call shows about which of its own methods the module calls (``model.train()`` on a model it
    builds by a helper does not call its trainer's ``train``)."""
    if type(receiver) is cst.Call:
        return may_be_project_instance(receiver, owner)
    name = dotted(receiver)
    return name is None or name in ("self", "cls") or last_segment(name) in _instances(owner)


@functools.lru_cache(maxsize=64)
def _constructions(owner: ModuleFunctions) -> tuple[tuple[str, str, bool, cst.Call], ...]:
    """(name or attribute name bound, dotted callee, whether the call is handed the target's own value:
    :func:`_rewraps`, the call) of every ``x = Callee(...)`` / ``self.x = Callee(...)`` in ``owner``'s
    code, its functions' bodies included."""
    found: list[tuple[str, str, bool, cst.Call]] = []
    roots = (owner._module, *(f.body for f in owner.functions.values()), *(f.body for f in owner.methods.values()))
    for node in (n for root in roots for n in walk(root, statements_only=True)):
        if type(node) is cst.Assign:
            for call in _built(node.value):
                callee = dotted(call.func) or ""
                for target in node.targets:
                    if isinstance(target.target, (cst.Name, cst.Attribute)):
                        found.append((target.target.value if isinstance(target.target, cst.Name)
                                      else target.target.attr.value, callee, _rewraps(node, call), call))
    return tuple(found)


def _built(value: cst.BaseExpression) -> list[cst.Call]:
    """The calls whose result ``value`` is: itself, or the arms of a conditional expression that are
    calls (``Scaler() if args.amp else None``: the name holds a ``Scaler`` where it holds an object)."""
    if type(value) is cst.Call:
        return [value]
    if type(value) is cst.IfExp:
        return _built(value.body) + _built(value.orelse)
    return []


@functools.lru_cache(maxsize=64)
def _imported_instances(owner: ModuleFunctions) -> frozenset[str]:
    """The names (and attribute names) ``owner`` binds to a call of a class, or of a class-valued
    name, that is not one of its own and not a known library constructor (``trainer =
    Trainer(args)`` with ``Trainer`` imported from the project, ``trainer = trainer_cls(args)``); not a
    call handed the name's own value back, nor a project function or method that builds no project
    class (:func:`_builds_no_instance`)."""
    return frozenset(name for name, callee, rewrap, _ in _constructions(owner)
                     if constructor_role(owner.imports.qualify(callee) or callee, True) is None
                     and not rewrap and not _builds_no_instance(callee, owner))


def _builds_no_instance(callee: str, owner: ModuleFunctions) -> bool:
    """Whether ``callee`` is a method of one of ``owner``'s classes (its bases in other modules
    included) or a project function that calls no project class: what it returns is no instance it
    makes (``self.get_module("transformer")`` hands back a library model), so the name it binds holds
    no trainer whose ``train()`` would run a loop. A function the project view does not show is not
    known to be one."""
    if callee.startswith("self.") and callee.count(".") == 1:
        found = [owner.method(class_def, callee[5:]) for class_def in owner.classes.values()]
        functions = [(f[0], f[1]) for f in found if f is not None]
    else:
        imported = owner.imported(callee) if callee else None
        local = owner.functions.get(callee) if callee and "." not in callee else None
        functions = [(imported[1], imported[0])] if imported is not None else [(local, owner)] if local else []
    return bool(functions) and all(isinstance(function, cst.FunctionDef) and not _calls_a_class(function, module)
                                   for function, module in functions)


def _calls_a_class(function: cst.FunctionDef, owner: ModuleFunctions) -> bool:
    """Whether ``function`` (of ``owner``) calls a class of its module or one it imports from the
    project (or a callee that has no name: ``factories[kind](...)``)."""
    for call in _calls(function.body):
        name = dotted(call.func)
        if name is None or name in owner.classes or owner.class_named(name) is not None:
            return True
    return False


def _rewraps(node: cst.Assign, call: cst.Call) -> bool:
    """Whether ``call``, assigned by ``node``, is handed the value its target holds (``self.model =
    checkpointed(self.model, ...)``): a wrapper of what the name held, not an object of another kind."""
    targets = {dotted(t.target) for t in node.targets} - {None}
    return any(dotted(arg.value) in targets for arg in call.args)


@functools.lru_cache(maxsize=64)
def _imported_instance_classes(owner: ModuleFunctions) -> dict[str, tuple[tuple[ModuleFunctions, cst.ClassDef], ...]]:
    """The names ``owner`` binds to an instance of a class it imports from the project
    (``stepper = Stepper(...)``, ``Stepper`` from a sibling module), with each such class (``scaler =
    ApexScaler()`` in one branch, ``NativeScaler()`` in another: a call of the name may run either)."""
    found: dict[str, list[tuple[ModuleFunctions, cst.ClassDef]]] = {}
    for name, callee, _, call in _constructions(owner):
        imported = owner.imported(callee) if callee and owner.project is not None else None
        if imported is None and callee and owner.project is not None and _hands_performing(call, owner):
            imported = owner.imported(callee, any_module=True)  # a relay: `Trainer(net, Stepper(...))`
        if imported is not None and isinstance(imported[1], cst.ClassDef) and imported not in found.get(name, ()):
            found.setdefault(name, []).append(imported)  # type: ignore[arg-type]
    return {name: tuple(classes) for name, classes in found.items()}


def _hands_performing(call: cst.Call, owner: ModuleFunctions) -> bool:
    """Whether ``call`` hands an instance of a class whose code performs training events (one the
    project index names, :meth:`~accumlint.project.ProjectIndex.event_names`): built in the argument
    (``Trainer(net, Stepper(opt))``) or bound to a name ``owner`` builds it into."""
    return any(_performing_classes(arg.value, owner) for arg in call.args)


def _performing_classes(value: cst.BaseExpression,
                        owner: ModuleFunctions) -> tuple[tuple[ModuleFunctions, cst.ClassDef], ...]:
    """The classes that perform training events that ``value`` (code of ``owner``) holds an instance
    of: built in place (``Stepper(opt)``) or bound to a name ``owner`` builds one into."""
    if owner.project is None:
        return ()
    if type(value) is cst.Call:
        return _performing_class(dotted(value.func) or "", owner)
    return _performing_bindings(owner).get(dotted(value) or "", ())


def _performing_class(callee: str, owner: ModuleFunctions) -> tuple[tuple[ModuleFunctions, cst.ClassDef], ...]:
    """The class ``callee`` (dotted, code of ``owner``) names where its code performs training events
    (:meth:`~accumlint.project.ProjectIndex.event_names`), as a one-item tuple; else empty."""
    if callee.rsplit(".", 1)[-1].encode() not in owner.project.index.event_names():  # type: ignore[union-attr]
        return ()
    located = (owner, owner.classes[callee]) if callee in owner.classes else owner.imported(callee)
    return ((located[0], located[1]),) if located is not None and isinstance(located[1], cst.ClassDef) else ()


@functools.lru_cache(maxsize=64)
def _performing_bindings(owner: ModuleFunctions) -> dict[str, tuple[tuple[ModuleFunctions, cst.ClassDef], ...]]:
    """The names ``owner`` binds to an instance of a class that performs training events, with the
    classes each may hold (read once per module: every unresolved call of the static reach asks)."""
    found: dict[str, tuple[tuple[ModuleFunctions, cst.ClassDef], ...]] = {}
    for name, callee, _, _ in _constructions(owner):
        for located in _performing_class(callee, owner):
            if located not in found.get(name, ()):
                found[name] = (*found.get(name, ()), located)
    return found


@functools.lru_cache(maxsize=4096)
def _stored_handed(call: cst.Call, owner: ModuleFunctions) -> Handed:
    """For ``x.m(...)`` (``call``, code of ``owner``) on a name ``owner`` binds to ``C(...)`` of a
    project class: the instances of classes that perform training events that this construction
    hands to parameters that ``C.__init__`` stores on ``self`` (``self.stepper = stepper``), keyed
    ``self.<attribute>``: what ``C``'s methods call on them runs those classes' methods
    (:func:`_handed_methods`)."""
    func = call.func
    if type(func) is not cst.Attribute or type(func.value) is not cst.Name or owner.project is None:
        return frozenset()
    found: set[tuple[str, tuple[tuple[ModuleFunctions, cst.ClassDef], ...]]] = set()
    for name, callee, _, built in _constructions(owner):
        if name != func.value.value or not _hands_performing(built, owner):
            continue
        located = (owner, owner.classes[callee]) if callee in owner.classes \
            else owner.imported(callee, any_module=True)
        if located is None or not isinstance(located[1], cst.ClassDef):
            continue
        init = next((m for m in _methods_of(located[1]) if m.name.value == "__init__"), None)
        if init is None:
            continue
        params = [p.name.value for p in (*init.params.posonly_params, *init.params.params)][1:]
        positional = [a for a in built.args if a.keyword is None and not a.star]
        handed = {param: _performing_classes(arg.value, owner) for param, arg in zip(params, positional, strict=False)}
        handed |= {arg.keyword.value: _performing_classes(arg.value, owner) for arg in built.args
                   if arg.keyword is not None}
        found |= {(f"self.{attribute}", handed[param]) for attribute, param in _stored_parameters(init)
                  if handed.get(param)}
    return frozenset(found)


def _stored_parameters(init: cst.FunctionDef) -> list[tuple[str, str]]:
    """(attribute, parameter) of each ``self.<attribute> = <parameter>`` in ``init``'s own statements,
    the tuple form ``self.a, self.b = a, b`` too."""
    found = []
    for statement in walk(init.body, statements_only=True):
        if type(statement) is not cst.Assign or len(statement.targets) != 1:
            continue
        target, value = statement.targets[0].target, statement.value
        pairs = [(t.value, v.value) for t, v in zip(target.elements, value.elements, strict=False)] \
            if type(target) is cst.Tuple and type(value) is cst.Tuple else [(target, value)]
        for left, right in pairs:
            if type(left) is cst.Attribute and dotted(left.value) == "self" and type(right) is cst.Name:
                found.append((left.attr.value, right.value))
    return found


@functools.lru_cache(maxsize=64)
def _instances(owner: ModuleFunctions) -> dict[str, cst.ClassDef]:
    """The names (and attribute names) ``owner`` binds to an instance of one of its own classes
    (``scaler = Scaler()``, ``self.scaler = Scaler()``): a call of such a name runs ``__call__``."""
    found: dict[str, cst.ClassDef] = {}
    stack: list[cst.CSTNode] = [owner._module]
    while stack:
        node = stack.pop()
        for call in _built(node.value) if type(node) is cst.Assign else ():
            if type(call.func) is not cst.Name or call.func.value not in owner.classes:
                continue
            for target in node.targets:
                if isinstance(target.target, (cst.Name, cst.Attribute)):
                    key = target.target.value if isinstance(target.target, cst.Name) else target.target.attr.value
                    found[key] = owner.classes[call.func.value]
        if holds_statements(type(node)):  # (an assignment is a statement: none inside an expression)
            stack.extend(children(node))
    return found


@functools.lru_cache(maxsize=64)
def _function_aliases(owner: ModuleFunctions) -> dict[str, tuple[str, ...]]:
    """The plain names ``owner`` binds to one of its own functions, or to a choice between them
    (``step_fn = accum_step if flag else plain_step``), or to a ``functools.partial`` of one
    (``backwards = partial(run_backward, half)``): a call of such a name runs one of them. Also,
    keyed ``self.<name>``, the attributes a method binds to a method of the instance (``self.fwd_bwd
    = self._fwd_bwd_body``): a call of such an attribute runs that method."""
    found: dict[str, tuple[str, ...]] = {}
    methods = {name for _, name in owner.methods}
    roots = (owner._module, *(f.body for f in owner.functions.values()), *(f.body for f in owner.methods.values()))
    # (the walk stops at each nested definition)
    for node in (n for root in roots for n in walk(root, statements_only=True)):
        if type(node) is not cst.Assign or len(node.targets) != 1:
            continue
        target = node.targets[0].target
        if type(target) is cst.Attribute and dotted(target.value) == "self":
            key, callable_names = f"self.{target.attr.value}", methods
        elif type(target) is cst.Name:
            key, callable_names = target.value, owner.functions.keys()
        else:
            continue
        values = [node.value]
        named: list[str] = []
        while values:
            value = values.pop()
            if isinstance(value, cst.IfExp):
                values.extend((value.body, value.orelse))
            elif isinstance(value, cst.Call) and (fixed := owner.partial_of(value)) is not None:
                values.append(fixed)
            elif type(target) is cst.Name and isinstance(value, cst.Name) or type(target) is cst.Attribute \
                    and isinstance(value, cst.Attribute) and dotted(value.value) == "self":
                name = value.value if isinstance(value, cst.Name) else value.attr.value
                if name in callable_names:
                    named.append(name)
        if named:
            found[key] = tuple(dict.fromkeys(found.get(key, ()) + tuple(named)))
    return found
