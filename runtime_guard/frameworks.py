"""What the guard needs to know about the objects it is given, by framework.

Facts used here (checked against the installed sources, in the versions their framework
modules of :mod:`accumlint.frameworks` name):

* torch ``torch/nn/parallel/distributed.py``: DDP reads
  ``require_backward_grad_sync`` inside ``forward`` (``_pre_forward`` / ``_post_forward``);
  ``no_sync()`` only flips that attribute. Its replica group is ``process_group``.
* torch ``torch/distributed/fsdp/_fully_shard/_fully_shard.py``: FSDP2 modules are
  instances of the dynamic class ``FSDP<Module>`` deriving from ``FSDPModule``; the sync
  switch (``set_requires_gradient_sync``) is read in the post-backward hook, so forward
  placement does not decide (ACC401 does not apply).
* accelerate ``accelerate/optimizer.py`` / ``scheduler.py``: ``AcceleratedOptimizer``
  wraps the user's optimizer as ``.optimizer`` and calls its ``step`` / ``zero_grad`` only when
  ``gradient_state.sync_gradients`` is True; ``AcceleratedScheduler`` wraps ``.scheduler`` and
  steps it ``num_processes`` times per update unless ``split_batches``.
  ``accelerate/accelerator.py``: ``gradient_state.num_steps`` is the configured A.
* torch ``torch/utils/data/dataloader.py``: every ``DataLoader`` iterator (one process or worker
  processes) is a ``_BaseDataLoaderIter`` whose ``__next__`` returns the collated batch (the
  subclasses override ``_next_data`` only); Accelerate's ``DataLoaderShard`` iterates one too.
* DeepSpeed ``DeepSpeedEngine`` owns ``step`` / ``zero_grad`` and the loss division: the guard
  cannot see updates or resets of such an engine and says so.

What the guard shares with the linter (the flag and attribute names, which frameworks step the
scheduler or normalize the loss) is read from the rows of :mod:`accumlint.frameworks`, which
import neither LibCST nor torch; the predicates on live objects stay here, next to those rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from accumlint import frameworks as fw
from accumlint.frameworks.contracts import Owner


def _module_of(obj: Any) -> str:
    return type(obj).__module__ or ""


def _package_of(obj: Any) -> str:
    return _module_of(obj).split(".", 1)[0]


def is_accelerate(obj: Any) -> bool:
    """True for objects defined by the ``accelerate`` package."""
    return _package_of(obj) in fw.accelerate.CONTRACT.packages


def unwrap_optimizer(optimizer: Any) -> Any:
    """The torch optimizer that really updates: ``AcceleratedOptimizer.optimizer`` or itself."""
    inner = getattr(optimizer, "optimizer", None)
    if is_accelerate(optimizer) and isinstance(inner, torch.optim.Optimizer):
        return inner
    return optimizer


def scale_invariant_optimizer(optimizer: Any) -> str:
    """The qualified class of the torch optimizer that really updates (:func:`unwrap_optimizer`)
    when its update ignores one constant factor on every gradient
    (:data:`accumlint.frameworks.pytorch.SCALE_INVARIANT_OPTIMIZERS`, the linter's ACC103 data);
    "" for any other optimizer, a subclass defined elsewhere included."""
    kind = type(unwrap_optimizer(optimizer))
    if kind.__module__.startswith("torch.optim") and kind.__name__ in fw.pytorch.SCALE_INVARIANT_OPTIMIZERS:
        return f"torch.optim.{kind.__name__}"
    return ""


def unwrap_scheduler(scheduler: Any) -> Any:
    """The torch LR scheduler: ``AcceleratedScheduler.scheduler`` or itself."""
    inner = getattr(scheduler, "scheduler", None)
    if is_accelerate(scheduler) and inner is not None:
        return inner
    return scheduler


def reads_ahead_of(loader: Any, candidates: list[Any]) -> Any | None:
    """The prepared loader that reads ``loader`` one batch ahead of the loop
    (``fw.accelerate.READ_AHEAD_LOADERS``: Accelerate's ``DataLoaderShard``): ``loader`` itself
    when it is one, else the one among ``candidates`` that wraps it; ``None`` where there is none.
    ``type()``, not ``isinstance``: such a shard's ``__class__`` answers the wrapped loader's."""

    def reads_ahead(candidate: Any) -> bool:
        return is_accelerate(candidate) and type(candidate).__name__ in fw.accelerate.READ_AHEAD_LOADERS

    if reads_ahead(loader):
        return loader
    return next((c for c in candidates if reads_ahead(c) and getattr(c, "base_dataloader", None) is loader), None)


def read_ahead_last(loader: Any) -> bool | None:
    """Whether the read-ahead ``loader``'s inner iterator ran out (the loop holds the epoch's last batch:
    ``fw.accelerate.READ_AHEAD_LAST_FLAG``), or ``None`` where its loop's batches cannot be told from its
    inner iterator's: it holds some first batches back (``READ_AHEAD_SKIP``, a resumed epoch) or lacks
    either attribute or its ``end`` method (``READ_AHEAD_END_METHOD``)."""
    last = getattr(loader, fw.accelerate.READ_AHEAD_LAST_FLAG, None)
    if (not isinstance(last, bool) or getattr(loader, fw.accelerate.READ_AHEAD_SKIP, None) != 0
            or not callable(getattr(loader, fw.accelerate.READ_AHEAD_END_METHOD, None))):
        return None
    return last


def dataloader_iterator_class() -> type:
    """The class whose ``__next__`` yields every ``torch.utils.data.DataLoader`` batch."""
    from torch.utils.data.dataloader import _BaseDataLoaderIter

    return _BaseDataLoaderIter


def is_ddp(model: Any) -> bool:
    """True for ``torch.nn.parallel.DistributedDataParallel`` (sync decided at forward time)."""
    return isinstance(model, torch.nn.parallel.DistributedDataParallel)


def ddp_syncs(model: Any) -> bool:
    """Whether a DDP model's next backward all-reduces: its ``require_backward_grad_sync`` flag
    (``frameworks.pytorch.DDP_SYNC_FLAG``; True when the model has none)."""
    return bool(getattr(model, fw.pytorch.DDP_SYNC_FLAG, True))


def accelerate_off_boundary(gradient_state: Any) -> bool:
    """Whether Accelerate's gradient state says this microbatch does not end its group
    (``sync_gradients`` is False: ``frameworks.accelerate.SYNC_FLAG``)."""
    return getattr(gradient_state, fw.accelerate.SYNC_FLAG, True) is False


def is_fsdp2(model: Any) -> bool:
    """True for a module sharded with ``fully_shard`` (FSDP2)."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # pragma: no cover - torch without distributed
        return False
    return isinstance(model, FSDPModule)


def is_deepspeed_engine(model: Any) -> bool:
    """True for a DeepSpeed engine (it owns step, reset and normalization)."""
    return type(model).__name__ == "DeepSpeedEngine" or _package_of(model) == fw.deepspeed.PACKAGE


def _fsdp2_mesh_info(model: Any) -> Any:
    """The data-parallel mesh info of the first FSDP2 parameter group under ``model`` (torch 2.13:
    ``FSDPState._fsdp_param_groups[i].mesh_info``; the root often holds no parameters itself)."""
    from torch.distributed.fsdp import FSDPModule

    for module in model.modules():
        if not isinstance(module, FSDPModule):
            continue
        state = module._get_fsdp_state()
        groups = getattr(state, "_fsdp_param_groups", None) or [getattr(state, "_fsdp_param_group", None)]
        for group in groups:
            info = getattr(group, "mesh_info", None)
            if info is not None:
                return info
    return None


@dataclass
class DataParallelSize:
    """D (the data-parallel replica count) as the probe reads it from the live objects, and where it
    comes from. ``size`` is ``None`` when it cannot be known. (The linter's
    :class:`accumlint.checks.shared.parallel.DataParallel` is what a module's source says about data
    parallelism.)"""

    size: int | None
    source: str
    world_size: int | None = None
    group: Any = None
    notes: list[str] = field(default_factory=list)
    #: each replica holds a different shard of the grads (FSDP2): no replica-checksum comparison
    sharded: bool = False


def data_parallel(model: Any, accelerator: Any = None) -> DataParallelSize:
    """D: the data-parallel replica count, from the wrapper's process group (not the GPU count)."""
    dist = torch.distributed
    world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else None
    if is_ddp(model):
        group = model.process_group
        return DataParallelSize(group.size(), "DistributedDataParallel.process_group.size()", world, group)
    if is_fsdp2(model):
        info = _fsdp2_mesh_info(model)
        size = None
        if info is not None and hasattr(info, "shard_mesh_size"):
            size = info.shard_mesh_size * getattr(info, "replicate_mesh_size", 1)
        size = size or world
        # the data-parallel group is the whole mesh: its group when 1-D, the default group when a
        # 2-D (HSDP) mesh spans every rank; otherwise nothing is gathered across replicas
        mesh, group = getattr(info, "mesh", None), None
        if mesh is not None and mesh.ndim == 1:
            group = mesh.get_group()
        elif mesh is not None and world is not None and mesh.size() == world:
            group = dist.group.WORLD
        return DataParallelSize(size, "FSDP2 mesh (shard x replicate)", world, group, sharded=True)
    if accelerator is not None and getattr(accelerator, "num_processes", None) is not None:
        return DataParallelSize(int(accelerator.num_processes), "accelerator.num_processes", world)
    if world is None or world == 1:
        return DataParallelSize(1, "no data-parallel wrapper and no process group", world)
    return DataParallelSize(
        None, f"torch.distributed is initialized (world size {world}) but the model is not a DDP/FSDP wrapper",
        world,
    )


def batchnorm_modules(model: torch.nn.Module) -> list[str]:
    """Names of BatchNorm modules (statistics per microbatch, not per effective batch: ACC901)."""
    return [
        name or type(module).__name__
        for name, module in model.named_modules()
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm)
    ]


