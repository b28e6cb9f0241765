"""The event trace of the probed groups: what happened, in order, per group and microbatch.

Letters (design notes §1; declared with the linter's event kinds in
:class:`accumlint.spec.vocabulary.EventKind`, named in :mod:`runtime_guard.events`): F forward,
B end of one backward, Z gradient reset, C clip, S optimizer update, L scheduler step,
K ``scaler.scale``, X ``scaler.unscale_``, s ``scaler.step``, U ``scaler.update``, E the
watched loader's epoch iterator exhausted (probe at an epoch end). A group ends at its update attempt (``scaler.step``
when a scaler is probed, else the optimizer update); events after it and before the next
forward (scheduler step, reset) still belong to that group.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from runtime_guard.events import BACKWARD, EVENTS, FORWARD, LETTERS, SCALER_STEP, UPDATE
from runtime_guard.fingerprint import GradState

#: Words used for the letters in the one-line timeline of a group.
EVENT_WORDS = {letter: word for letter, (word, _) in EVENTS.items()}


@dataclass
class ObservedEvent:
    """One observed call (the linter's counterpart, a call in the source, is
    :class:`accumlint.model.events.Event`). ``kind`` is its trace letter
    (:data:`runtime_guard.events.BACKWARD`, ...); ``microbatch`` is the index within the group
    of the latest forward (``None`` before the group's first forward); ``detail`` holds the
    evidence (e.g. the fingerprints before and after a reset, ``source`` naming the call)."""

    seq: int
    kind: str
    group: int
    microbatch: int | None
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class CEWeights:
    """Per-token loss weights of one microbatch inferred from dL/dlogits (design notes §3).

    ``weight_sum`` (unitless, already divided by the scaler scale) and ``tokens`` (supervised
    rows: rows whose logits gradient is not all zero); ``spread`` is (max-min)/mean of the
    per-token weights inside the microbatch; ``residual`` the worst relative deviation from the
    softmax cross-entropy (or NLL-on-log-probabilities) form (large: another loss, nothing inferred).
    """

    weight_sum: float
    tokens: int
    spread: float
    residual: float
    rows: int
    # "softmax cross entropy" (dL/dlogits = w (softmax - onehot)) or "nll" (log-probabilities given to
    # nll_loss: dL/dlogprobs = -w onehot)
    form: str = "softmax cross entropy"
    # the weights vary with the target class only (``weight=`` of cross_entropy / nll_loss): ``weight_sum``
    # is then the exact sum over every supervised row and ``spread`` the largest spread inside one class
    by_class: bool = False


@dataclass
class LoggedFigure:
    """A rate the loop logged while probed (ACC903): its ``name``, ``value`` and ``unit`` (``"tokens"``,
    ``"examples"`` or ``""`` when its name gives none), the group it was logged in with the number of its
    microbatches then and whether its update had happened, ``seconds`` since the previous group's update
    attempt (``None`` before the probe saw one), and the ``source`` it was read from (``runtime_guard.log``
    or a hooked logger, :mod:`runtime_guard.observe.loggers`)."""

    name: str
    value: float
    unit: str
    group: int
    microbatches: int
    after_update: bool
    seconds: float | None
    source: str = "runtime_guard.log"


@dataclass
class Microbatch:
    """What the guard saw of one microbatch: a grad-enabled forward of the probed model with a parameter that
    requires grad, and the later passes on the same loaded batch that joined it (``passes``)."""

    group: int
    index: int  # within the group
    serial: int  # over the whole probe
    examples: int | None
    grads_at_forward: GradState
    # a wrapping bit sum per parameter; None where not taken (the probe's first microbatch when its
    # parameters were written before the next one: only ``param_bits`` compare it)
    params_at_forward: tuple[int, ...] | None
    param_bits: tuple[Any, ...]  # the sampled bits per parameter (fingerprint.bit_samples)
    sync_at_forward: bool | None = None
    sync_in_backward: bool | None = None
    backwards: int = 0
    output_reached: bool = False  # a backward reached its output (also one attributed to a later forward)
    grads_after_backward: GradState | None = None
    graphs_alive: list[int] = field(default_factory=list)  # serials of earlier microbatches
    saved_bytes_at_forward: int = 0
    kept_output_bytes: int = 0
    retained_saved_bytes: int = 0  # unpacked by its last backward, still alive after it
    last_backward_serial: int | None = None  # the tracker's number of its last backward
    saved_alive_at_next_forward: int = 0  # bytes its last backward unpacked, alive when the next one starts
    allreduce_buckets: int | None = None  # counted by the opt-in DDP comm hook
    saved_peak_bytes: int = 0
    device_bytes: dict[str, int] = field(default_factory=dict)  # allocated at forward, per device
    device_peak_bytes: dict[str, int] = field(default_factory=dict)
    autocast: str | None = None
    scale: float | None = None
    ce: CEWeights | None = None
    input_hashes: list[int] = field(default_factory=list)
    hashes_as_loaded: bool = False  # input_hashes are of the batch a DataLoader yielded, not of the model's input
    grads_replaced_before_backward: bool = False  # a grad present at forward was replaced before its backward
    epoch: int | None = None  # probe at an epoch end: the watched loader's epoch and batch (0-based) of this forward
    batch: int | None = None
    # dL/d(the mean-reduced loss) of this microbatch's backwards (the factor its mean loss was multiplied by,
    # scaler scale divided out); None when no backward root was a scaled mean loss. ``loss_weights`` counts the
    # backwards it was read from (more than one: several losses backpropagated apart, not judged)
    loss_weight: float | None = None
    loss_weights: int = 0
    loss_terms: list[float] = field(default_factory=list)  # each backward's factor, in order
    # forward/backward passes of the probed model on the one batch a DataLoader yielded (a GAN discriminator's
    # real and fake passes): the first opened this microbatch, the others joined it (``observe.forward``)
    passes: int = 1
    # a DataLoader yielded one batch between the previous microbatch's forward and this one's, and exactly one of
    # its tensors has the shape of this forward's input; None when no DataLoader yield was observed before it
    fresh_batch: bool | None = None
    # the learning rate of each of the probed optimizer's param_groups at this forward: a schedule written
    # into param_groups by hand (no scheduler object) shows as values changing between microbatches
    lrs: tuple[float, ...] = ()
    # elements of the first input tensor when it holds integers (token ids): the tokens a rate counts (ACC903)
    tokens: int | None = None


@dataclass
class ObservedGroup:
    """One accumulation group as observed at run time: its microbatches and the events up to
    the next forward (the linter's counterpart, a group read from the source, is
    :class:`accumlint.model.groups.Group`)."""

    index: int
    tail: bool = False  # the extra F/B watched after the last probed group
    # probe at an epoch end: "partial" (holds the epoch's last len(loader) % A microbatches), "next" (the next
    # epoch's first group), "" otherwise. A partial group not closed by an update is closed by the epoch end.
    role: str = ""
    microbatches: list[Microbatch] = field(default_factory=list)
    events: list[ObservedEvent] = field(default_factory=list)
    boundary_seq: int | None = None  # the update attempt that closed the group
    attempted: bool = False  # an update attempt closed it (:attr:`attempts` counts them all)
    applied: int = 0  # optimizer steps that ran to their end (the step post-hook), also after the first
    found_inf: bool | None = None
    grads_at_update: GradState | None = None
    # each change of the grads after the group's last backward that no observed call made (``p.grad.div_(A)``
    # at the boundary), seen at the entry of the next clip, unscale or the update: the factor of an in-place
    # rescale of every grad, None for any other change
    rescaled_by: list[float | None] = field(default_factory=list)
    lr_before: list[float] | None = None
    lr_after: list[float] | None = None
    saved_peak_bytes: int = 0
    device_peak_bytes: dict[str, int] = field(default_factory=dict)
    replicas_equal: bool | None = None  # grad checksums of all replicas equal at the update (D > 1)
    replay: dict[str, float] | str | None = None  # normalization="replay": cos/ratio vs both references
    # a copy of the parameters (weight EMA, averaged model) moved toward them inside the group, with the
    # parameters unchanged: (what holds the copy, the factor c of s' - p = c (s - p)) per move (ACC007)
    averaged: list[tuple[str, float]] = field(default_factory=list)
    updated_at: float | None = None  # time.perf_counter() at its update attempt: what a logged rate covers

    @property
    def closed(self) -> bool:
        """True once the group's update attempt happened."""
        return self.boundary_seq is not None

    def letters(self, kinds: str = LETTERS) -> str:
        """The group's events as letters, e.g. ``"FBFBFBFBCSLZ"``."""
        return "".join(e.kind for e in self.events if e.kind in kinds)

    def count(self, kind: str) -> int:
        """How many events of ``kind`` the group holds."""
        return sum(e.kind == kind for e in self.events)

    @property
    def attempts(self) -> int:
        """The update attempts the group holds: each ``GradScaler.step`` and each optimizer step not made
        inside one (the one that closed the group, and any after it before the next microbatch)."""
        return sum(e.kind == SCALER_STEP or (e.kind == UPDATE and not e.detail.get("inside_scaler_step"))
                   for e in self.events)

    def last_backward_seq(self) -> int | None:
        """Sequence number of the group's last B, or ``None``."""
        seqs = [e.seq for e in self.events if e.kind == BACKWARD]
        return seqs[-1] if seqs else None

    def first_backward_seq(self) -> int | None:
        """Sequence number of the group's first B, or ``None``."""
        return next((e.seq for e in self.events if e.kind == BACKWARD), None)

    def timeline(self) -> str:
        """One line: ``F B | F B | F B | F B ‖ clip step sched zero`` (K and X shown as words)."""
        last_b = self.last_backward_seq()
        parts: list[list[str]] = [[]]
        after: list[str] = []
        for e in self.events:
            word = EVENT_WORDS[e.kind]
            if last_b is not None and e.seq > last_b:
                after.append(word)
            elif e.kind == FORWARD and parts[-1]:
                parts.append([word])
            else:
                parts[-1].append(word)
        line = " | ".join(" ".join(p) for p in parts if p)
        return f"{line} ‖ {' '.join(after)}" if after else line
