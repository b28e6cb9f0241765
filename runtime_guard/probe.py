"""The probe: two lines around an unchanged training loop, observing its first groups.

``with probe(model, optimizer, accumulation_steps=A) as p:`` installs hooks and instance
wrappers that only observe (design notes §1), records the event trace of ``groups``
accumulation groups plus the next forward/backward (to see whether grads were reset),
then removes everything on the user's thread. ``p.report()`` gives the findings (same
rule codes as the linter) and the card.

Placed at an epoch end (``at="epoch_end"`` with ``loader=``), the probe first only watches the
loader (:mod:`runtime_guard.epoch`) and installs its hooks when the epoch reaches its last
``groups`` full groups; it then follows the partial group (``len(loader) % A`` microbatches)
and the next epoch's first group, and detaches after that group's update (plus the next
forward/backward), so that the card can say what the loop does with the partial group (ACC005).

This module holds the API and the lifecycle (arguments, setup facts, installing and removing
the hooks, the trace bookkeeping, detach and the report); what each hook records lives in its
event family's observer (:mod:`runtime_guard.observe`), mixed into :class:`Probe`.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import warnings
from collections import Counter
from collections.abc import Callable
from typing import Any, Literal

import torch

from runtime_guard import distributed as dist_helpers
from runtime_guard import frameworks, heap, warm
from runtime_guard.contain import call_through, contained_hook, contained_wrapper, describe
from runtime_guard.epoch import LoaderWatch
from runtime_guard.fingerprint import GradState, bit_checksums, bit_samples, grad_state, versions
from runtime_guard.graphs import GraphTracker, SavedTensorHooks
from runtime_guard.observe import eager
from runtime_guard.observe.backward import BackwardObserver
from runtime_guard.observe.figures import FiguresObserver
from runtime_guard.observe.forward import ForwardObserver
from runtime_guard.observe.gradient_ops import GradientOpsObserver
from runtime_guard.observe.loggers import LoggersObserver, loaded_loggers
from runtime_guard.observe.placement import PlacementObserver
from runtime_guard.observe.replicas import ReplicaObserver
from runtime_guard.observe.resets import ResetObserver
from runtime_guard.observe.schedule import ScheduleObserver
from runtime_guard.observe.updates import UpdateObserver
from runtime_guard.record import RunRecord
from runtime_guard.replay import Captured, LabelsSpec
from runtime_guard.report import GuardFindingError, GuardWarning, Report
from runtime_guard.shadows import ShadowWatch, find_shadows
from runtime_guard.trace import Microbatch, ObservedEvent, ObservedGroup
from runtime_guard.undo import UndoStack, patch_function, wrap_instance_method
from runtime_guard.user_frames import stacklevel_outside_guard, warnings_at_caller

OnFinding = Literal["collect", "warn", "raise"]
Normalization = Literal["infer", "replay"] | None
LossConvention = Literal["mean", "sum"]
Placement = Literal["start", "epoch_end"]


#: The probe attached in this process, if any. The process-wide patches (``clip_grad_norm_``, the
#: saved-tensor default hooks) and the instance wrappers are undone in LIFO order per probe; two probes
#: detaching out of order would put each other's wrappers back, so one probe is attached at a time.
_attached: list[Probe] = []


def _compiled_wrappers(model: Any) -> list[torch.nn.Module]:
    """The ``torch.compile`` wrappers (``OptimizedModule``) of ``model`` alive now. torch 2.13 dynamo
    skips guards on module hooks (``config.skip_nnmodule_hook_guards``): hooks added to ``model``
    after its wrapper compiled are never called through it, so the probe hooks the wrapper too."""
    dynamo = sys.modules.get("torch._dynamo")
    if dynamo is None or not isinstance(model, torch.nn.Module):
        return []
    from torch._dynamo.eval_frame import OptimizedModule

    # near the loop (the loop calls the wrapper), else one pass over the live objects (only once dynamo is
    # loaded): the wrapper holds the model two dicts deep
    wrappers = heap.near_the_loop([OptimizedModule])
    if wrappers is None:
        wrappers = heap.live_instances([OptimizedModule])
    return [w for w in wrappers if w._orig_mod is model]  # type: ignore[attr-defined]


def main_script(start: str | None = None) -> str:
    """The program's ``__main__`` file as the card shows it: relative to ``start`` (default: the
    current directory) where it lies below it, else its file name (a card is shared: it must not
    carry the user's home or folder layout); "" where ``__main__`` has no file."""
    path = str(getattr(sys.modules.get("__main__"), "__file__", "") or "")
    if not path:
        return ""
    try:
        relative = os.path.relpath(path, start)
    except ValueError:  # another drive (Windows)
        return os.path.basename(path)
    return os.path.basename(path) if relative.startswith(os.pardir) else relative


def _state_without_hooks(state: Any, handles: list[Any]) -> Any:
    """A module's ``__getstate__()`` result with the guard's hooks (``handles``) taken out of the hook
    dicts they were registered in (copies; the live module keeps them): what a pickle or deep copy
    of the module holds is what it would hold unprobed."""
    if not isinstance(state, dict):
        return state
    ours: dict[int, list[int]] = {}  # id of a hook dict -> the ids of our entries in it
    for handle in handles:
        for ref in (handle.hooks_dict_ref, *handle.extra_dict_ref):
            hooks = ref()
            if hooks is not None:
                ours.setdefault(id(hooks), []).append(handle.id)
    state = dict(state)
    for key, value in list(state.items()):
        if isinstance(value, dict) and id(value) in ours:
            kept = value.copy()
            for hook_id in ours[id(value)]:
                kept.pop(hook_id, None)
            state[key] = kept
    return state


def _state_without_hooks_wrapper(call: Callable[..., Any], handles: list[Any]) -> Callable[[], Any]:
    """The ``__getstate__`` wrapper body (:func:`runtime_guard.contain.contained_wrapper`): the user's
    state, less the guard's hooks."""
    return lambda: _state_without_hooks(call(), handles)


class Probe(ForwardObserver, BackwardObserver, ResetObserver, UpdateObserver, ScheduleObserver,
            GradientOpsObserver, PlacementObserver, ReplicaObserver, FiguresObserver, LoggersObserver):
    """Observes the first ``groups`` accumulation groups of a training loop.

    Args:
        model: the module the loop calls for each microbatch: a plain ``nn.Module``, a
            ``DistributedDataParallel`` wrapper, an FSDP2 (``fully_shard``) module or an
            Accelerate-prepared model.
        optimizer: the optimizer whose update closes a group (an Accelerate
            ``AcceleratedOptimizer`` is unwrapped to the optimizer it gates).
        accumulation_steps: A, microbatches per optimizer update; ``None``: read from the
            Accelerator (``gradient_state.num_steps``) or inferred from the observed groups
            and reported as inferred.
        scheduler: the LR scheduler, to count scheduler steps per update (ACC304).
        scaler: the ``torch.amp.GradScaler``; without it, skipped updates are invisible.
        groups: accumulation groups to probe (>= 1; ACC201 from kept lists needs 2).
        normalization: ``"infer"`` infers per-token loss weights from dL/dlogits for
            softmax cross-entropy outputs (free); ``"replay"`` also replays each probed group
            at its update against a token-weighted and a mean-of-means reference (+1
            forward/backward per microbatch, 3x parameter memory during the probed groups);
            ``None`` turns both off.
        labels: for replay: the forward's kwarg that holds the labels (HF style, default
            ``"labels"``) or ``callable(args, kwargs, output) -> labels``.
        ignore_index: for replay: the label value excluded from the loss.
        on_finding: ``"collect"`` (only in the report), ``"warn"`` (a :class:`GuardWarning`
            per finding when the probe detaches) or ``"raise"`` (:class:`GuardFindingError`
            at detach, after everything was removed).
        accelerator: the ``accelerate.Accelerator``, when the loop uses one.
        count_comm: install a counting DDP comm hook (all-reduce rounds per microbatch). It
            cannot be unregistered: after detach it only forwards to the default all-reduce.
        collective_timeout: seconds each of the guard's own cross-rank gathers (D > 1) waits
            for the other ranks; ``None``: ``RUNTIME_GUARD_COLLECTIVE_TIMEOUT`` or 60. They run on
            a gloo group of the guard's (created at attach, destroyed at detach), never on the
            program's group. At attach the ranks compare A, ``groups`` and ``at``; when they
            disagree, or a rank does not answer in time (it raised, or stopped), the guard stops
            comparing across ranks and says so in the card's notes instead of hanging.
        effective_batch: the effective batch (examples per optimizer update) the run is
            configured for; compared with the observed m x A x D (ACC404).
        loader: the training loader the loop iterates once per epoch, one microbatch per item
            (a ``DataLoader`` or any object with ``__len__`` and ``__iter__`` whose class can be
            swapped; not a ``list``). Needed by ``at="epoch_end"``; ignored otherwise.
        at: ``"start"`` (default): probe the first ``groups`` groups. ``"epoch_end"``: probe
            the end of the first epoch that reaches it: the last ``groups`` full groups of the
            epoch, the partial group of ``r = len(loader) % A`` microbatches and the next
            epoch's first group, then detach; the card's ``last_group`` says what the loop does
            with the partial group (ACC005). Until then only the loader is watched: while
            attached, ``type(loader)`` is a subclass of its class (restored on detach), batches
            and their order are unchanged. A loader without ``len()`` falls back to
            ``"start"`` and leaves the treatment "not observed". Needs A (given or from the
            Accelerator).
        loss_scale: the factor the loop deliberately puts on its cross-entropy loss (a task weight such
            as ``0.5 * ce + 0.5 * other``): a group's per-token weights are expected to sum to it, not to 1.
            Weights summing to neither it, it/A nor it x A are ACC101 (below) or ACC103 (above), with the
            measured sum and the factor it implies.
        lr_in_microbatches: the loop writes its learning rate into ``param_groups`` from a microbatch
            counter with the schedule's horizon and warmup counted in microbatches too (litgpt style):
            a learning rate that changes between the microbatches of a group is then by design, not
            ACC304. By default such changes, with no scheduler step the probe saw, are ACC304.
        loss_convention: ``"mean"`` (default): a group's per-token (or per-example) loss weights
            are expected to sum to 1 (x ``loss_scale``), a mean over the group's supervised tokens.
            ``"sum"`` declares a summed loss (``reduction="sum"``, no division; the learning rate
            is tuned for it): the weights are then expected to sum to the group's supervised-token
            count (weight 1 each), and a sum of 1 is accepted too. The card's
            ``normalization_groups`` reports, per group, the measured sum and its factor relative
            to the convention.

    Raises:
        ValueError: for invalid arguments (also ``at="epoch_end"`` without ``loader`` or, at
            attach, without a known A).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        *,
        accumulation_steps: int | None = None,
        scheduler: Any = None,
        scaler: Any = None,
        groups: int = 2,
        normalization: Normalization = "infer",
        on_finding: OnFinding = "collect",
        accelerator: Any = None,
        count_comm: bool = False,
        collective_timeout: float | None = None,
        effective_batch: int | None = None,
        labels: LabelsSpec = "labels",
        ignore_index: int = -100,
        loader: Any = None,
        at: Placement = "start",
        loss_scale: float = 1.0,
        lr_in_microbatches: bool = False,
        loss_convention: LossConvention = "mean",
    ) -> None:
        if groups < 1:
            raise ValueError(f"groups must be >= 1, got {groups}")
        if on_finding not in ("collect", "warn", "raise"):
            raise ValueError(f"on_finding must be 'collect', 'warn' or 'raise', got {on_finding!r}")
        if normalization not in ("infer", "replay", None):
            raise ValueError(f"normalization must be 'infer', 'replay' or None, got {normalization!r}")
        if at not in ("start", "epoch_end"):
            raise ValueError(f"at must be 'start' or 'epoch_end', got {at!r}")
        if at == "epoch_end" and loader is None:
            raise ValueError("at='epoch_end' needs the training loader: probe(..., loader=train_loader)")
        if loss_convention not in ("mean", "sum"):
            raise ValueError(f"loss_convention must be 'mean' or 'sum', got {loss_convention!r}")
        if not loss_scale > 0:
            raise ValueError(f"loss_scale must be > 0, got {loss_scale}")
        if accumulation_steps is not None and accumulation_steps < 1:
            raise ValueError(f"accumulation_steps must be >= 1, got {accumulation_steps}")
        self.model = model
        self.prepared_optimizer = optimizer if frameworks.is_accelerate(optimizer) else None
        self.optimizer = frameworks.unwrap_optimizer(optimizer)
        self.prepared_scheduler = scheduler if scheduler is not None and frameworks.is_accelerate(scheduler) else None
        self.scheduler = frameworks.unwrap_scheduler(scheduler) if scheduler is not None else None
        self.scaler = scaler
        self.accelerator = accelerator
        self.n_groups = groups
        self.normalization = normalization
        self.on_finding = on_finding
        self.count_comm = count_comm
        self.collective_timeout = dist_helpers.collective_timeout(collective_timeout)
        self._xrank: dist_helpers.GuardGroup | None = None
        self.labels = labels
        self.ignore_index = ignore_index
        self.loader = loader
        self.at = at
        self._watch: LoaderWatch | None = None
        self._window_start: int | None = None  # epoch_end: the batch index at which the hooks go in
        self._position: tuple[int, int] | None = None  # (epoch, batch) last yielded by the watched loader
        self._hooks_installed = False
        self._captured: dict[int, Captured] = {}
        # replay: the grads at the group's last backward (tensors, scaler scale), taken just before
        # the first call that may change them; a string says why there is none
        self._snapshot: tuple[list[torch.Tensor | None], float] | str | None = None
        self._snapshot_pending: tuple[GradState, float] | None = None
        self._replaying = False
        self.record = RunRecord(accumulation_steps=accumulation_steps, expected_effective_batch=effective_batch,
                                loss_scale=float(loss_scale), lr_in_microbatches=lr_in_microbatches,
                                loss_convention=loss_convention)
        self.params = list(dict.fromkeys(p for p in model.parameters() if p.requires_grad))
        self._param_ids = frozenset(id(p) for p in self.params)
        # calls on the loop's thread that touched none of the probed parameters (another model's), by name
        self._other_model_calls: Counter[str] = Counter()
        self._other_steps = 0  # scaler.step of another model's optimizer since the scaler's last update
        self._undo = UndoStack()
        self._tracker = GraphTracker()
        self._attached = False
        self._detached = False
        self._thread: int | None = None
        self._seq = 0
        self._serial = 0
        self._group: ObservedGroup | None = None
        self._mb: Microbatch | None = None
        self._in_backward = False
        self._done = False
        self._scaler_step_depth = 0
        self._prepared_zero_depth = 0
        self._logit_handles: list[Any] = []
        self._comm: dist_helpers.CommCounter | None = None
        self._comm_start = 0
        self._last_grads: GradState | None = None
        self._modules_seen = -1  # len(sys.modules) when the loggers were last looked up
        # the grads left by the last backward or the last observed clip or unscale, and the changes found since
        # the last backward that no observed call made (see ``ObservedGroup.rescaled_by``)
        self._grads_expected: GradState | None = None
        self._rescales: list[float | None] = []
        self._param_key: tuple[Any, ...] = ()
        self._param_checksums_cache: tuple[int, ...] | None = None
        self._params_unsummed: Microbatch | None = None  # the first microbatch, its checksums taken later
        self._report: Report | None = None
        self._gradient_state: Any = None
        self._nested_forwards = False
        self._active_forward: Any = None
        self._loaded: dist_helpers.LoadedRows | None = None  # D > 1: the batch a DataLoader last yielded
        # batches DataLoader iterators yielded on the loop's thread while attached; the shapes (with their counts)
        # of the last one's tensors of its first dimension; the count when the current microbatch opened and the
        # shape of its input: a later pass on the same batch joins it (observe.forward)
        self._yields = 0
        self._yield_shapes: Counter[tuple[int, ...]] = Counter()
        self._yields_at_mb = 0
        self._mb_input: tuple[int, ...] | None = None
        self._frozen_forward = False  # the forward running now has every probed parameter frozen
        self._autocast_pending: Microbatch | None = None  # its forward runs; autocast not read inside it yet
        self._shadows = ShadowWatch()
        # "deferred": weight copies searched for first at the first forward after the first update; "again":
        # none found at install, searched once more there; "": no search left
        self._shadows_later = ""
        self._step_begun = False  # an optimizer step's pre-hook ran, its post-hook not yet

    # -- public API ----------------------------------------------------------------------
    def __enter__(self) -> Probe:
        return self.attach()

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self._detach(clean=exc_type is None)

    def attach(self) -> Probe:
        """Install the hooks and wrappers (on the calling thread, which must run the loop).

        Raises:
            RuntimeError: when called twice.
        """
        if self._attached or self._detached:
            raise RuntimeError("a probe attaches once; create a new probe for another run")
        for other in list(_attached):
            if other.done and other._thread == threading.get_ident():
                other._detach(clean=True)  # finished, waiting for its next call to detach: do it now
                continue
            raise RuntimeError(
                f"another runtime_guard probe is attached in this process (on {type(other.model).__name__}, "
                f"{type(other.optimizer).__name__}): one probe at a time; detach it first (p.detach(), or leave "
                "its `with` block)")
        self._thread = threading.get_ident()
        warm.warm_up()  # once per process: the first microbatch does not pay the probe's first calls
        self._describe_setup()
        self._read_counters()
        try:
            self._open_guard_group()
            if not (self.at == "epoch_end" and self._place_at_epoch_end()):
                self._install()
        except BaseException:
            self._undo.run()
            self._close_guard_group()
            raise
        self._attached = True
        _attached.append(self)
        return self

    def detach(self) -> Report:
        """Remove everything the probe installed and compute the report (idempotent)."""
        self._detach(clean=True)
        assert self._report is not None
        return self._report

    def report(self) -> Report:
        """The findings and the card; detaches first when still attached."""
        if self._report is None:
            self._detach(clean=True)
        assert self._report is not None
        return self._report

    @property
    def attached(self) -> bool:
        """True while anything is installed (at an epoch end: from the loader watch on, before the hooks)."""
        return self._attached

    @property
    def done(self) -> bool:
        """True once the probed groups and the watched tail were observed (or the probe detached):
        the next call on the loop's thread detaches it; a caller may also ``detach()`` now."""
        return self._done or self._detached

    # -- setup ---------------------------------------------------------------------------
    def _describe_setup(self) -> None:
        rec = self.record
        rec.script = main_script()
        inner = getattr(self.model, "_orig_mod", self.model)  # a torch.compile wrapper: the compiled model
        rec.model_class = type(inner).__name__
        rec.optimizer_class = type(self.optimizer).__name__
        rec.ddp = frameworks.is_ddp(self.model)
        rec.fsdp2 = frameworks.is_fsdp2(self.model)
        rec.scaler_given = self.scaler is not None
        rec.scheduler_given = self.scheduler is not None
        rec.data_parallel = frameworks.data_parallel(self.model, self.accelerator)
        rec.param_dtypes = sorted({str(p.dtype).removeprefix("torch.") for p in self.params})
        rec.param_devices = sorted({str(p.device) for p in self.params})
        rec.parameters = sum(p.numel() for p in self.params)
        rec.batchnorm = frameworks.batchnorm_modules(self.model) if isinstance(self.model, torch.nn.Module) else []
        rec.bn_training = bool(rec.batchnorm) and self.model.training
        # Accelerate's GradientState (a shared singleton): its sync flag at each forward tells whether
        # accumulate() drives the loop's cadence (accelerate 1.15.0 accelerator.py ``_do_sync``)
        self._gradient_state = getattr(self.accelerator, "gradient_state", None) or getattr(
            self.prepared_optimizer, "gradient_state", None)
        if self.accelerator is not None or self.prepared_optimizer is not None:
            rec.accelerate = True
            num_steps = getattr(self._gradient_state, "num_steps", None)
            rec.accelerate_num_steps = num_steps
            # num_steps = 1 (the default) says nothing about a loop that accumulates by hand: A stays
            # given or inferred then, and the plain codes apply (ACC001/ACC006, not ACC501)
            if rec.accumulation_steps is None and num_steps and int(num_steps) > 1:
                rec.accumulation_steps = int(num_steps)
                rec.accumulation_source = "accelerator.gradient_state.num_steps"
        if self.prepared_scheduler is not None:
            split = bool(getattr(self.prepared_scheduler, "split_batches", True))
            procs = getattr(self.accelerator, "num_processes", 1) if self.accelerator is not None else 1
            rec.scheduler_steps_per_update = 1 if split else int(procs)
            rec.notes.append(
                "Accelerate prepared scheduler: steps the wrapped scheduler "
                f"{rec.scheduler_steps_per_update}x per update (num_processes unless split_batches; "
                "accelerate 1.15.0 scheduler.py)"
            )
        if rec.accumulation_steps is not None and rec.accumulation_source == "":
            rec.accumulation_source = "given to the probe"
        if frameworks.is_deepspeed_engine(self.model):
            rec.unobservable.append(
                "DeepSpeed engine: it owns the optimizer update, the gradient reset and the loss division "
                "(engine.step / engine.backward); update attempts, resets and normalization are not observed"
            )
        if rec.fsdp2:
            rec.notes.append("FSDP2: grads are sharded DTensors; fingerprints use each rank's local shards")
        if isinstance(self.model, torch.nn.Module) and any(
            type(m).__name__ == "CheckpointWrapper" for m in self.model.modules()
        ):
            rec.notes.append("activation checkpointing: saved activations counted outside checkpointed regions")

    def _install(self) -> None:
        with heap.one_walk():  # its searches (a compiled wrapper, weight copies) walk the stack once
            self._install_hooks()

    def _install_hooks(self) -> None:
        self._hooks_installed = True
        undo = self._undo
        model = self.model
        wrappers = _compiled_wrappers(model)
        self._nested_forwards = bool(wrappers)  # the wrapper's forward runs the model's: count it once
        if wrappers:
            self.record.notes.append(f"torch.compile: the probe also hooks the {len(wrappers)} compiled wrapper(s) of "
                                     f"{type(model).__name__} (hooks inside a compiled region may not run)")
        if isinstance(model, torch.nn.Module) and getattr(model, "_compiled_call_impl", None) is not None:
            self.record.notes.append("the model was compiled in place (module.compile()): its forward hooks may not "
                                     "run; give the probe a torch.compile(model) wrapper or the uncompiled model")
        pre, post = self._hook("forward pre-hook", self._on_forward_pre), self._hook("forward hook", self._on_forward)
        hooked: dict[torch.nn.Module, list[Any]] = {}  # module -> the handles of the guard's hooks on it
        for module in (model, *wrappers):
            h = module.register_forward_pre_hook(pre, with_kwargs=True)
            undo.push("model forward pre-hook", h.remove)
            hooked.setdefault(module, []).append(h)
            h = module.register_forward_hook(post, with_kwargs=True, always_call=True)
            undo.push("model forward hook", h.remove)
            hooked[module].append(h)
        if not wrappers and isinstance(model, torch.nn.Module) and getattr(model, "_compiled_call_impl", None) is None:
            # a framework's autocast is entered inside the forward: read at the first child's forward
            child = self._hook("child forward pre-hook", self._on_child_forward_pre)
            for module in dict.fromkeys(model.children()):
                h = module.register_forward_pre_hook(child)
                undo.push("child forward pre-hook", h.remove)
                hooked.setdefault(module, []).append(h)
        for module, handles in hooked.items():
            # a torch.save(model) checkpoint or a deep copy (an EMA model) taken while probing pickles the
            # module's hook dicts: ours would not pickle (closures) and must not travel with the copy
            wrap_instance_method(undo, module, "__getstate__", contained_wrapper(
                self._hook_failed, f"{type(module).__name__}.__getstate__ wrapper",
                functools.partial(_state_without_hooks_wrapper, handles=handles)))
        on_grad = self._hook("parameter gradient hook", self._on_param_grad)
        for p in self.params:
            h = p.register_post_accumulate_grad_hook(on_grad)
            undo.push("parameter post-accumulate hook", h.remove)
        h = self.optimizer.register_step_pre_hook(self._hook("optimizer step pre-hook", self._on_step_pre))
        undo.push("optimizer step pre-hook", h.remove)
        h = self.optimizer.register_step_post_hook(self._hook("optimizer step post-hook", self._on_step_post))
        undo.push("optimizer step post-hook", h.remove)
        wrappers_of = [(self.optimizer, "zero_grad", self._zero_grad_wrapper("optimizer.zero_grad"))]
        if isinstance(model, torch.nn.Module):
            wrappers_of.append((model, "zero_grad", self._zero_grad_wrapper("model.zero_grad")))
        if self.prepared_optimizer is not None:
            wrappers_of.append((self.prepared_optimizer, "zero_grad", self._prepared_zero_wrapper))
        if self.scheduler is not None:
            wrappers_of.append((self.scheduler, "step", self._scheduler_wrapper))
        if self.scaler is not None:
            wrappers_of += [(self.scaler, "scale", self._scale_wrapper),
                            (self.scaler, "unscale_", self._unscale_wrapper),
                            (self.scaler, "step", self._scaler_step_wrapper),
                            (self.scaler, "update", self._scaler_update_wrapper)]
        for obj, name, make in wrappers_of:
            where = f"{type(obj).__name__}.{name} wrapper"
            wrap_instance_method(undo, obj, name, contained_wrapper(self._hook_failed, where, make))
        # process-wide functions: only the loop thread's calls are observed (undo.patch_function)
        for name in ("clip_grad_norm_", "clip_grad_value_"):
            patch_function(undo, (torch.nn.utils, torch.nn.utils.clip_grad), name, self, self._thread,
                           _observed_call(f"{name} wrapper", functools.partial(type(self)._observe_clip, name=name)))
        # the batches a DataLoader yields: what a microbatch's passes share; ACC403: the examples as the loader
        # yields them, before the loop changes them
        patch_function(undo, (frameworks.dataloader_iterator_class(),), "__next__", self, self._thread,
                       _observed_call("DataLoader iterator wrapper", type(self)._observe_loaded))
        self._hook_loggers()
        if self.record.at_epoch_end or self.normalization is not None:  # the weight of each mean-reduced loss
            patch_function(undo, (torch.autograd,), "backward", self, self._thread,
                           _observed_call("autograd.backward wrapper", type(self)._observe_backward))
        hooks = SavedTensorHooks(self._tracker)
        hooks.push()
        undo.push("saved-tensor hooks", functools.partial(self._remove_saved_tensor_hooks, hooks))
        if self.count_comm and self.record.ddp:
            self._comm = dist_helpers.CommCounter()
            model.register_comm_hook(None, self._comm.make_hook())
            comm = self._comm
            undo.push("DDP comm hook (forwarding only)", lambda: setattr(comm, "active", False))
        undo.push("logits gradient hooks", self._remove_logit_hooks)
        if self.at == "start" and self.n_groups >= 2:
            # a fresh copy equals the parameters until the first update (no move to see before it): searched
            # at the first forward after it, off the first microbatch (where the zero-code mode attaches)
            self._shadows_later = "deferred"
        else:
            self._find_shadows()

    def _find_shadows(self, last: bool = False) -> None:
        """Find the copies of the parameters a loop may average into (ACC007, :mod:`runtime_guard.shadows`);
        a failure leaves ACC007 unobserved (the card says why) and nothing else. Unless this is the ``last``
        search, where none is alive yet :meth:`_check_shadows` searches once more at the second group's
        first forward."""
        if not isinstance(self.model, torch.nn.Module):
            self.record.shadow_copies = []  # nothing to copy parameters from: none to follow
            return
        first = self.record.shadow_copies is None
        try:
            self._shadows.shadows = find_shadows(self.model, self.params)
        except Exception as error:  # noqa: BLE001 - the guard's failure: ACC007 not observed, never a raise
            self.record.shadow_search = f"the guard's search for weight copies failed ({describe(error)})"
            self._shadows_later = ""
            return
        self.record.shadow_copies = [s.owner for s in self._shadows.shadows]
        self._shadows_later = "again" if not last and not self._shadows.shadows else ""
        if first:
            self._undo.push("weight copies", self._shadows.clear)

    def _check_shadows(self, inside: bool) -> None:
        """Sample the weight copies; moves toward the parameters count for the open group when ``inside``
        it (since its previous forward: the parameters did not change in between).

        The copies are searched for at the first forward after the first update (where the probe sits at
        the start and probes two groups or more: nothing moves a fresh copy before it), or at install and,
        where none was alive then, once more there: a copy made lazily (a callback's deepcopy at its first
        batch end, an EMA built at the first update) is followed from then on."""
        group = self._group
        if self._shadows_later and not inside and group is not None and group.index >= 1:
            again, self._shadows_later = self._shadows_later == "again", ""
            self._find_shadows(last=True)
            if again and self._shadows.shadows:
                self.record.notes.append(f"weight copies made after the probe attached, found at group {group.index}'s "
                                         f"first forward: {', '.join(self.record.shadow_copies or [])}")
        blends = self._shadows.check() if self._shadows.shadows else []
        self.record.shadows_apart = self.record.shadows_apart or self._shadows.apart
        if inside and blends and self._group is not None:
            self._group.averaged += [(b.owner, b.factor) for b in blends]

    def _remove_saved_tensor_hooks(self, hooks: SavedTensorHooks) -> None:
        hooks.remove()
        if hooks.pushed:
            self.record.notes.append(
                "the guard's saved-tensor hooks are beneath hooks the program pushed later, or on the loop's thread "
                "while the probe detached on another: they pass tensors through and leave at that thread's next "
                "saved tensor"
            )

    def _remove_logit_hooks(self) -> None:
        for handle in self._logit_handles:
            handle.remove()
        self._logit_handles.clear()
        self._captured.clear()  # replay inputs are not kept after detach
        self._snapshot = None
        self._snapshot_pending = None

    # -- bookkeeping ---------------------------------------------------------------------
    def _hook(self, where: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` as a hook body: kept out of ``torch.compile`` and its failures contained
        (:meth:`_hook_failed`), never raised into the loop."""
        return eager(contained_hook(self._hook_failed, where, fn))

    def _hook_failed(self, where: str, error: Exception) -> None:
        """The guard's own code at ``where`` raised ``error`` (contained): the probe stops observing (it
        detaches at its next call on the loop's thread) and its card says every check is "not observed"
        with the reason, instead of judging a trace with a hole in it."""
        self.record.guard_failures.append(f"the guard's {where} failed ({describe(error)})")
        self._done = True

    def _entry(self) -> bool:
        """Called first by every observer: False when nothing must be recorded. Runs a due
        auto-detach here, on the user's thread (never inside the autograd engine)."""
        if not self._attached or not self._hooks_installed:
            return False
        if self._done and threading.get_ident() == self._thread:
            self._detach(clean=True)
            return False
        return not self._done

    def _event(self, kind: str, **detail: Any) -> ObservedEvent:
        group = self._group
        microbatch = group.microbatches[-1].index if group is not None and group.microbatches else None
        event = ObservedEvent(self._seq, kind, group.index if group is not None else -1, microbatch, detail)
        self._seq += 1
        (group.events if group is not None else self.record.before_first_forward).append(event)
        return event

    def _grads(self, measure: bool = False) -> GradState:
        """The grads' fingerprint, reused while they are unchanged (same tensors, version counters
        and sampled bits); ``measure`` also takes the exact values (a pass over the grads)."""
        last = self._last_grads
        if last is None or not last.still_current(self.params):
            last = self._last_grads = grad_state(self.params)
        return last.measure(self.params) if measure else last

    def _around_grads(self, original: Callable[..., Any], args: tuple,
                      kwargs: dict) -> tuple[GradState, Any, GradState]:
        """Run the user's call ``original`` (a reset, a clip) between two fingerprints of the grads,
        its warnings at the caller's line: (before, its result, after)."""
        self._take_snapshot()
        before = self._grads()
        with warnings_at_caller():
            result = original(*args, **kwargs)
        return before, result, self._grads()

    def _hook_loggers(self) -> None:
        """ACC903: hook the loggers the program has imported (the rates the loop logs, read where it logs them)
        and that are not hooked yet: at install, then at each update while probing, since a script may import
        its logger after the probe attached (inside the loop, after its first group). Looked up again only
        when ``sys.modules`` changed size: nothing is imported here."""
        if len(sys.modules) == self._modules_seen:
            return
        self._modules_seen = len(sys.modules)
        for logger, cls, method in loaded_loggers():
            if logger.name in self.record.loggers:
                continue
            patch_function(self._undo, (cls,), method, self, self._thread,
                           _observed_call(f"{logger.name} wrapper",
                                          functools.partial(type(self)._observe_logger, logger=logger)))
            self.record.loggers.append(logger.name)

    def _param_checksums(self) -> tuple[tuple[int, ...] | None, tuple[Any, ...]]:
        """The parameters' checksums (``None`` at the probe's first microbatch) and their sampled bits.

        Parameters are only checksummed after a write: a version counter bumped, or sampled bits changed
        (writes through .data bypass the counter). The first microbatch (where the zero-code mode attaches,
        inside the script's first forward) takes only the samples; the next call fills its checksums in
        when neither versions nor samples changed since, else they stay ``None``."""
        current = (versions(self.params), bit_samples(self.params))
        if not self._param_key:
            self._param_key = current
            return None, current[1]
        if current != self._param_key or self._param_checksums_cache is None:
            unchanged = current == self._param_key
            self._param_key = current
            self._param_checksums_cache = bit_checksums(self.params)
            if self._params_unsummed is not None and unchanged:
                self._params_unsummed.params_at_forward = self._param_checksums_cache
            self._params_unsummed = None
        return self._param_checksums_cache, current[1]

    def _device_memory(self) -> dict[str, int]:
        if not torch.cuda.is_available():
            return {}
        devices = {p.device for p in self.params if p.device.type == "cuda"}
        return {str(d): torch.cuda.memory_allocated(d) for d in sorted(devices, key=str)}

    def _device_peaks(self, reset: bool) -> dict[str, int]:
        if not torch.cuda.is_available():
            return {}
        peaks = {}
        for d in sorted({p.device for p in self.params if p.device.type == "cuda"}, key=str):
            peaks[str(d)] = torch.cuda.max_memory_allocated(d)
            if reset:
                torch.cuda.reset_peak_memory_stats(d)
        return peaks

    # -- detach and report ---------------------------------------------------------------
    def _detach(self, clean: bool) -> None:
        if self._detached:
            return
        was_attached = self._attached
        self._attached = False
        self._detached = True
        if self in _attached:
            _attached.remove(self)
        try:
            self._undo.run()
        except Exception as error:  # noqa: BLE001 - every other removal ran; the card says which failed
            self.record.notes.append(f"the guard failed removing one of its hooks ({describe(error)})")
        if self._comm is not None:
            self.record.comm_buckets = self._comm.buckets
        self.record.clean_exit = clean
        try:
            if was_attached:
                self._finalize(clean)
        except GuardFindingError:
            raise
        except Exception as error:  # noqa: BLE001 - the guard's failure: a card that says so, never a raise
            self._report = self._failed_report(f"the guard failed building its report ({describe(error)})")
        finally:
            if self._xrank is not None:  # _finalize did not get to the card (it raised)
                self._close_guard_group()

    def _failed_report(self, reason: str) -> Report:
        """A report without findings whose card says every check is "not observed: ``reason``" (in its
        notes too: the text card shows those)."""
        from runtime_guard.card import SCHEMA
        from runtime_guard.checks import RUNTIME_CHECKS

        status = f"not observed: {reason}"
        return Report(findings=[], card={"schema": SCHEMA, "checks": dict.fromkeys(RUNTIME_CHECKS, status),
                                         "notes": [*self.record.notes, status]})

    def _finalize(self, clean: bool) -> None:
        from runtime_guard.card import build_card
        from runtime_guard.checks import evaluate

        rec = self.record
        dp = rec.data_parallel
        if clean and dp is not None and (dp.size or 1) > 1 and dp.group is not None:
            self._gather_across_replicas()
        self._close_guard_group()
        self._note_passes()
        if self._other_model_calls:
            calls = ", ".join(f"{name} {n}x" for name, n in sorted(self._other_model_calls.items()))
            rec.notes.append(f"calls on another model's parameters or optimizer, none of {rec.model_class}'s, were "
                             f"not counted as its own: {calls}")
        card = build_card(rec)
        # a code the card marks not observable (e.g. an engine that owns the update) is never guessed at
        findings = [f for f in evaluate(rec) if not card["checks"].get(f.code, "").startswith("not observable")]
        if rec.guard_failures:  # a trace with a hole in it is not judged (the card says why)
            findings = []
        self._report = Report(findings=findings, card=card)
        if not clean:
            return
        if self.on_finding == "warn":
            for finding in findings:
                warnings.warn(GuardWarning(finding.one_line()), stacklevel=stacklevel_outside_guard())
        elif self.on_finding == "raise" and findings:
            raise GuardFindingError(self._report)


def probe(model: torch.nn.Module, optimizer: torch.optim.Optimizer, **options: Any) -> Probe:
    """Create a :class:`Probe` (use it as a context manager, or call ``.attach()``).

    ``options`` are the keyword arguments of :class:`Probe`.
    """
    return Probe(model, optimizer, **options)


def _observed_call(where: str, observe: Callable[..., Any]) -> Callable[..., Any]:
    """``observe(probe, original, args, kwargs)`` for :func:`~runtime_guard.undo.patch_function`, run
    through :func:`~runtime_guard.contain.call_through` (the user's call once, its exception unchanged,
    the guard's failures contained). Holds no probe, as ``patch_function`` requires."""

    def contained(live: Probe, original: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        return call_through(live._hook_failed, where, original, lambda call: observe(live, call, args, kwargs),
                            args, kwargs)

    return contained
