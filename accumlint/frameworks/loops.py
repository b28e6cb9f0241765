"""The schema of framework-owned loops: which user functions a framework calls in the loop it
runs, and when (read by :mod:`accumlint.model.owned_loops`).

A row names the package version and the source file its order was read from. The phases are
the places of one training loop::

    for epoch:                      EPOCH_START hooks
        for microbatch:             BATCH_START hooks, BODY (the per-batch function),
                                    [the framework's backward, when it runs one], AFTER_BACKWARD
                                    hooks, BATCH_END hooks
                                    EPOCH_END hooks
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class Phase(str, Enum):
    """Where in the framework's loop a user function runs."""

    EPOCH_START = "epoch start"
    BATCH_START = "before the microbatch"
    BODY = "the microbatch"
    AFTER_BACKWARD = "after the microbatch's backward"
    BATCH_END = "after the microbatch"
    EPOCH_END = "epoch end"


#: the phases inside the microbatch loop, in the order the framework runs them
MICROBATCH_PHASES = (Phase.BATCH_START, Phase.BODY, Phase.AFTER_BACKWARD, Phase.BATCH_END)


@dataclass(frozen=True)
class CallbackLoop:
    """A framework that calls methods of user classes by name (callbacks, subclass hooks).

    ``bases``: last names of the base classes that make a class take part (``Callback``);
    ``packages``: the import roots those bases must come from (empty: any base of that name
    not defined in the project); ``hooks``: method name → phase; ``backward_methods``:
    inherited methods of the framework that run the microbatch's backward when the class does
    not override them (``train_step_single``); ``framework_backward``: the framework runs the
    backward itself between BODY and AFTER_BACKWARD (a callback runner with an after-backward
    hook); ``uncalled``: the BODY method must have no caller in the module (a name that is not
    the framework's alone).

    ``counters``: attribute path on the object the framework passes each hook at parameter
    ``counter_position`` (``self`` is position 0) → its value on the run's first microbatch,
    counting microbatches across epochs; ``epoch_counters``: the same for counts that restart
    at each epoch's first microbatch; ``data``: attribute paths on that object that hold the
    microbatch's data or the outputs of its forward (``outputs``: a value that changes with every
    microbatch). ``base_methods``: methods of the framework's base class
    that the hooks call on ``self`` (``every_n_iters``), name → the Python text of a function
    that computes what the framework's method returns; the model runs it where the class does
    not define the method."""

    framework: str
    version: str
    source: str
    bases: frozenset[str]
    hooks: dict[str, Phase]
    packages: tuple[str, ...] = ()
    backward_methods: frozenset[str] = frozenset()
    framework_backward: bool = False
    uncalled: bool = False
    excluded_packages: tuple[str, ...] = ()
    #: attributes the framework sets on the class, by their role's name (``self.optimizer_``)
    attributes: dict[str, str] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)
    epoch_counters: dict[str, int] = field(default_factory=dict)
    counter_position: int = 1
    data: frozenset[str] = frozenset()
    base_methods: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RegisteredLoop:
    """A framework that is handed the per-microbatch function (``Engine(process_fn)``) and
    handlers registered for its events (``@engine.on(Events.ITERATION_COMPLETED)``).

    ``constructors``: qualified names of the engine class; ``events``: event name → phase;
    ``counters``: attribute path on the engine → its value on the first microbatch
    (``state.iteration`` → 1: incremented before the process function runs)."""

    framework: str
    version: str
    source: str
    constructors: frozenset[str]
    events: dict[str, Phase]
    register_methods: frozenset[str] = frozenset({"on"})
    add_methods: frozenset[str] = frozenset({"add_event_handler"})
    counters: dict[str, int] = field(default_factory=dict)
