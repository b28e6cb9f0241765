"""The vocabulary of the model: object roles, how we know them, training events, and how often
code runs. Events and cadences are the engines' shared words (:mod:`accumlint.spec.vocabulary`)."""

from __future__ import annotations

from enum import Enum

# Roles are the frameworks' row vocabulary too (what a constructor builds): they live with the
# rows, which the LibCST-free runtime guard reads.
from accumlint.frameworks.contracts import Role
from accumlint.spec.vocabulary import Cadence, EventKind

__all__ = ["Cadence", "EventKind", "Evidence", "LoopStyle", "Role"]


class Evidence(int, Enum):
    """How we know a role, weakest first; rules may demand a minimum."""

    NAME = 1  # the variable's name only
    USE = 2  # what the code does with it (its ``.parameters()`` build an optimizer: a model)
    ANNOTATION = 3  # a type annotation
    CONSTRUCTOR = 4  # built by a known constructor / returned by a known framework call


class LoopStyle(str, Enum):
    """How a microbatch loop gates its optimizer update (:mod:`accumlint.model.groups`)."""

    GATED = "optimizer update gated by a boundary test"
    MICRO_LOOP = "inner microbatch loop followed by the optimizer update"
    ACCELERATE = "Accelerate accumulate()"
    DEEPSPEED = "DeepSpeed engine owns the boundary"
    UNGATED = "optimizer update on every microbatch"
    NO_UPDATE = "no optimizer update in this function"
    UNKNOWN = "undecided"
