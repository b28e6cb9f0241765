"""The probe's state: everything its observers share, in one object.

:class:`runtime_guard.probe.Probe` owns one :class:`ProbeState` and hands it to each observer
(:mod:`runtime_guard.observe`) and to the shared services (:mod:`runtime_guard.observe.services`).
An observer keeps nothing another one reads: what two of them need is a field here, what only one
needs is that observer's own (private) attribute.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import torch

from runtime_guard import distributed as dist_helpers
from runtime_guard.epoch import LoaderWatch
from runtime_guard.fingerprint import GradState
from runtime_guard.graphs import GraphTracker
from runtime_guard.record import RunRecord
from runtime_guard.replay import Captured, LabelsSpec
from runtime_guard.shadows import ShadowWatch
from runtime_guard.trace import Microbatch, ObservedGroup
from runtime_guard.undo import UndoStack


@dataclass(eq=False)
class ProbeState:
    """The probe's shared state. Field groups, in order:

    **Settings** (set by ``Probe.__init__``, never changed): the probed objects as the probe uses them
    (``optimizer`` and ``scheduler`` unwrapped from Accelerate; ``prepared_*`` the wrappers, or ``None``),
    the arguments of :class:`~runtime_guard.probe.Probe` (``n_groups``: accumulation groups to probe),
    ``params`` (the model's trainable parameters, in order, each once) and their ``id``\\ s, and
    ``record``, the run's trace and setup facts that the card is built from.

    **Lifecycle**: the loop's thread (``threading.get_ident()`` at attach), whether anything is installed
    (``attached``; at an epoch end from the loader watch on), whether the hooks are in (``hooks_installed``),
    ``done`` (the probe observed enough or failed: it detaches at its next call on the loop's thread),
    ``detached``, the undo stack of everything installed and the saved-tensor ``tracker``.

    **Trace position**: ``seq`` (the next event's sequence number), ``serial`` (the next microbatch's serial
    number across groups), the open ``group`` and microbatch ``mb``, and ``in_backward`` (a backward reached the
    parameters and its end-of-backward callback has not run yet).

    **Forward passes** (:mod:`~runtime_guard.observe.forward`): ``nested_forwards`` (a compiled wrapper and its
    model are both hooked: the outer forward, ``active_forward``, is the microbatch), ``frozen_forward`` (the
    running forward has every probed parameter frozen), ``autocast_pending`` (the microbatch whose autocast
    state is read at its first child's forward), Accelerate's ``gradient_state``; the loader's batches on the
    loop's thread: ``yields`` (batches yielded while attached), ``yield_shapes`` (the last batch's tensor
    shapes, counted), ``yields_at_mb`` (``yields`` when the current microbatch opened), ``mb_input`` (its input
    shape) and, D > 1, ``loaded`` (the row hashes of the last batch, until a microbatch takes them).

    **Gradients**: ``grads_expected`` (the grads left by the last backward or observed clip or unscale) and
    ``rescales`` (the factors of changes since then that no observed call made, ``ObservedGroup.rescaled_by``);
    ``params_unsummed`` (the first microbatch, its parameter checksums taken at the next forward).

    **Replay** (``normalization="replay"``): ``snapshot`` (the grads at the group's last backward: tensors and
    the scaler's scale, or why there are none), ``snapshot_pending`` (the fingerprint and scale of the last
    backward, copied before the first call that may change the grads), ``replaying`` (the replay's own forwards
    and backwards run: nothing is recorded), ``captured`` (each microbatch's forward inputs, by serial) and
    ``logit_handles`` (the output and logits hooks of the microbatches, removed at detach).

    **Gradient operations and updates**: ``scaler_step_depth`` / ``prepared_zero_depth`` (nesting of
    ``scaler.step`` and of a prepared optimizer's ``zero_grad`` now running), ``other_model_calls`` (calls on
    the loop's thread on none of the probed parameters, by name), ``other_steps`` (``scaler.step`` of another
    model's optimizer since the scaler's last update), ``step_begun`` (an optimizer step's pre-hook ran, its
    post-hook not yet).

    **Replicas** (D > 1): the counting DDP comm hook (``comm``) and its bucket count at the current microbatch's
    forward (``comm_start``), and the guard's own gloo group (``xrank``, ``None`` once closed).

    **Epoch end** (``at="epoch_end"``): the loader ``watch``, ``window_start`` (the batch index, within the
    epoch, at which the hooks go in) and ``position`` ((epoch, batch index) last yielded by the watched loader).

    **Weight copies** (ACC007): the ``shadows`` followed and ``shadows_later`` (``"deferred"``: searched first at
    the first forward after the first update; ``"again"``: none found at install, searched once more there;
    ``""``: no search left).
    """

    # settings
    model: Any
    optimizer: torch.optim.Optimizer
    prepared_optimizer: Any
    scheduler: Any
    prepared_scheduler: Any
    scaler: Any
    accelerator: Any
    n_groups: int
    normalization: str | None
    count_comm: bool
    collective_timeout: float
    labels: LabelsSpec
    ignore_index: int
    loader: Any
    at: str
    record: RunRecord
    params: list[torch.nn.Parameter]
    param_ids: frozenset[int]
    # lifecycle
    thread: int | None = None
    attached: bool = False
    hooks_installed: bool = False
    done: bool = False
    detached: bool = False
    undo: UndoStack = field(default_factory=UndoStack)
    tracker: GraphTracker = field(default_factory=GraphTracker)
    # trace position
    seq: int = 0
    serial: int = 0
    group: ObservedGroup | None = None
    mb: Microbatch | None = None
    in_backward: bool = False
    # forward passes
    nested_forwards: bool = False
    active_forward: Any = None
    frozen_forward: bool = False
    autocast_pending: Microbatch | None = None
    gradient_state: Any = None
    yields: int = 0
    yield_shapes: Counter[tuple[int, ...]] = field(default_factory=Counter)
    yields_at_mb: int = 0
    mb_input: tuple[int, ...] | None = None
    loaded: dist_helpers.LoadedRows | None = None
    # gradients
    grads_expected: GradState | None = None
    rescales: list[float | None] = field(default_factory=list)
    params_unsummed: Microbatch | None = None
    # replay
    snapshot: tuple[list[torch.Tensor | None], float] | str | None = None
    snapshot_pending: tuple[GradState, float] | None = None
    replaying: bool = False
    captured: dict[int, Captured] = field(default_factory=dict)
    logit_handles: list[Any] = field(default_factory=list)
    # gradient operations and updates
    scaler_step_depth: int = 0
    prepared_zero_depth: int = 0
    other_model_calls: Counter[str] = field(default_factory=Counter)
    other_steps: int = 0
    step_begun: bool = False
    # replicas
    comm: dist_helpers.CommCounter | None = None
    comm_start: int = 0
    xrank: dist_helpers.GuardGroup | None = None
    # epoch end
    watch: LoaderWatch | None = None
    window_start: int | None = None
    position: tuple[int, int] | None = None
    # weight copies
    shadows: ShadowWatch = field(default_factory=ShadowWatch)
    shadows_later: str = ""
