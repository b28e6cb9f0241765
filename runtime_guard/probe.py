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
"""

from __future__ import annotations

import functools
import sys
import threading
import warnings
from collections.abc import Callable
from typing import Any, Literal

import torch

from runtime_guard import distributed as dist_helpers
from runtime_guard import frameworks
from runtime_guard.ce_weights import infer_weights, logits_of
from runtime_guard.epoch import LoaderWatch, loader_length
from runtime_guard.fingerprint import GradState, bit_checksums, bit_samples, grad_state, versions
from runtime_guard.graphs import GraphTracker, tensors_in
from runtime_guard.record import RunRecord
from runtime_guard.replay import Captured, LabelsSpec, capture, replay_group
from runtime_guard.report import GuardFindingError, GuardWarning, Report
from runtime_guard.trace import Event, Group, Microbatch
from runtime_guard.undo import UndoStack, patch_module_attribute, wrap_instance_method
from runtime_guard.user_frames import stacklevel_outside_guard, warnings_at_caller

OnFinding = Literal["collect", "warn", "raise"]
Normalization = Literal["infer", "replay"] | None
Placement = Literal["start", "epoch_end"]

#: Backward nodes of a loss reduced by a mean (``reduction="mean"``; ``MeanBackward0`` is ``.mean()`` over
#: all elements): the gradient reaching them is the weight the loop gave that microbatch's mean loss.
_MEAN_LOSS_NODES = frozenset({
    "MseLossBackward0", "L1LossBackward0", "SmoothL1LossBackward0", "HuberLossBackward0", "NllLossBackward0",
    "BinaryCrossEntropyBackward0", "BinaryCrossEntropyWithLogitsBackward0", "KlDivBackward0",
})
_MEAN_REDUCTION = 1  # at::Reduction::Mean

#: Without a known A, a group that has not ended after this many microbatches ends the probe.
MAX_MICROBATCHES_WITHOUT_A = 256
#: Without a known A and with an update every microbatch, the probe follows up to this many groups
#: to see two gradient resets (their period is the A the loop meant: ``RunRecord.reset_period``).
MAX_GROUPS_FOR_RESETS = 32

#: The probe attached in this process, if any. The process-wide patches (``clip_grad_norm_``, the
#: saved-tensor default hooks) and the instance wrappers are undone in LIFO order per probe; two probes
#: detaching out of order would put each other's wrappers back, so one probe is attached at a time.
_attached: list[Probe] = []


def _first_tensor(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor | None:
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor) and value.dim() >= 1:
            return value
    return None


def _autocast_state() -> str | None:
    for device in ("cuda", "cpu"):
        try:
            if torch.is_autocast_enabled(device):
                return f"{device}:{str(torch.get_autocast_dtype(device)).removeprefix('torch.')}"
        except RuntimeError:  # device type not built into this torch
            continue
    return None


def _mean_loss_node(tensors: Any) -> Any:
    """The backward node of the mean-reduced loss under a scalar root made of constant
    multiplications and divisions (``loss / A``, ``scaler.scale(loss * w)``), or ``None``."""
    if not isinstance(tensors, torch.Tensor) or tensors.numel() != 1 or tensors.grad_fn is None:
        return None
    node = tensors.grad_fn
    for _ in range(16):
        name = type(node).__name__
        if name == "MeanBackward0" or (name in _MEAN_LOSS_NODES
                                       and getattr(node, "_saved_reduction", None) == _MEAN_REDUCTION):
            return node
        if name not in ("MulBackward0", "DivBackward0") or not node.next_functions:
            return None
        node = node.next_functions[0][0]
        if node is None:
            return None
    return None


def _eager(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` kept out of ``torch.compile``'s tracing (it runs eagerly, a graph break) once dynamo is
    loaded: the probe's hooks read and write Python state that a traced copy would freeze or fail on."""
    dynamo = sys.modules.get("torch._dynamo")
    return dynamo.disable(fn) if dynamo is not None else fn


