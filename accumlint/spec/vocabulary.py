"""The words both engines share: training events, cadences, principles and rule families.

One declaration each, read by the linter's model (``accumlint.model``), the rule spec
(``accumlint.spec``) and the runtime guard (``runtime_guard``). A training event the guard
traces carries the one letter its traces write for it (``"F B Z F B S"``, the ``trace`` and
``evidence`` fields of its cards and findings): the guard takes those letters from here, so
the static kinds and the runtime letters cannot drift apart. The module imports neither
LibCST nor torch (``import runtime_guard`` stays light).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

__all__ = [
    "FAMILIES", "KIND_OF_LETTER", "LETTERS", "PRINCIPLES", "Cadence", "EventKind", "Family", "Principle",
]


class EventKind(str, Enum):
    """A training event: what a call (or an assignment) performs in the linter's model, and
    what a hook observed in the runtime guard.

    The value is the event in words (the linter's messages). ``letter`` is the one character
    the guard writes for it in its traces, ``word`` the word its group timelines print and
    ``observed`` what the guard's hook saw (``None`` for the three: the guard does not trace
    the event). Some kinds belong to one engine only: the linter has no forward event and
    counts ``scaler.step(optimizer)`` as the optimizer update, the guard traces both; the
    guard does not trace assignments, helper calls, gradient rescales or update hooks.
    """

    letter: str | None
    word: str | None
    observed: str | None

    def __new__(cls, words: str, letter: str | None = None, word: str | None = None,
                observed: str | None = None) -> EventKind:
        member = str.__new__(cls, words)
        member._value_ = words
        member.letter, member.word, member.observed = letter, word, observed
        return member

    # the guard's letters, in the order its legends list them
    FORWARD = "forward", "F", "F", "forward of the probed model (one microbatch)"
    BACKWARD = "backward", "B", "B", "backward reaching its parameters"
    RESET = "gradient reset", "Z", "zero", "gradient reset (zero_grad)"
    CLIP = "gradient clipping", "C", "clip", "gradient clipping"
    UPDATE = "optimizer update", "S", "step", "optimizer update attempt"
    SCHEDULER_STEP = "scheduler step", "L", "sched", "LR scheduler step"
    SCALE = "loss scaling", "K", "scale", "GradScaler.scale"
    UNSCALE = "unscale", "X", "unscale", "GradScaler.unscale_"
    SCALER_STEP = "scaler step", "s", "scaler.step", "GradScaler.step"
    SCALER_UPDATE = "scaler update", "U", "scaler.update", "GradScaler.update"
    EPOCH_END = "epoch end", "E", "epoch-end", "the watched loader's epoch ended"
    # the linter's model only
    ASSIGN = "assignment"
    HELPER_CALL = "call of a helper of this module"
    GRAD_RESCALE = "in-place rescale of the accumulated gradients"
    UPDATE_HOOK = "once-per-update hook (weight EMA, model averaging, rank allocation)"
    ACTION = "once-per-update action (checkpoint save, evaluation, log point)"


#: the guard's trace letters, in legend order (``"FBZCSLKXsUE"``)
LETTERS: str = "".join(kind.letter for kind in EventKind if kind.letter)
#: the event kind of each trace letter
KIND_OF_LETTER: dict[str, EventKind] = {kind.letter: kind for kind in EventKind if kind.letter}


class Cadence(str, Enum):
    """How often a statement runs relative to the accumulation group."""

    MICROBATCH = "every microbatch"
    UPDATE = "once per group, after its last backward"
    GROUP_START = "once per group, before its first microbatch"
    NON_BOUNDARY = "on the microbatches that do not end a group"
    FRAMEWORK_GATED = "every microbatch, but the framework acts only at the group boundary"
    OUTSIDE = "outside the accumulation loop"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Principle:
    """A property of the accumulation group that correct code keeps (``shared/docs/accumulation-guide.md``)."""

    code: str
    title: str


PRINCIPLES: dict[str, Principle] = {
    p.code: p
    for p in (
        Principle("P1", "parameters are frozen inside a group"),
        Principle("P2", "gradients accumulate inside a group"),
        Principle("P3", "gradients are reset between groups"),
        Principle("P4", "the loss is normalized once, by the real denominator"),
        Principle("P5", "a group's outputs are released"),
        Principle("P6", "gradient operations follow the last contribution"),
        Principle("P7", "mixed precision keeps one scale per group"),
        Principle("P8", "the scheduler follows its declared unit"),
        Principle("P9", "the final partial group is an explicit choice"),
        Principle("P10", "data-parallel communication is delayed correctly"),
        Principle("P11", "each replica sees different examples"),
        Principle("P12", "the effective batch is counted, not assumed"),
        Principle("-", "a fact worth recording, no property broken"),
    )
}


@dataclass(frozen=True)
class Family:
    """The rules of one hundreds digit of the code: ``digit`` 0 is ACC0xx, 1 is ACC1xx, ...;
    ``covers`` says what its rules are about."""

    digit: int
    name: str
    covers: str


FAMILIES: dict[int, Family] = {
    f.digit: f
    for f in (
        Family(0, "group structure", "resets, updates, the boundary gate and the partial last group (P1-P3, P9)"),
        Family(1, "normalization", "who divides the loss, by what, and when (P4)"),
        Family(2, "memory", "graphs kept across microbatches (P5)"),
        Family(3, "gradient operations and schedules", "clip, unscale, GradScaler, LR scheduler (P6-P8)"),
        Family(4, "data parallel", "no_sync, samplers, replicas and denominators across ranks (P10-P12)"),
        Family(5, "framework usage", "Accelerate, DeepSpeed and other frameworks' accumulation APIs"),
        Family(9, "facts", "information worth recording, off by default"),
    )
}


#: a function's name that says it computes a loss (``compute_loss``, ``loss_fn``, ``criterion``,
#: ``objective``): a helper a training loop may take the loss it backpropagates from (the project
#: index follows such a function, the simulator one that a call hands data to; its name, not its
#: code: a block's text also holds help strings such as ``--loss-scale``)
LOSS_HELPER_NAME = re.compile(rb"loss|criterion|objective", re.I)
