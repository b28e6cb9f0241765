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
the hooks, detach and the report). The probe owns one :class:`~runtime_guard.observe.state.ProbeState`
(everything its observers share) and composes the observers, one per event family
(:mod:`runtime_guard.observe`), each constructed with that state, the shared services
(:class:`~runtime_guard.observe.services.ProbeServices`) and the observers whose public methods it calls.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import warnings
from collections.abc import Callable
from typing import Any, Literal

import torch

from accumlint import frameworks as fw
from runtime_guard import distributed as dist_helpers
from runtime_guard import frameworks, heap, warm
from runtime_guard.contain import contained_wrapper, describe
from runtime_guard.graphs import SavedTensorHooks
from runtime_guard.observe import observed_call
from runtime_guard.observe.backward import BackwardObserver
from runtime_guard.observe.copies import WeightCopies
from runtime_guard.observe.figures import FiguresObserver
from runtime_guard.observe.forward import ForwardObserver
from runtime_guard.observe.gradient_ops import GradientOpsObserver
from runtime_guard.observe.loggers import LoggersObserver
from runtime_guard.observe.placement import PlacementObserver
from runtime_guard.observe.replicas import ReplicaObserver
from runtime_guard.observe.resets import ResetObserver
from runtime_guard.observe.schedule import ScheduleObserver
from runtime_guard.observe.services import ProbeServices
from runtime_guard.observe.state import ProbeState
from runtime_guard.observe.updates import UpdateObserver
from runtime_guard.record import RunRecord
from runtime_guard.replay import LabelsSpec
from runtime_guard.report import GuardFindingError, GuardWarning, Report
from runtime_guard.undo import patch_function, wrap_instance_method
from runtime_guard.user_frames import stacklevel_outside_guard

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