def hf_user_normalizes(trainer: Any) -> str:
    """For a Hugging Face ``Trainer``: why the loss normalization over the group is left to the
    user's loss (ACC105), or ``""`` when the Trainer divides by A itself.

    transformers ``Trainer.training_step``: the loss is divided by the group's microbatch
    count unless ``loss_is_scaled_for_ga`` — set explicitly, or ``model_accepts_loss_kwargs``
    (``num_items_in_batch`` is passed during training) or a ``compute_loss_func``.
    """
    hf = fw.transformers
    explicit = getattr(trainer, hf.EXPLICIT_SCALED_ATTR, None)
    kwargs = bool(getattr(trainer, hf.LOSS_KWARGS_ATTR, False))
    func = getattr(trainer, hf.LOSS_FUNC_ATTR, None) is not None
    scaled = explicit if explicit is not None else (kwargs or func)
    if not scaled:
        return ""
    why = (f"{hf.EXPLICIT_SCALED_ATTR}=True" if explicit is not None else
           "the model takes loss kwargs" if kwargs else f"a {hf.LOSS_FUNC_ATTR} is set")
    return (f"HF Trainer ({why}): it passes num_items_in_batch (the group's supervised tokens) to compute_loss and "
            "does not divide the loss by A, so the returned loss must be normalized over the group")


