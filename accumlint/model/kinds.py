"""The vocabulary of the model: object roles, training events, and how often code runs."""

from __future__ import annotations

from enum import Enum

# Roles are the frameworks' row vocabulary too (what a constructor builds): they live with the
# rows, which the LibCST-free runtime guard reads.
from accumlint.frameworks.contracts import Role

__all__ = ["Cadence", "EventKind", "Evidence", "Role"]


class Evidence(int, Enum):
    """How we know a role, weakest first; rules may demand a minimum."""

    NAME = 1  # the variable's name only
    ANNOTATION = 2  # a type annotation
    CONSTRUCTOR = 3  # built by a known constructor / returned by a known framework call


class EventKind(str, Enum):
    """A training event a call (or an assignment) performs."""

    BACKWARD = "backward"
    RESET = "gradient reset"
    UPDATE = "optimizer update"
    SCHEDULER_STEP = "scheduler step"
    CLIP = "gradient clipping"
    UNSCALE = "unscale"
    SCALER_UPDATE = "scaler update"
    ASSIGN = "assignment"
    HELPER_CALL = "call of a helper of this module"
    GRAD_RESCALE = "in-place rescale of the accumulated gradients"
    UPDATE_HOOK = "once-per-update hook (weight EMA, model averaging, rank allocation)"


class Cadence(str, Enum):
    """How often a statement runs relative to the accumulation group."""

    MICROBATCH = "every microbatch"
    UPDATE = "once per group, after its last backward"
    GROUP_START = "once per group, before its first microbatch"
    NON_BOUNDARY = "on the microbatches that do not end a group"
    FRAMEWORK_GATED = "every microbatch, but the framework acts only at the group boundary"
    OUTSIDE = "outside the accumulation loop"
    UNKNOWN = "unknown"
