"""The shared row vocabulary of the framework modules: object roles, who does what to the
accumulation group, and the rows each framework module fills in.

Nothing here imports LibCST or torch: the linter's model and the runtime guard both read these
rows (``import runtime_guard`` must stay LibCST-free).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Role(str, Enum):
    """What an object is in a training loop."""

    OPTIMIZER = "optimizer"
    SCHEDULER = "LR scheduler"
    SCALER = "gradient scaler"
    MODEL = "model"
    DDP_MODEL = "DDP-wrapped model"
    FSDP_MODEL = "FSDP-wrapped model"
    ACCELERATOR = "Accelerate accelerator"
    FABRIC = "Lightning Fabric"
    ENGINE = "DeepSpeed engine"
    OPTIM_WRAPPER = "mmengine optimizer wrapper"
    LOADER = "data loader"
    OTHER = "other"  # a value we know is none of the above (e.g. parser.parse_args())
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Source:
    """Where a fact was read: the package, its version and the file (with the function)."""

    package: str
    version: str
    file: str

    def __str__(self) -> str:
        return f"{self.package} {self.version} {self.file}"


# --- who does what to one accumulation group --------------------------------------------------


class Owner(str, Enum):
    """Who performs one duty of the accumulation group (divide, reset, gate, ...)."""

    USER = "the user's code"
    FRAMEWORK = "the framework"
    NOBODY = "nobody"


class TailTreatment(str, Enum):
    """What happens to the last ``r < A`` microbatches of an epoch (the partial final group)."""

    LEAKS = "carried into the first group of the next epoch"
    NOT_APPLIED = "backpropagated but never applied by this loop"
    WEIGHTED = "applied, but weighted r/A (each microbatch still divided by A)"
    TRUE_COUNT = "applied with its true size r"
    DROPPED = "dropped: the gradients are reset before they are applied"
    MERGED = "merged into the next epoch: groups of exactly A microbatches span the epoch boundary"


@dataclass(frozen=True)
class GroupContract:
    """What a framework API does per microbatch and per optimizer update.

    ``divides``/``divisor``: who divides the loss and by what (``"A"``, ``"the group's token
    count"``, ``""`` when nobody does); ``resets``, ``steps_scheduler``, ``clips``: whose code
    calls the reset, the scheduler's step and the clip; ``gates_update``: who decides on which
    microbatch the update (and a prepared object's reset or step) takes effect (Accelerate: the
    user calls them every microbatch, the framework gates them); ``sync``: when the gradient
    all-reduce is decided;
    ``tail``: the partial last group; ``a_from``: where the framework reads A; ``packages``: the
    top-level import names whose code acts on the user's objects (the guard matches frames by
    them). One row per API of ``shared/docs/framework-contracts.md``'s summary table.
    """

    framework: str
    api: str
    divides: Owner
    divisor: str
    resets: Owner
    gates_update: Owner
    steps_scheduler: Owner
    clips: Owner
    sync: str
    tail: TailTreatment | None
    a_from: str
    packages: tuple[str, ...]
    source: Source


# --- the loss division by backward API ----------------------------------------------------------


class Normalizes(str, Enum):
    """Whether a backward API divides the loss by the configured A itself."""

    ALWAYS = "always"  # by the configured A on every call
    IF_CONFIGURED = "when A is configured"  # only when the object was built with A > 1
    NEVER = "never"


@dataclass(frozen=True)
class BackwardContract:
    """One backward API and whether it normalizes by A."""

    role: Role
    method: str
    normalizes: Normalizes
    opt_out_keyword: str | None  # a keyword that, when given False, turns the division off
    framework: str
    source: str


@dataclass(frozen=True)
class FrameworkTail:
    """How a framework that owns the group boundary treats the partial final group."""

    framework: str
    treatment: TailTreatment
    source: str


@dataclass(frozen=True)
class LoaderSharding:
    """A framework call that gives each replica its own samples when it builds or prepares a loader."""

    framework: str
    call: str  # method name, or ``module.function`` with ``keyword`` naming the dataset argument
    keyword: str | None
    source: str


@dataclass(frozen=True)
class CountingDriver:
    """A framework object that counts the microbatches itself and decides which one ends a
    group (Accelerate's accelerator, DeepSpeed's engine): the simulator runs it as the framework
    does.

    ``counter``: the role of the counting object, built with ``a_keyword=A`` (``a_default``
    without it; None: the code leaves A to a configuration the run does not see, the symbol the
    simulator binds to each A; a keyword of ``other_backends`` hands the counting to another
    framework). It counts one microbatch at each entry of the context its ``enter`` method
    returns (Accelerate), or at each call of its ``counts`` method, which at the boundary
    performs ``performs`` (raw event methods on the counter, in order) and the step of the
    scheduler it holds, and off the boundary nothing (DeepSpeed). ``flag``: the attribute (a
    method where ``flag_call``) that says whether the current microbatch ends its group;
    ``wrap``: the method that returns wrapped objects, whose ``gated`` (role, method) calls act
    only where the flag holds; ``loader_end_syncs``: a wrapped loader's last batch ends a group
    and restarts the count; ``no_sync_off_boundary``: the context's body skips the gradient
    all-reduce off the boundary.

    Built by a function (``builder``, qualified) instead of a constructor, the counter is the
    element ``returns.index(counter)`` of the tuple it returns (the others, of ``returns``' roles);
    A is then ``a_keyword`` of the mapping passed as one of ``config_keywords``, the scheduler it
    holds the argument ``scheduler`` (keyword, position) or one its config's ``scheduler_key``
    builds. The run stays undecided where the config turns the counting off (``unmanaged``: key,
    value), where the code calls one of ``manual_calls`` (it sets the boundary by hand) or writes
    ``count`` (the attribute holding the microbatches counted, which the boundary is decided from)
    with a value the run does not know; a known value sets the count. Writes of the other
    ``counters`` (the counter's own state) move no boundary."""

    framework: str
    counter: Role
    a_keyword: str
    a_default: int | None
    enter: str | None
    flag: str
    wrap: str | None
    gated: frozenset[tuple[Role, str]]
    loader_end_syncs: bool
    no_sync_off_boundary: bool
    other_backends: tuple[str, ...]
    source: Source
    counts: str | None = None
    performs: tuple[str, ...] = ()
    flag_call: bool = False
    builder: str | None = None
    returns: tuple[Role, ...] = ()
    config_keywords: tuple[str, ...] = ()
    scheduler: tuple[str, int] | None = None
    scheduler_key: str | None = None
    unmanaged: tuple[str, object] | None = None
    manual_calls: frozenset[str] = frozenset()
    counters: frozenset[str] = frozenset()
    count: str | None = None


# --- library helpers, summarized ------------------------------------------------------------------

#: event kind → the statement that performs it on the row's ``on`` expression
SUMMARY_STATEMENTS = {
    "backward": "{on}.backward()",
    "scaled_backward": "grad_scaler.scale({on}).backward()",
    "unscale": "grad_scaler.unscale_({on})",
    "clip": "torch.nn.utils.clip_grad_norm_({on}, 1.0)",
    "update": "{on}.step()",
    "scaler_update": "grad_scaler.step({on})\ngrad_scaler.update()",
    "reset": "{on}.zero_grad()",
    "scheduler_step": "{on}.step()",
}


@dataclass(frozen=True)
class SummaryEvent:
    """One event of a summary: ``kind`` (a key of :data:`SUMMARY_STATEMENTS`) on the parameter
    (or ``self`` attribute) ``on``, run only when the parameter ``gate`` is true (None: always)
    and the parameter ``given`` is not None (None: no such condition)."""

    kind: str
    on: str
    gate: str | None = None
    given: str | None = None


@dataclass(frozen=True)
class Summary:
    """What calling the library function or method ``name`` (qualified) does to the group.

    ``params``: its parameters in order (a ``name=default`` string gives a literal default, as
    a row writes it); ``method``: the first parameter is the receiver; ``divides``: the
    backpropagated loss is divided by this parameter first; ``read_from``: the package version
    and file the row was read from. The model inlines the body :meth:`source` writes like a
    project function (:mod:`accumlint.model.summaries`). Raises ``ValueError`` when an event
    names an unknown kind or parameter."""

    name: str
    params: tuple[str, ...]
    events: tuple[SummaryEvent, ...]
    method: bool = False
    divides: str | None = None
    read_from: Source | None = None

    def __post_init__(self) -> None:
        names = {param.split("=", 1)[0] for param in self.params}
        for event in self.events:
            if event.kind not in SUMMARY_STATEMENTS:
                raise ValueError(f"{self.name}: unknown event kind {event.kind!r}")
            root = event.on.split(".", 1)[0]
            if root not in names:
                raise ValueError(f"{self.name}: {event.on!r} is not a parameter")
            for condition in (event.gate, event.given):
                if condition is not None and condition not in names:
                    raise ValueError(f"{self.name}: gate {condition!r} is not a parameter")

    def source(self) -> str:
        """The Python text of the body this summary stands for."""
        lines = [f"def {self.name.rsplit('.', 1)[-1]}({', '.join(self.params)}):"]
        for event in self.events:
            on = event.on
            if event.kind in ("backward", "scaled_backward") and self.divides:
                on = f"({on} / {self.divides})"
            indent = "    "
            for test in ([event.gate] if event.gate else []) + ([f"{event.given} is not None"] if event.given else []):
                lines.append(f"{indent}if {test}:")
                indent += "    "
            for statement in SUMMARY_STATEMENTS[event.kind].format(on=on).splitlines():
                lines.append(indent + statement)
        if len(lines) == 1:
            lines.append("    pass")
        return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class ConfigCarrier:
    """A call that carries a framework setting under another name: ``call`` (qualified, or last
    segment) built with ``keyword=...`` stands for ``setting=...`` of the object it is passed to
    as ``passed_as`` (``Accelerator(gradient_accumulation_plugin=GradientAccumulationPlugin
    (num_steps=A))`` configures A like ``gradient_accumulation_steps=A``)."""

    call: str
    keyword: str
    position: int  # the keyword's position when passed positionally
    setting: str
    passed_as: str
    source: Source