class _Setting:
    """A read-only attribute of :class:`Probe` that is a field of its state's settings (one place holds it)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, probe: Probe | None, owner: type) -> Any:
        return self if probe is None else getattr(probe._state, self.name)


class Probe:
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
        prepared_optimizer = optimizer if frameworks.is_accelerate(optimizer) else None
        prepared_scheduler = scheduler if scheduler is not None and frameworks.is_accelerate(scheduler) else None
        params = list(dict.fromkeys(p for p in model.parameters() if p.requires_grad))
        self.on_finding = on_finding
        state = self._state = ProbeState(
            model=model, optimizer=frameworks.unwrap_optimizer(optimizer), prepared_optimizer=prepared_optimizer,
            scheduler=frameworks.unwrap_scheduler(scheduler) if scheduler is not None else None,
            prepared_scheduler=prepared_scheduler, scaler=scaler, accelerator=accelerator, n_groups=groups,
            normalization=normalization, count_comm=count_comm,
            collective_timeout=dist_helpers.collective_timeout(collective_timeout), labels=labels,
            ignore_index=ignore_index, loader=loader, at=at,
            record=RunRecord(accumulation_steps=accumulation_steps, expected_effective_batch=effective_batch,
                             loss_scale=float(loss_scale), lr_in_microbatches=lr_in_microbatches,
                             loss_convention=loss_convention),
            params=params, param_ids=frozenset(id(p) for p in params),
        )
        self._report: Report | None = None
        # the observers: each works on the state through the services and calls the public methods of those
        # it is given (nothing else is shared)
        services = self._services = ProbeServices(state, self._detach)
        self._replicas = ReplicaObserver(state, services)
        self._copies = WeightCopies(state, services)
        self._figures = FiguresObserver(state, services)
        self._loggers = LoggersObserver(state, services, self._figures)
        self._backward = BackwardObserver(state, services)
        self._forward = ForwardObserver(state, services, self._backward, self._replicas, self._copies)
        self._updates = UpdateObserver(state, services, self._replicas, self._copies, self._loggers)
        self._gradient_ops = GradientOpsObserver(state, services, self._updates, self._replicas)
        self._resets = ResetObserver(state, services)
        self._schedule = ScheduleObserver(state, services)
        self._placement = PlacementObserver(state, services, self._install)

    #: The probe's settings, read from its state (set once, in ``__init__``).
    model = _Setting()
    optimizer = _Setting()
    prepared_optimizer = _Setting()
    scheduler = _Setting()
    prepared_scheduler = _Setting()
    scaler = _Setting()
    accelerator = _Setting()
    n_groups = _Setting()
    normalization = _Setting()
    count_comm = _Setting()
    collective_timeout = _Setting()
    labels = _Setting()
    ignore_index = _Setting()
    loader = _Setting()
    at = _Setting()
    record = _Setting()
    params = _Setting()

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
        if self._state.attached or self._state.detached:
            raise RuntimeError("a probe attaches once; create a new probe for another run")
        for other in list(_attached):
            if other.done and other._state.thread == threading.get_ident():
                other._detach(clean=True)  # finished, waiting for its next call to detach: do it now
                continue
            raise RuntimeError(
                f"another runtime_guard probe is attached in this process (on {type(other.model).__name__}, "
                f"{type(other.optimizer).__name__}): one probe at a time; detach it first (p.detach(), or leave "
                "its `with` block)")
        self._state.thread = threading.get_ident()
        warm.warm_up()  # once per process: the first microbatch does not pay the probe's first calls
        self._describe_setup()
        self._figures.read_counters()
        try:
            self._replicas.open_guard_group()
            if not (self._state.at == "epoch_end" and self._placement.place_at_epoch_end()):
                self._install()
        except BaseException:
            self._state.undo.run()
            self._replicas.close_guard_group()
            raise
        self._state.attached = True
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
        return self._state.attached

    @property
    def done(self) -> bool:
        """True once the probed groups and the watched tail were observed (or the probe detached):
        the next call on the loop's thread detaches it; a caller may also ``detach()`` now."""
        return self._state.done or self._state.detached

    def adopt_iterator(self, iterator: Any, yielded: int) -> bool:
        """``at="epoch_end"`` attached after the first epoch began: watch its running iterator
        too, which has already yielded ``yielded`` batches (its class is swapped in place and
        restored on detach). Returns False when it cannot be watched (nothing changed)."""
        return self._placement.adopt_iterator(iterator, yielded)

    def adopt_read_ahead(self, iterator: Any, yielded: int, last: bool) -> bool:
        """As :meth:`adopt_iterator`, where the watched loader reads ``iterator``, its DataLoader's, one batch
        ahead of the loop (:meth:`runtime_guard.observe.placement.PlacementObserver.adopt_read_ahead`)."""
        return self._placement.adopt_read_ahead(iterator, yielded, last)

    # -- setup ---------------------------------------------------------------------------
    def _describe_setup(self) -> None:
        state = self._state
        rec = state.record
        rec.script = main_script()
        inner = getattr(state.model, "_orig_mod", state.model)  # a torch.compile wrapper: the compiled model
        rec.model_class = type(inner).__name__
        rec.optimizer_class = type(state.optimizer).__name__
        rec.optimizer_scale_invariant = frameworks.scale_invariant_optimizer(state.optimizer)
        rec.ddp = frameworks.is_ddp(state.model)
        rec.fsdp2 = frameworks.is_fsdp2(state.model)
        rec.scaler_given = state.scaler is not None
        rec.scheduler_given = state.scheduler is not None
        rec.data_parallel = frameworks.data_parallel(state.model, state.accelerator)
        rec.param_dtypes = sorted({str(p.dtype).removeprefix("torch.") for p in state.params})
        rec.param_devices = sorted({str(p.device) for p in state.params})
        rec.parameters = sum(p.numel() for p in state.params)
        rec.batchnorm = frameworks.batchnorm_modules(state.model) if isinstance(state.model, torch.nn.Module) else []
        rec.bn_training = bool(rec.batchnorm) and state.model.training
        # Accelerate's GradientState (a shared singleton): its sync flag at each forward tells whether
        # accumulate() drives the loop's cadence (accelerate 1.15.0 accelerator.py ``_do_sync``)
        state.gradient_state = getattr(state.accelerator, "gradient_state", None) or getattr(
            state.prepared_optimizer, "gradient_state", None)
        if state.accelerator is not None or state.prepared_optimizer is not None:
            rec.accelerate = True
            num_steps = getattr(state.gradient_state, "num_steps", None)
            rec.accelerate_num_steps = num_steps
            # num_steps = 1 (the default) says nothing about a loop that accumulates by hand: A stays
            # given or inferred then, and the plain codes apply (ACC001/ACC006, not ACC501)
            if rec.accumulation_steps is None and num_steps and int(num_steps) > 1:
                rec.accumulation_steps = int(num_steps)
                rec.accumulation_source = "accelerator.gradient_state.num_steps"
        if state.prepared_scheduler is not None:
            split = bool(getattr(state.prepared_scheduler, "split_batches", True))
            procs = getattr(state.accelerator, "num_processes", 1) if state.accelerator is not None else 1
            rec.scheduler_steps_per_update = 1 if split else int(procs)
            rec.notes.append(
                "Accelerate prepared scheduler: steps the wrapped scheduler "
                f"{rec.scheduler_steps_per_update}x per update (num_processes unless split_batches; "
                "accelerate 1.15.0 scheduler.py)"
            )
        if rec.accumulation_steps is not None and rec.accumulation_source == "":
            rec.accumulation_source = "given to the probe"
        if frameworks.is_deepspeed_engine(state.model):
            rec.unobservable.append(
                "DeepSpeed engine: it owns the optimizer update, the gradient reset and the loss division "
                "(engine.step / engine.backward); update attempts, resets and normalization are not observed"
            )
        if rec.fsdp2:
            rec.notes.append("FSDP2: grads are sharded DTensors; fingerprints use each rank's local shards")
        if isinstance(state.model, torch.nn.Module) and any(
            type(m).__name__ == "CheckpointWrapper" for m in state.model.modules()
        ):
            rec.notes.append("activation checkpointing: saved activations counted outside checkpointed regions")

    def _install(self) -> None:
        with heap.one_walk():  # its searches (a compiled wrapper, weight copies) walk the stack once
            self._install_hooks()

    def _install_hooks(self) -> None:
        state = self._state
        state.hooks_installed = True
        undo, model, thread = state.undo, state.model, state.thread
        hook = self._services.hook
        wrappers = _compiled_wrappers(model)
        state.nested_forwards = bool(wrappers)  # the wrapper's forward runs the model's: count it once
        if wrappers:
            state.record.notes.append(f"torch.compile: the probe also hooks the {len(wrappers)} compiled wrapper(s) of "
                                     f"{type(model).__name__} (hooks inside a compiled region may not run)")
        if isinstance(model, torch.nn.Module) and getattr(model, "_compiled_call_impl", None) is not None:
            state.record.notes.append("the model was compiled in place (module.compile()): its forward hooks may not "
                                     "run; give the probe a torch.compile(model) wrapper or the uncompiled model")
        forward = self._forward
        pre, post = hook("forward pre-hook", forward.on_forward_pre), hook("forward hook", forward.on_forward)
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
            child = hook("child forward pre-hook", self._forward.on_child_forward_pre)
            for module in dict.fromkeys(model.children()):
                h = module.register_forward_pre_hook(child)
                undo.push("child forward pre-hook", h.remove)
                hooked.setdefault(module, []).append(h)
        for module, handles in hooked.items():
            # a torch.save(model) checkpoint or a deep copy (an EMA model) taken while probing pickles the
            # module's hook dicts: ours would not pickle (closures) and must not travel with the copy
            wrap_instance_method(undo, module, "__getstate__", contained_wrapper(
                self._services.hook_failed, f"{type(module).__name__}.__getstate__ wrapper",
                functools.partial(_state_without_hooks_wrapper, handles=handles)))
        on_grad = hook("parameter gradient hook", self._backward.on_param_grad)
        for p in state.params:
            h = p.register_post_accumulate_grad_hook(on_grad)
            undo.push("parameter post-accumulate hook", h.remove)
        h = state.optimizer.register_step_pre_hook(hook("optimizer step pre-hook", self._updates.on_step_pre))
        undo.push("optimizer step pre-hook", h.remove)
        h = state.optimizer.register_step_post_hook(hook("optimizer step post-hook", self._updates.on_step_post))
        undo.push("optimizer step post-hook", h.remove)
        wrappers_of = [(state.optimizer, "zero_grad", self._resets.zero_grad_wrapper("optimizer.zero_grad"))]
        if isinstance(model, torch.nn.Module):
            wrappers_of.append((model, "zero_grad", self._resets.zero_grad_wrapper("model.zero_grad")))
        if state.prepared_optimizer is not None:
            wrappers_of.append((state.prepared_optimizer, "zero_grad", self._resets.prepared_zero_wrapper))
        if state.scheduler is not None:
            wrappers_of.append((state.scheduler, "step", self._schedule.scheduler_wrapper))
        if state.scaler is not None:
            wrappers_of += [(state.scaler, "scale", self._gradient_ops.scale_wrapper),
                            (state.scaler, "unscale_", self._gradient_ops.unscale_wrapper),
                            (state.scaler, "step", self._gradient_ops.scaler_step_wrapper),
                            (state.scaler, "update", self._gradient_ops.scaler_update_wrapper)]
        for obj, name, make in wrappers_of:
            where = f"{type(obj).__name__}.{name} wrapper"
            wrap_instance_method(undo, obj, name, contained_wrapper(self._services.hook_failed, where, make))
        # process-wide functions: only the loop thread's calls are observed (undo.patch_function)
        for name in sorted(fw.pytorch.CLIP_FUNCTIONS - fw.pytorch.CLIP_ALIASES):
            patch_function(undo, (torch.nn.utils, torch.nn.utils.clip_grad), name, self._gradient_ops, thread,
                           observed_call(f"{name} wrapper",
                                         functools.partial(GradientOpsObserver.observe_clip, name=name)))
        # the batches a DataLoader yields: what a microbatch's passes share; ACC403: the examples as the loader
        # yields them, before the loop changes them
        patch_function(undo, (frameworks.dataloader_iterator_class(),), "__next__", self._replicas, thread,
                       observed_call("DataLoader iterator wrapper", ReplicaObserver.observe_loaded))
        self._loggers.hook_loggers()
        if state.record.at_epoch_end or state.normalization is not None:  # the weight of each mean-reduced loss
            patch_function(undo, (torch.autograd,), "backward", self._backward, thread,
                           observed_call("autograd.backward wrapper", BackwardObserver.observe_backward))
        hooks = SavedTensorHooks(state.tracker)
        hooks.push()
        undo.push("saved-tensor hooks", functools.partial(self._remove_saved_tensor_hooks, hooks))
        if state.count_comm and state.record.ddp:
            state.comm = dist_helpers.CommCounter()
            model.register_comm_hook(None, state.comm.make_hook())
            comm = state.comm
            undo.push("DDP comm hook (forwarding only)", lambda: setattr(comm, "active", False))
        undo.push("logits gradient hooks", self._remove_logit_hooks)
        if state.at == "start" and state.n_groups >= 2:
            # a fresh copy equals the parameters until the first update (no move to see before it): searched
            # at the first forward after it, off the first microbatch (where the zero-code mode attaches)
            state.shadows_later = "deferred"
        else:
            self._copies.find_shadows()

    def _remove_saved_tensor_hooks(self, hooks: SavedTensorHooks) -> None:
        hooks.remove()
        if hooks.pushed:
            self._state.record.notes.append(
                "the guard's saved-tensor hooks are beneath hooks the program pushed later, or on the loop's thread "
                "while the probe detached on another: they pass tensors through and leave at that thread's next "
                "saved tensor"
            )

    def _remove_logit_hooks(self) -> None:
        for handle in self._state.logit_handles:
            handle.remove()
        self._state.logit_handles.clear()
        self._state.captured.clear()  # replay inputs are not kept after detach
        self._state.snapshot = None
        self._state.snapshot_pending = None

    # -- detach and report ---------------------------------------------------------------
    def _detach(self, clean: bool) -> None:
        if self._state.detached:
            return
        was_attached = self._state.attached
        self._state.attached = False
        self._state.detached = True
        if self in _attached:
            _attached.remove(self)
        try:
            self._state.undo.run()
        except Exception as error:  # noqa: BLE001 - every other removal ran; the card says which failed
            self._state.record.notes.append(f"the guard failed removing one of its hooks ({describe(error)})")
        if self._state.comm is not None:
            self._state.record.comm_buckets = self._state.comm.buckets
        self._state.record.clean_exit = clean
        try:
            if was_attached:
                self._finalize(clean)
        except GuardFindingError:
            raise
        except Exception as error:  # noqa: BLE001 - the guard's failure: a card that says so, never a raise
            self._report = self._failed_report(f"the guard failed building its report ({describe(error)})")
        finally:
            if self._state.xrank is not None:  # _finalize did not get to the card (it raised)
                self._replicas.close_guard_group()

    def _failed_report(self, reason: str) -> Report:
        """A report without findings whose card says every check is "not observed: ``reason``" (in its
        notes too: the text card shows those)."""
        from runtime_guard.card import SCHEMA
        from runtime_guard.checks import RUNTIME_CHECKS

        status = f"not observed: {reason}"
        return Report(findings=[], card={"schema": SCHEMA, "checks": dict.fromkeys(RUNTIME_CHECKS, status),
                                         "notes": [*self._state.record.notes, status]})

    def _finalize(self, clean: bool) -> None:
        from runtime_guard.card import build_card
        from runtime_guard.checks import evaluate

        rec = self._state.record
        dp = rec.data_parallel
        if clean and dp is not None and (dp.size or 1) > 1 and dp.group is not None:
            self._replicas.gather_across_replicas()
        self._replicas.close_guard_group()
        self._forward.note_passes()
        if self._state.other_model_calls:
            calls = ", ".join(f"{name} {n}x" for name, n in sorted(self._state.other_model_calls.items()))
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


def figures_observers(thread: int) -> list[FiguresObserver]:
    """The figures observers of the probes attached with ``thread`` as their loop's thread
    (:func:`runtime_guard.observe.figures.log`)."""
    return [p._figures for p in list(_attached) if p._state.thread == thread]