def _compiled_wrappers(model: Any) -> list[torch.nn.Module]:
    """The ``torch.compile`` wrappers (``OptimizedModule``) of ``model`` alive now. torch 2.13 dynamo
    skips guards on module hooks (``config.skip_nnmodule_hook_guards``): hooks added to ``model``
    after its wrapper compiled are never called through it, so the probe hooks the wrapper too."""
    dynamo = sys.modules.get("torch._dynamo")
    if dynamo is None or not isinstance(model, torch.nn.Module):
        return []
    import gc

    from torch._dynamo.eval_frame import OptimizedModule

    # one walk over the live objects (only once dynamo is loaded): the wrapper holds the model two dicts deep
    return [w for w in gc.get_objects() if type(w) is OptimizedModule and w._orig_mod is model]


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
                                loss_scale=float(loss_scale), lr_in_microbatches=lr_in_microbatches)
        self.params = list(dict.fromkeys(p for p in model.parameters() if p.requires_grad))
        self._undo = UndoStack()
        self._tracker = GraphTracker()
        self._attached = False
        self._detached = False
        self._thread: int | None = None
        self._seq = 0
        self._serial = 0
        self._group: Group | None = None
        self._mb: Microbatch | None = None
        self._in_backward = False
        self._done = False
        self._scaler_step_depth = 0
        self._prepared_zero_depth = 0
        self._logit_handles: list[Any] = []
        self._comm: dist_helpers.CommCounter | None = None
        self._comm_start = 0
        self._last_grads: GradState | None = None
        self._param_key: tuple[Any, ...] = ()
        self._param_checksums_cache: tuple[int, ...] | None = None
        self._saved_hooks: tuple[Any, Any] | None = None
        self._report: Report | None = None
        self._gradient_state: Any = None
        self._nested_forwards = False
        self._active_forward: Any = None

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
        self._describe_setup()
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
        rec.script = str(getattr(sys.modules.get("__main__"), "__file__", "") or "")
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

    def _open_guard_group(self) -> None:
        """D > 1: the guard's own gloo group with a timeout, and the ranks' A, groups and ``at``
        compared once (collectives at update attempts only line up when these agree)."""
        dp = self.record.data_parallel
        if dp is None or (dp.size or 1) <= 1 or dp.group is None:
            return
        self._xrank = dist_helpers.GuardGroup(dp.group, self.collective_timeout)
        mine = {"A": self.record.accumulation_steps, "groups": self.n_groups, "at": self.at}
        ranks = self._xrank.all_gather(mine, "comparing the probe's settings at attach")
        if ranks is not None and any(r != mine for r in ranks):
            settings = "; ".join(f"rank {i}: " + ", ".join(f"{k}={v}" for k, v in r.items())
                                 for i, r in enumerate(ranks))
            self._xrank.fail(f"the ranks disagree on the probe's settings ({settings})")

    def _close_guard_group(self) -> None:
        xrank, self._xrank = self._xrank, None
        if xrank is None:
            return
        if xrank.failure is not None:
            self.record.notes.append(f"not compared across ranks: {xrank.failure}")

    def _gather(self, value: Any, what: str) -> list[Any] | None:
        return self._xrank.all_gather(value, what) if self._xrank is not None else None

    def _place_at_epoch_end(self) -> bool:
        """Watch the loader for ``at="epoch_end"``. True: the hooks go in when the loader yields
        the first batch of the window; False: probe from the start (the card says why).

        Raises:
            ValueError: when A is not known.
        """
        rec = self.record
        rec.at_epoch_end = True
        a = rec.accumulation_steps
        if a is None:
            raise ValueError("at='epoch_end' needs A: pass accumulation_steps= (or the Accelerator)")
        n = rec.loader_length = loader_length(self.loader)
        rec.loader_unprepared = not frameworks.is_accelerate(self.loader)
        if n is None:
            rec.epoch_unobserved = "the loader has no len(): the epoch's end cannot be placed; probed from the start"
            return False
        watch = LoaderWatch(self._on_batch, self._on_epoch_end)
        why = watch.watch(self._undo, self.loader)
        if why is not None:
            rec.epoch_unobserved = f"the loader cannot be watched: {why}; probed from the start"
            return False
        self._watch = watch
        self._undo.push("loader watch callbacks", lambda: setattr(watch, "active", False))
        full = n // a
        self._window_start = (full - min(self.n_groups, full)) * a
        return True

    def adopt_iterator(self, iterator: Any, yielded: int) -> bool:
        """``at="epoch_end"`` attached after the first epoch began: watch its running iterator
        too, which has already yielded ``yielded`` batches (its class is swapped in place and
        restored on detach). Returns False when it cannot be watched (nothing changed)."""
        if self._watch is None or not self._attached:
            return False
        return self._watch.adopt(self._undo, iterator, yielded)

    def _on_batch(self, epoch: int, index: int) -> None:
        self._position = (epoch, index)
        if not self._hooks_installed and not self._detached and index == self._window_start:
            self.record.watched_epoch = epoch
            self._install()

    def _on_epoch_end(self, epoch: int, batches: int) -> None:
        rec = self.record
        if epoch == rec.watched_epoch and rec.epoch_end_seq is None and self._entry():
            rec.epoch_end_seq = self._event("E", epoch=epoch, batches=batches).seq

    def _install(self) -> None:
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
        pre, post = _eager(self._on_forward_pre), _eager(self._on_forward)
        for module in (model, *wrappers):
            h = module.register_forward_pre_hook(pre, with_kwargs=True)
            undo.push("model forward pre-hook", h.remove)
            h = module.register_forward_hook(post, with_kwargs=True, always_call=True)
            undo.push("model forward hook", h.remove)
        on_grad = _eager(self._on_param_grad)
        for p in self.params:
            h = p.register_post_accumulate_grad_hook(on_grad)
            undo.push("parameter post-accumulate hook", h.remove)
        h = self.optimizer.register_step_pre_hook(_eager(self._on_step_pre))
        undo.push("optimizer step pre-hook", h.remove)
        h = self.optimizer.register_step_post_hook(_eager(self._on_step_post))
        undo.push("optimizer step post-hook", h.remove)
        wrap_instance_method(undo, self.optimizer, "zero_grad", self._zero_grad_wrapper("optimizer.zero_grad"))
        if isinstance(model, torch.nn.Module):
            wrap_instance_method(undo, model, "zero_grad", self._zero_grad_wrapper("model.zero_grad"))
        if self.prepared_optimizer is not None:
            wrap_instance_method(undo, self.prepared_optimizer, "zero_grad", self._prepared_zero_wrapper)
        if self.scheduler is not None:
            wrap_instance_method(undo, self.scheduler, "step", self._scheduler_wrapper)
        if self.scaler is not None:
            wrap_instance_method(undo, self.scaler, "scale", self._scale_wrapper)
            wrap_instance_method(undo, self.scaler, "unscale_", self._unscale_wrapper)
            wrap_instance_method(undo, self.scaler, "step", self._scaler_step_wrapper)
            wrap_instance_method(undo, self.scaler, "update", self._scaler_update_wrapper)
        clip_module = torch.nn.utils.clip_grad
        for name in ("clip_grad_norm_", "clip_grad_value_"):
            original = getattr(torch.nn.utils, name)
            wrapper = self._clip_wrapper(name, original)
            patch_module_attribute(undo, torch.nn.utils, name, wrapper)
            if getattr(clip_module, name, None) is original:
                patch_module_attribute(undo, clip_module, name, wrapper)
        if self.record.at_epoch_end:
            patch_module_attribute(undo, torch.autograd, "backward", self._backward_wrapper(torch.autograd.backward))
        self._push_saved_tensor_hooks()
        if self.count_comm and self.record.ddp:
            self._comm = dist_helpers.CommCounter()
            model.register_comm_hook(None, self._comm.make_hook())
            comm = self._comm
            undo.push("DDP comm hook (forwarding only)", lambda: setattr(comm, "active", False))
        undo.push("logits gradient hooks", self._remove_logit_hooks)

    def _push_saved_tensor_hooks(self) -> None:
        tracker = self._tracker
        pack, unpack = tracker.pack, tracker.unpack
        torch._C._autograd._push_saved_tensors_default_hooks(pack, unpack)
        self._saved_hooks = (pack, unpack)

        def pop() -> None:
            tracker.active = False  # pass-through from now on, even if it cannot be popped yet
            top = torch._C._autograd._top_saved_tensors_default_hooks(False)
            if top is not None and top[0] == pack:
                torch._C._autograd._pop_saved_tensors_default_hooks()
                self._saved_hooks = None
            else:
                self.record.notes.append(
                    "saved-tensor hooks pushed later by the program are still active: the guard's own "
                    "pass-through hooks stay below them until they are popped"
                )

        self._undo.push("saved-tensor hooks", pop)

    def _backward_wrapper(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``torch.autograd.backward`` (``Tensor.backward`` calls it) observed at an epoch end: when
        the root is a scalar loss that is a mean-reduced loss times constants, a pre-hook on the
        mean node reads dL/d(mean loss), i.e. the weight the loop gave this microbatch (the weight
        of the partial group when the loss is not softmax cross entropy)."""
        @functools.wraps(original)
        def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
            mb = self._mb
            node = _mean_loss_node(tensors) if self._entry() and mb is not None else None
            if node is None:
                return original(tensors, *args, **kwargs)

            def seen(grad_outputs: tuple[torch.Tensor | None, ...]) -> None:
                grad = grad_outputs[0] if grad_outputs else None
                if grad is not None and grad.numel() == 1:
                    mb.loss_weight = (mb.loss_weight or 0.0) + float(grad) / (mb.scale or 1.0)

            handle = node.register_prehook(seen)
            try:
                return original(tensors, *args, **kwargs)
            finally:
                handle.remove()

        return backward

    def _remove_logit_hooks(self) -> None:
        for handle in self._logit_handles:
            handle.remove()
        self._logit_handles.clear()
        self._captured.clear()  # replay inputs are not kept after detach
        self._snapshot = None
        self._snapshot_pending = None

    # -- bookkeeping ---------------------------------------------------------------------
    def _entry(self) -> bool:
        """Called first by every observer: False when nothing must be recorded. Runs a due
        auto-detach here, on the user's thread (never inside the autograd engine)."""
        if not self._attached or not self._hooks_installed:
            return False
        if self._done and threading.get_ident() == self._thread:
            self._detach(clean=True)
            return False
        return not self._done

    def _event(self, kind: str, **detail: Any) -> Event:
        group = self._group
        microbatch = group.microbatches[-1].index if group is not None and group.microbatches else None
        event = Event(self._seq, kind, group.index if group is not None else -1, microbatch, detail)
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

    def _param_checksums(self) -> tuple[int, ...]:
        # parameters are only checksummed after a write: a version counter bumped, or sampled
        # bits changed (writes through .data bypass the counter)
        current = (versions(self.params), bit_samples(self.params))
        if current != self._param_key or self._param_checksums_cache is None:
            self._param_key = current
            self._param_checksums_cache = bit_checksums(self.params)
        return self._param_checksums_cache

    def _compares_replicas(self) -> bool:
        dp = self.record.data_parallel
        return dp is not None and (dp.size or 1) > 1 and dp.group is not None and not dp.sharded

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

    # -- forward -------------------------------------------------------------------------
    def _on_forward_pre(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if self._nested_forwards:  # a compiled wrapper and its model: the outer forward is the microbatch
            if self._active_forward is not None:
                return
            self._active_forward = module
        if self._replaying or not self._entry() or not torch.is_grad_enabled():
            return
        self._in_backward = False
        self._snapshot_pending = None  # the last backward was not the group's last
        group = self._group
        if group is not None and not group.closed and self._past_epoch_end(group):
            group.boundary_seq = self.record.epoch_end_seq  # the epoch end closes it: no update attempt
        if group is None or group.closed:
            index = 0 if group is None else group.index + 1
            if index == 0:
                self._device_peaks(reset=True)
            group = Group(index=index, tail=self._next_is_tail(index))
            if self.record.epoch_end_seq is not None and not group.tail:
                group.role = "next"
            self.record.groups.append(group)
            self._group = group
        elif group.tail or self._too_long(group):
            self._finish_now()
            return
        if self._in_partial_group():
            group.role = "partial"
        batch = _first_tensor(args, kwargs)
        mb = Microbatch(
            group=group.index,
            index=len(group.microbatches),
            serial=self._serial,
            examples=int(batch.shape[0]) if batch is not None else None,
            grads_at_forward=self._grads(measure=not group.microbatches),  # a group's first: exact
            params_at_forward=self._param_checksums(),
            graphs_alive=sorted(self._tracker.graphs_alive),
            saved_bytes_at_forward=self._tracker.live_bytes,
            kept_output_bytes=self._tracker.kept_output_bytes(self._serial),
            device_bytes=self._device_memory(),
            autocast=_autocast_state(),
            lrs=tuple(self._lrs()),
            epoch=self._position[0] if self._position else None,
            batch=self._position[1] if self._position else None,
        )
        if self.record.ddp:
            mb.sync_at_forward = bool(getattr(self.model, "require_backward_grad_sync", True))
        if self._gradient_state is not None and getattr(self._gradient_state, "sync_gradients", True) is False:
            self.record.accumulate_seen = True
        dp = self.record.data_parallel
        if batch is not None and dp is not None and (dp.size or 1) > 1:
            mb.input_hashes = dist_helpers.row_hashes(batch)
        previous = self._mb
        if previous is not None:
            previous.saved_alive_at_next_forward = (
                self._tracker.alive_unpacked_by(previous.last_backward_serial)
                if previous.last_backward_serial is not None else 0)
        if self._comm is not None:
            self._comm_start = self._comm.buckets
        self._serial += 1
        self._tracker.current = mb.serial
        self._tracker.peak_bytes = self._tracker.live_bytes
        group.microbatches.append(mb)
        self._mb = mb
        if self.normalization == "replay":
            self._captured[mb.serial] = capture(args, kwargs)
        self._event("F")

    def _next_is_tail(self, index: int) -> bool:
        """The group about to start is the watched F/B after the probed groups: after group
        ``groups - 1`` from the start, after the next epoch's first group at an epoch end."""
        if self.record.at_epoch_end and self._watch is not None:
            return any(g.role == "next" for g in self.record.groups)
        return index >= self.n_groups and not self._waiting_for_resets(index)

    def _waiting_for_resets(self, index: int) -> bool:
        """A unknown, every group so far one microbatch, and fewer than two resets, none after the
        first update: probe on, the reset cadence may say what A the loop meant."""
        rec = self.record
        if rec.accumulation_steps is not None or index >= MAX_GROUPS_FOR_RESETS:
            return False
        if any(len(g.microbatches) != 1 for g in rec.groups):
            return False
        resets = rec.resets_after()
        return not resets or (resets[0] != 0 and len(resets) < 2)

    def _past_epoch_end(self, group: Group) -> bool:
        """The open ``group`` began before the watched epoch's end and this forward is after it."""
        rec = self.record
        return (rec.epoch_end_seq is not None and bool(group.microbatches) and self._position is not None
                and group.microbatches[-1].epoch == rec.watched_epoch and self._position[0] != rec.watched_epoch)

    def _in_partial_group(self) -> bool:
        """This forward is one of the watched epoch's last ``len(loader) % A`` microbatches."""
        rec, pos = self.record, self._position
        if self._watch is None or pos is None or rec.loader_length is None or pos[0] != rec.watched_epoch:
            return False
        r = rec.loader_length % (rec.accumulation_steps or 1)
        return r > 0 and pos[1] >= rec.loader_length - r

    def _too_long(self, group: Group) -> bool:
        a = self.record.accumulation_steps
        limit = 4 * a * self.n_groups if a else MAX_MICROBATCHES_WITHOUT_A
        if len(group.microbatches) >= limit:
            self.record.notes.append(
                f"group {group.index} reached {len(group.microbatches)} microbatches without an optimizer "
                "update attempt; the probe stopped watching"
            )
            return True
        return False

    def _finish_now(self) -> None:
        self._done = True
        self._detach(clean=True)

    def _on_forward(self, module: Any, args: Any, kwargs: Any, output: Any) -> None:
        if self._nested_forwards:
            if module is not self._active_forward:
                return
            self._active_forward = None
        mb = self._mb
        if self._replaying or not self._attached or self._done or mb is None or not torch.is_grad_enabled():
            return
        self._tracker.watch_output(mb.serial, output)
        # the backward reaching this output starts a backward: FSDP2 with sync off (and engines that
        # keep grads elsewhere) never run the parameters' post-accumulate hooks for it
        start = next((t for t in tensors_in(output) if t.grad_fn is not None), None)
        if start is not None:
            self._logit_handles.append(start.register_hook(_eager(self._on_output_grad)))
        if self.normalization is not None and self.record.ce_possible:
            logits = logits_of(output)
            if logits is None:
                self.record.ce_possible = False
                self.record.ce_reason = "the model output has no logits tensor ([..., V] with V >= 2)"
                return
            values = logits.detach()
            hook = _eager(functools.partial(self._on_logits_grad, mb, values))
            self._logit_handles.append(logits.register_hook(hook))

    def _on_logits_grad(self, mb: Microbatch, values: torch.Tensor, grad: torch.Tensor) -> None:
        if not self._attached or self._done or not self.record.ce_possible:
            return
        if grad is None:  # the loss was computed inside a compiled region: its gradient never passes the logits
            self.record.ce_possible = False
            self.record.ce_reason = "the logits output received no gradient (the loss was computed from them inside " \
                                    "a torch.compile'd region)"
            return
        weights = infer_weights(values, grad, mb.scale or 1.0)
        if mb.ce is None:
            mb.ce = weights
        else:  # a second backward through the same microbatch (rare): add up
            mb.ce.weight_sum += weights.weight_sum
            mb.ce.residual = max(mb.ce.residual, weights.residual)

    # -- backward ------------------------------------------------------------------------
    def _on_output_grad(self, grad: torch.Tensor) -> None:
        self._on_param_grad(grad)

    def _on_param_grad(self, param: torch.Tensor) -> None:
        if self._replaying or not self._attached or self._done or self._in_backward:
            return
        self._in_backward = True
        mb = self._mb
        if mb is not None and self.record.ddp:
            mb.sync_in_backward = bool(getattr(self.model, "require_backward_grad_sync", True))
        torch.autograd.Variable._execution_engine.queue_callback(self._on_backward_queued)

    def _on_backward_queued(self) -> None:
        # DDP copies the all-reduced buckets into .grad in its own end-of-backward callback,
        # queued later than ours: re-queue so that we read .grad after it (design notes §1).
        torch.autograd.Variable._execution_engine.queue_callback(self._on_backward_end)

    def _on_backward_end(self) -> None:
        self._in_backward = False
        mb, group = self._mb, self._group
        if not self._attached or self._done or mb is None or group is None:
            return
        retained = self._tracker.retained_after_backward()
        mb.last_backward_serial = self._tracker.backward_serial
        self._tracker.backward_serial += 1
        grads = self._grads()
        if mb.backwards == 0:
            mb.grads_replaced_before_backward = mb.grads_at_forward.replaced_in(self.params)
        mb.backwards += 1
        mb.grads_after_backward = grads
        # the last backward decides: an earlier retain_graph=True whose graph a later backward of the same
        # microbatch went through again is a genuine multi-backward pattern (ACC202's exemption)
        mb.retained_saved_bytes = retained
        mb.saved_peak_bytes = max(mb.saved_peak_bytes, self._tracker.peak_bytes)
        group.saved_peak_bytes = max(group.saved_peak_bytes, self._tracker.peak_bytes)
        peaks = self._device_peaks(reset=False)
        mb.device_peak_bytes = peaks
        if self.normalization == "replay":  # copied only if this backward turns out to be the group's last
            self._snapshot, self._snapshot_pending = None, (grads, mb.scale or 1.0)
        if self._comm is not None:
            mb.allreduce_buckets = self._comm.buckets - self._comm_start
        self._event("B", retained_saved_bytes=retained)
        if group.tail:
            self._done = True  # detach at the next call on the user's thread

    # -- resets --------------------------------------------------------------------------
    def _zero_grad_wrapper(self, source: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def make(original: Callable[..., Any]) -> Callable[..., Any]:
            @functools.wraps(original)
            def zero_grad(*args: Any, **kwargs: Any) -> Any:
                if not self._entry():
                    return original(*args, **kwargs)
                self._take_snapshot()
                before = self._grads()
                with warnings_at_caller():
                    result = original(*args, **kwargs)
                after = self._grads()
                self._event(
                    "Z", source=source, prepared=self._prepared_zero_depth > 0,
                    zeroed=not before.all_zero and after.all_zero, changed=not before.same_values(after),
                )
                return result

            return zero_grad

        return make

    def _prepared_zero_wrapper(self, original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def zero_grad(*args: Any, **kwargs: Any) -> Any:
            self._prepared_zero_depth += 1
            try:
                return original(*args, **kwargs)
            finally:
                self._prepared_zero_depth -= 1

        return zero_grad

    # -- update --------------------------------------------------------------------------
    def _close_group(self, event: Event, grads: GradState) -> None:
        group = self._group
        if group is None or group.closed:
            return
        group.boundary_seq = event.seq
        group.attempted = True
        group.grads_at_update = grads
        group.device_peak_bytes = self._device_peaks(reset=True)
        if self._compares_replicas():
            checksums = self._gather(grads.checksums, f"replica gradient checksums at group {group.index}'s update")
            if checksums is not None:
                group.replicas_equal = all(c == checksums[0] for c in checksums)
        if self.scheduler is not None:
            group.lr_before = self._lrs()
        if self.normalization == "replay" and not group.tail and group.microbatches:
            self._take_snapshot()
            if isinstance(self._snapshot, str):
                group.replay, self._snapshot = self._snapshot, None
            elif self._snapshot is not None:
                self._replay(group)

    def _take_snapshot(self) -> None:
        """Copy the grads of the last backward, before a call that may change them (reset, clip,
        unscale, update); a forward in between drops the pending copy (more backwards follow)."""
        if self._snapshot_pending is None:
            return
        state, scale = self._snapshot_pending
        self._snapshot_pending = None
        if state.still_current(self.params):
            self._snapshot = ([None if p.grad is None else p.grad.detach().clone() for p in self.params], scale)
        else:
            self._snapshot = ("not compared: the gradients were changed after the last backward by an operation "
                              "the probe did not see")

    def _replay(self, group: Group) -> None:
        dp = self.record.data_parallel
        module = self.model.module if self.record.ddp else self.model
        captured = [self._captured.pop(mb.serial) for mb in group.microbatches if mb.serial in self._captured]
        if self.record.bn_training:
            group.replay = "not comparable: BatchNorm in train mode computes statistics per forward (ACC901)"
            return
        if self.record.fsdp2:
            group.replay = "not compared: the replay does not run FSDP2 (sharded parameters) modules"
            return
        if self._xrank is not None and self._xrank.failure is not None:
            group.replay = "not compared: the ranks stopped answering the guard's gathers (card notes)"
            return
        self._replaying = True
        self._tracker.active = False
        try:
            group.replay = replay_group(
                module, self.params, captured, *self._snapshot, self.labels, self.ignore_index,
                replicas=(dp.size or 1) if dp is not None else 1, group=dp.group if dp is not None else None,
            )
        finally:
            self._replaying = False
            self._tracker.active = True
            self._snapshot = None

    def _lrs(self) -> list[float]:
        return [float(g["lr"]) for g in self.optimizer.param_groups]

    def _on_step_pre(self, optimizer: Any, args: Any, kwargs: Any) -> tuple[Any, Any] | None:
        if not self._entry():
            return None
        # torch 2.13 optim/optimizer.py profile_hook_step: ``args`` starts with the optimizer itself
        closure = kwargs.get("closure", args[1] if len(args) > 1 else None)
        if callable(closure):
            # optimizer.step(closure): torch runs the pre-hooks before the step body calls the closure, and
            # the closure may run the forward and backward of the group's last microbatch (Lightning's
            # automatic optimization: lightning 2.6.6 plugins/precision/precision.py optimizer_step). The
            # update attempt is recorded when the closure returns, right before the parameters change.
            wrapped = self._closure_wrapper(closure)
            if "closure" in kwargs:
                return args, {**kwargs, "closure": wrapped}
            return (args[0], wrapped, *args[2:]), kwargs
        self._record_step()
        return None

    def _closure_wrapper(self, closure: Callable[..., Any]) -> Callable[..., Any]:
        calls = 0

        @functools.wraps(closure)
        def run_closure(*args: Any, **kwargs: Any) -> Any:
            nonlocal calls
            calls += 1
            result = closure(*args, **kwargs)
            if calls == 1 and self._entry():  # a re-evaluating optimizer (LBFGS) calls it again: one attempt
                self._record_step()
            return result

        return run_closure

    def _record_step(self) -> None:
        grads = self._grads(measure=self._compares_replicas())
        event = self._event("S", inside_scaler_step=self._scaler_step_depth > 0)
        if self._scaler_step_depth == 0:
            self._close_group(event, grads)

    def _on_step_post(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self._attached and self._group is not None and self._group.closed:
            self._group.applied = True

    def _scheduler_wrapper(self, original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def step(*args: Any, **kwargs: Any) -> Any:
            if not self._entry():
                return original(*args, **kwargs)
            before = self._lrs()
            caller = frameworks.scheduler_caller(sys._getframe(1))
            with warnings_at_caller():
                result = original(*args, **kwargs)
            self._event("L", lr_before=before, lr_after=self._lrs(), by=caller)
            return result

        return step

    def _clip_wrapper(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def clip(*args: Any, **kwargs: Any) -> Any:
            if not self._entry():
                return original(*args, **kwargs)
            self._take_snapshot()
            before = self._grads()
            with warnings_at_caller():
                result = original(*args, **kwargs)
            after = self._grads()
            self._event("C", function=name, changed=not before.same_values(after))
            return result

        return clip

    # -- GradScaler ----------------------------------------------------------------------
    def _scale_wrapper(self, original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def scale(outputs: Any) -> Any:
            result = original(outputs)
            if self._entry():
                value = float(self.scaler.get_scale())
                if self._mb is not None:
                    self._mb.scale = value
                self._event("K", scale=value)
            return result

        return scale

    def _unscale_wrapper(self, original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def unscale_(optimizer: Any) -> Any:
            if self._entry():
                self._take_snapshot()
                self._event("X", inside_scaler_step=self._scaler_step_depth > 0,
                            scale=float(self.scaler.get_scale()))
            return original(optimizer)

        return unscale_

    def _scaler_step_wrapper(self, original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def step(optimizer: Any, *args: Any, **kwargs: Any) -> Any:
            if not self._entry():
                return original(optimizer, *args, **kwargs)
            event = self._event("s", scale=float(self.scaler.get_scale()))
            self._close_group(event, self._grads(measure=self._compares_replicas()))
            group = self._group
            self._scaler_step_depth += 1
            try:
                return original(optimizer, *args, **kwargs)
            finally:
                self._scaler_step_depth -= 1
                state = getattr(self.scaler, "_per_optimizer_states", {}).get(id(optimizer), {})
                found = state.get("found_inf_per_device", {})
                if group is not None and found:
                    group.found_inf = bool(sum(float(v) for v in found.values()))

        return step

    def _scaler_update_wrapper(self, original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def update(*args: Any, **kwargs: Any) -> Any:
            if not self._entry():
                return original(*args, **kwargs)
            before = float(self.scaler.get_scale())
            raised = True
            try:
                result = original(*args, **kwargs)
                raised = False
            finally:  # torch raises when no scaler.step() recorded inf checks since the last update
                self._event("U", scale_before=before, scale_after=float(self.scaler.get_scale()), raised=raised,
                            enabled=bool(getattr(self.scaler, "is_enabled", lambda: True)()))
            return result

        return update

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
        finally:
            if self._comm is not None:
                self.record.comm_buckets = self._comm.buckets
            self.record.clean_exit = clean
            try:
                if was_attached:
                    self._finalize(clean)
            finally:
                if self._xrank is not None:  # _finalize did not get to the card (it raised)
                    self._close_guard_group()

    def _finalize(self, clean: bool) -> None:
        from runtime_guard.card import build_card
        from runtime_guard.checks import evaluate

        rec = self.record
        dp = rec.data_parallel
        if clean and dp is not None and (dp.size or 1) > 1 and dp.group is not None:
            self._gather_across_replicas()
        self._close_guard_group()
        card = build_card(rec)
        # a code the card marks not observable (e.g. an engine that owns the update) is never guessed at
        findings = [f for f in evaluate(rec) if not card["checks"].get(f.code, "").startswith("not observable")]
        self._report = Report(findings=findings, card=card)
        if not clean:
            return
        if self.on_finding == "warn":
            for finding in findings:
                warnings.warn(GuardWarning(finding.one_line()), stacklevel=stacklevel_outside_guard())
        elif self.on_finding == "raise" and findings:
            raise GuardFindingError(self._report)

    def _gather_across_replicas(self) -> None:
        rec = self.record
        local = {
            "hashes": [h for g in rec.groups for mb in g.microbatches for h in mb.input_hashes],
            "ce": [
                (sum(mb.ce.weight_sum for mb in g.microbatches if mb.ce), sum(mb.ce.tokens for mb in g.microbatches
                                                                            if mb.ce))
                for g in rec.groups
            ],
        }
        gathered = self._gather(local, "input hashes and loss weights at detach")
        if gathered is None:
            return
        rec.replica_hashes = [item["hashes"] for item in gathered]
        rec.replica_ce = [item["ce"] for item in gathered]


def probe(model: torch.nn.Module, optimizer: torch.optim.Optimizer, **options: Any) -> Probe:
    """Create a :class:`Probe` (use it as a context manager, or call ``.attach()``).

    ``options`` are the keyword arguments of :class:`Probe`.
    """
    return Probe(model, optimizer, **options)