def lightning_manual_normalizes(pl_module: Any) -> str:
    """For a LightningModule in manual optimization (``automatic_optimization = False``): why the loss
    normalization over the group is the user's (ACC105: ``manual_backward`` does not divide by A, and
    ``accumulate_grad_batches`` must be 1 there); ``""`` otherwise (automatic optimization divides)."""
    if getattr(pl_module, fw.lightning.AUTOMATIC_OPTIMIZATION_ATTR, True) is not False \
            or not callable(getattr(pl_module, fw.lightning.MANUAL_BACKWARD, None)):
        return ""
    return (f"Lightning manual optimization ({fw.lightning.AUTOMATIC_OPTIMIZATION_ATTR}=False): "
            f"{fw.lightning.MANUAL_BACKWARD} does not divide the loss by A, so the loss must be normalized over the "
            "group")


def lightning_manual_caller(module: Any, frame: Any, depth: int = 64) -> str:
    """:func:`lightning_manual_normalizes` for the LightningModule whose method (``training_step``) is on
    the stack from ``frame`` (``depth`` frames at most) and holds ``module`` (the model found at its first
    forward, or a submodule of it); ``""`` when there is none."""
    if hasattr(module, fw.lightning.AUTOMATIC_OPTIMIZATION_ATTR):
        return lightning_manual_normalizes(module)
    for _ in range(depth):
        if frame is None:
            return ""
        owner = frame.f_locals.get("self")
        if isinstance(owner, torch.nn.Module) and hasattr(owner, fw.lightning.AUTOMATIC_OPTIMIZATION_ATTR) \
                and any(sub is module for sub in owner.modules()):
            return lightning_manual_normalizes(owner)
        frame = frame.f_back
    return ""


#: Packages whose code steps an LR scheduler it was configured with (ACC306 when the user steps it
#: too): those of the framework contracts whose framework steps the scheduler.
SCHEDULER_OWNERS = tuple(
    package for contract in fw.GROUP_CONTRACTS if contract.steps_scheduler is Owner.FRAMEWORK
    for package in contract.packages
)


def scheduler_caller(frame: Any) -> str:
    """The framework that called a scheduler's ``step`` (``frame``: the caller's frame), or ``""``
    for user code. lightning steps configured schedulers through
    ``LightningModule.lr_scheduler_step`` (a user override of that hook still counts as Lightning's
    call); DeepSpeed's engine steps its ``lr_scheduler`` in ``_take_model_step``."""
    for _ in range(2):
        if frame is None:
            return ""
        package = (frame.f_globals.get("__name__") or "").split(".")[0]
        if package in SCHEDULER_OWNERS:
            return package
        if frame.f_code.co_name != fw.lightning.SCHEDULER_STEP_HOOK:
            return ""
        frame = frame.f_back
    return ""
