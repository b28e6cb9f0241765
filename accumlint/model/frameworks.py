"""Framework contracts as data: who builds which object, who divides the loss by A,
who gates the optimizer update, the reset and the scheduler.

Every row names its source. Versions inspected (see ``shared/docs/framework-contracts.md``):
torch 2.13.0, accelerate 1.15.0 (``accelerator.py``, ``optimizer.py``, ``scheduler.py``),
deepspeed 0.19.8 (``runtime/engine.py``), lightning 2.6.6
(``loops/optimization/automatic.py``), mmengine 0.10.7 (``optim/optimizer/optimizer_wrapper.py``),
transformers 5.24.0 (``trainer.py``). When a contract changes with a version, the row
says so; when the version cannot be known from the code, rules stay silent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from accumlint.model.kinds import Role
from accumlint.prefilter import NeedlePattern

# --- constructors: qualified callee → role of the value it returns -------------------------

#: Exact qualified names.
CONSTRUCTORS: dict[str, Role] = {
    "torch.nn.parallel.DistributedDataParallel": Role.DDP_MODEL,
    "torch.nn.parallel.distributed.DistributedDataParallel": Role.DDP_MODEL,
    "torch.distributed.fsdp.FullyShardedDataParallel": Role.FSDP_MODEL,
    "torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel": Role.FSDP_MODEL,
    "torch.distributed.fsdp.fully_shard": Role.FSDP_MODEL,
    "torch.distributed._composable.fsdp.fully_shard": Role.FSDP_MODEL,
    "torch.cuda.amp.GradScaler": Role.SCALER,
    "torch.amp.GradScaler": Role.SCALER,
    "torch.cpu.amp.GradScaler": Role.SCALER,
    "torch.GradScaler": Role.SCALER,
    "torch.distributed.fsdp.sharded_grad_scaler.ShardedGradScaler": Role.SCALER,
    "accelerate.Accelerator": Role.ACCELERATOR,
    "accelerate.accelerator.Accelerator": Role.ACCELERATOR,
    "lightning.Fabric": Role.FABRIC,
    "lightning.fabric.Fabric": Role.FABRIC,
    "lightning_fabric.Fabric": Role.FABRIC,
    "torch.utils.data.DataLoader": Role.LOADER,
    "torch.utils.data.dataloader.DataLoader": Role.LOADER,
    "transformers.AdamW": Role.OPTIMIZER,
    "transformers.Adafactor": Role.OPTIMIZER,
    "transformers.get_scheduler": Role.SCHEDULER,
    "diffusers.optimization.get_scheduler": Role.SCHEDULER,
    "torch.distributed.optim.ZeroRedundancyOptimizer": Role.OPTIMIZER,
    "torch.nn.Module": Role.MODEL,
}

#: Qualified-name prefixes (module → every public class in it has the role).
CONSTRUCTOR_PREFIXES: tuple[tuple[str, Role], ...] = (
    ("torch.optim.lr_scheduler.", Role.SCHEDULER),
    ("torch.optim.swa_utils.SWALR", Role.SCHEDULER),
    ("transformers.optimization.get_", Role.SCHEDULER),
    ("timm.scheduler.", Role.SCHEDULER),
    ("torch.optim.", Role.OPTIMIZER),  # after lr_scheduler: order matters
    ("bitsandbytes.optim.", Role.OPTIMIZER),
    ("apex.optimizers.", Role.OPTIMIZER),
    ("deepspeed.ops.adam.", Role.OPTIMIZER),
    ("timm.optim.", Role.OPTIMIZER),
)

#: Callee last segments that identify a role when the import cannot be resolved.
CONSTRUCTOR_NAME_PATTERNS: tuple[tuple[re.Pattern[str], Role], ...] = (
    (re.compile(r"^get_\w*(schedule|scheduler)\w*$"), Role.SCHEDULER),
    (re.compile(r"^\w*(LR|Scheduler|WarmupLR|WarmupDecayLR)$"), Role.SCHEDULER),
    (re.compile(r"^(Adam|AdamW|SGD|Adagrad|Adadelta|RMSprop|Adamax|NAdam|RAdam|LBFGS|Lion|Adafactor|FusedAdam|"
                r"FusedLAMB|LAMB|Lamb|AdamW8bit|Adam8bit|PagedAdamW|DeepSpeedCPUAdam|SparseAdam)$"), Role.OPTIMIZER),
    (re.compile(r"^(GradScaler|ShardedGradScaler)$"), Role.SCALER),
    (re.compile(r"^(DistributedDataParallel|DDP)$"), Role.DDP_MODEL),
    (re.compile(r"^(FullyShardedDataParallel|FSDP|fully_shard)$"), Role.FSDP_MODEL),
    (re.compile(r"^Accelerator$"), Role.ACCELERATOR),
    (re.compile(r"^Fabric$"), Role.FABRIC),
    (re.compile(r"^DataLoader$"), Role.LOADER),
    (re.compile(r"^(Module|LightningModule|\w*PreTrainedModel)$"), Role.MODEL),
)

#: Variable names, the weakest evidence (matched against the last segment, lower-cased).
NAME_PATTERNS: tuple[tuple[re.Pattern[str], Role], ...] = (
    (re.compile(r"^(lr_)?(sched|scheduler|schedulers|lr_scheduler|scheduler_\w+|\w+_scheduler|\w+_sched)$"),
     Role.SCHEDULER),
    (re.compile(r"^(opt|optim|optimizer|optimiser|optimizers)(_\w+)?$|^\w+_(opt|optim|optimizer|optimiser)$"),
     Role.OPTIMIZER),
    (re.compile(r"^(\w+_)?(grad_)?scaler$"), Role.SCALER),
    (re.compile(r"^(\w+_)?accelerator$"), Role.ACCELERATOR),
    (re.compile(r"^fabric$"), Role.FABRIC),
    (re.compile(r"^(\w+_)?optim_wrapper$"), Role.OPTIM_WRAPPER),
    (re.compile(r"^ddp_model$|^ddp$"), Role.DDP_MODEL),
    (re.compile(r"^fsdp_model$"), Role.FSDP_MODEL),
    (re.compile(r"^(model_engine|engine|ds_engine|deepspeed_engine)$"), Role.ENGINE),
    (re.compile(r"^(\w+_)?(model|net|network|module|policy|student|generator|discriminator)$"), Role.MODEL),
    (re.compile(r"^_*(\w+_)?(loader|dataloader)$"), Role.LOADER),
)

#: Lightning accessors inside a LightningModule.
LIGHTNING_ACCESSORS: dict[str, Role] = {"self.optimizers()": Role.OPTIMIZER, "self.lr_schedulers()": Role.SCHEDULER}

#: Roles whose objects can be data-parallel (sync-switch owners).
MODEL_ROLES = frozenset({Role.MODEL, Role.DDP_MODEL, Role.FSDP_MODEL, Role.ENGINE})

# --- accumulation configuration --------------------------------------------------------------

#: Names that say "this is A" (variables, attributes, config fields).
ACCUMULATION_NAME = re.compile(
    r"(grad(ient)?_?acc|accum|accumulat|(^|_)gas$|^ga$|(^|_)ga_steps$|iters_to_accumulate|update_freq|"
    r"micro_?steps|num_micro_?batches|n_micro_?batches|accumulative_counts)",
    re.IGNORECASE,
)

#: Keywords that configure A, so the value passed is A whatever its name (``A = 8``;
#: ``Trainer(accumulate_grad_batches=A)``): Accelerate ``Accelerator(gradient_accumulation_steps=)``
#: (accelerate 1.15.0), HF ``TrainingArguments(gradient_accumulation_steps=)`` (transformers
#: 5.24.0), Lightning ``Trainer(accumulate_grad_batches=)`` (lightning 2.6.6), mmengine
#: ``OptimWrapper(accumulative_counts=)`` (0.10.7).
ACCUMULATION_KEYWORDS = frozenset({"gradient_accumulation_steps", "accumulate_grad_batches", "accumulative_counts"})

# --- who divides the loss by A --------------------------------------------------------------


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


BACKWARD_CONTRACTS: tuple[BackwardContract, ...] = (
    BackwardContract(
        Role.ACCELERATOR, "backward", Normalizes.IF_CONFIGURED, None, "Accelerate",
        "accelerate 1.15.0 accelerator.py Accelerator.backward: loss / gradient_accumulation_steps "
        "(every backend but DeepSpeed, where the engine divides by its own GAS)",
    ),
    BackwardContract(
        Role.ENGINE, "backward", Normalizes.ALWAYS, "scale_wrt_gas", "DeepSpeed",
        "deepspeed 0.19.8 runtime/engine.py DeepSpeedEngine.backward(scale_wrt_gas=True) scales by 1/GAS",
    ),
    BackwardContract(
        Role.OPTIM_WRAPPER, "update_params", Normalizes.ALWAYS, None, "mmengine",
        "mmengine 0.10.7 OptimWrapper.update_params divides by accumulative_counts",
    ),
    BackwardContract(
        Role.FABRIC, "backward", Normalizes.NEVER, None, "Lightning Fabric",
        "lightning 2.6.6 fabric.py Fabric.backward: no division",
    ),
)


def backward_contract(role: Role, method: str) -> BackwardContract | None:
    """The contract of ``<role>.<method>(loss)``, if the framework table has one."""
    for contract in BACKWARD_CONTRACTS:
        if contract.role is role and contract.method == method:
            return contract
    return None


# --- who gates the optimizer update, the reset, the scheduler -------------------------------

#: Accelerate (accelerate 1.15.0 optimizer.py, scheduler.py): inside ``accumulate()``, a
#: *prepared* optimizer's ``step``/``zero_grad`` and a prepared scheduler's ``step`` act only
#: on the sync microbatch. ``nn.Module.zero_grad`` and unprepared objects are never gated.
ACCELERATE_GATED_ROLES = frozenset({Role.OPTIMIZER, Role.SCHEDULER})

#: Accelerate's boundary flags (``accelerator.sync_gradients``; ``gradient_state.sync_gradients``).
ACCELERATE_BOUNDARY_ATTRS = frozenset({"sync_gradients"})

#: DeepSpeed (0.19.8 runtime/engine.py): the engine resets gradients after the boundary update,
#: so a loop with ``engine.step()`` needs no reset of its own; ``engine.step()`` must run after
#: every microbatch (managed mode, the default) and only acts at the boundary.
DEEPSPEED_BOUNDARY_CALLS = frozenset({"is_gradient_accumulation_boundary"})
DEEPSPEED_UNMANAGED_KEY = "managed_gradient_accumulation"
#: The engine told the boundary by hand before each backward (deepspeed 0.19.8 runtime/engine.py
#: ``set_gradient_accumulation_boundary``): its own micro-step counter no longer decides, so
#: ``engine.step()`` may run on the boundary only.
DEEPSPEED_MANUAL_BOUNDARY_CALLS = frozenset({"set_gradient_accumulation_boundary"})

#: Context managers that skip the gradient all-reduce, by receiver role and method.
#: DDP decides at forward time (torch 2.13.0 nn/parallel/distributed.py, reducer armed in
#: forward); FSDP reads its flag in the post-backward hook, so forward placement does not matter.
NO_SYNC_METHODS: dict[str, tuple[Role, ...]] = {
    "no_sync": (Role.DDP_MODEL, Role.ACCELERATOR, Role.MODEL, Role.FSDP_MODEL, Role.ENGINE),
    "no_backward_sync": (Role.FABRIC,),
}
#: Contexts that do nothing (``contextlib.nullcontext``, last segment): the other arm of a context
#: chosen by a flag (``ctx = nullcontext if flag else accelerator.accumulate``).
NULL_CONTEXTS = frozenset({"nullcontext"})
#: FSDP2's ``fully_shard`` (torch 2.13.0 ``distributed/fsdp/_fully_shard/_fully_shard.py``): it
#: shards the module in place and its class ``FSDPModule`` has no ``no_sync``; its switch is
#: ``set_requires_gradient_sync(False)``, and ``require_backward_grad_sync`` is read by nothing.
FSDP2_SHARD_CALLS = frozenset({
    "torch.distributed.fsdp.fully_shard", "torch.distributed._composable.fsdp.fully_shard",
    "torch.distributed.fsdp._fully_shard.fully_shard", "torch.distributed._composable.fsdp.fully_shard.fully_shard",
})
#: DDP's sync switches (torch 2.13.0 ``nn/parallel/distributed.py``): the context and the flag it flips
DDP_NO_SYNC_METHOD = "no_sync"
DDP_SYNC_FLAG = "require_backward_grad_sync"
#: Sync switches whose decision is taken at forward time.
FORWARD_DECIDES_SYNC = frozenset({Role.DDP_MODEL, Role.ACCELERATOR, Role.FABRIC})

#: LightningModule hooks where automatic optimization owns normalization, reset, update
#: (lightning 2.6.6 loops/optimization/automatic.py: loss / accumulate_grad_batches).
LIGHTNING_MODULE_BASES = frozenset({"LightningModule"})  # last segment of the base class

#: Methods a framework calls once per microbatch, read as the body of that loop (lightning
#: 2.6.6 ``loops/optimization``: automatic and manual optimization both call training_step per batch).
MICROBATCH_HOOKS = frozenset({"training_step"})

# --- the epoch's last partial group (r = microbatches per epoch mod A) -----------------------


class TailTreatment(str, Enum):
    """What happens to the last ``r < A`` microbatches of an epoch (the partial final group)."""

    LEAKS = "carried into the first group of the next epoch"
    NOT_APPLIED = "backpropagated but never applied by this loop"
    WEIGHTED = "applied, but weighted r/A (each microbatch still divided by A)"
    TRUE_COUNT = "applied with its true size r"
    DROPPED = "dropped: the gradients are reset before they are applied"
    MERGED = "merged into the next epoch: groups of exactly A microbatches span the epoch boundary"


@dataclass(frozen=True)
class FrameworkTail:
    """How a framework that owns the group boundary treats the partial final group."""

    framework: str
    treatment: TailTreatment
    source: str


#: The frameworks disagree; the linter reports what the user's own gate does and leaves a
#: framework's documented choice to the runtime card.
FRAMEWORK_TAILS: dict[str, FrameworkTail] = {
    "accelerate-prepared-loader": FrameworkTail(
        "Accelerate", TailTreatment.WEIGHTED,
        "accelerate 1.15.0 accelerator.py _do_sync: sync_with_dataloader syncs at end_of_dataloader; "
        "backward still divides by A"),
    "accelerate-unprepared-loader": FrameworkTail(
        "Accelerate", TailTreatment.MERGED,
        "accelerate 1.15.0 accelerator.py _do_sync: without a prepared loader the step counter runs on"),
    "deepspeed": FrameworkTail(
        "DeepSpeed", TailTreatment.MERGED,
        "deepspeed 0.19.8 runtime/engine.py is_gradient_accumulation_boundary: (micro_steps + 1) % GAS"),
    "lightning": FrameworkTail(
        "Lightning", TailTreatment.WEIGHTED,
        "lightning 2.6.6 loops/training_epoch_loop.py _should_accumulate: steps on the last batch; "
        "loops/optimization/automatic.py divides by accumulate_grad_batches"),
    "hf-trainer": FrameworkTail(
        "HF Trainer", TailTreatment.TRUE_COUNT,
        "transformers 5.24.0 trainer.py: the epoch's last update prefetches fewer batches and divides by their count"),
}

# --- gradient clipping and the gradient scaler ------------------------------------------------

#: Clip owners whose clip unscales the GradScaler's gradients itself before clipping:
#: accelerate 1.15.0 ``accelerator.py`` ``clip_grad_norm_``/``clip_grad_value_`` call
#: ``unscale_gradients()`` (fp16 with native AMP; a no-op otherwise) on every call, with no
#: sync guard; lightning 2.6.6 ``fabric/strategies/strategy.py`` ``clip_gradients_norm``/
#: ``clip_gradients_value`` call ``precision.unscale_gradients(optimizer)``.
UNSCALING_CLIP_OWNERS = frozenset({Role.ACCELERATOR, Role.FABRIC})

#: Clips that act on plain ``.grad`` without unscaling: torch 2.13.0 ``nn/utils/clip_grad.py``
#: (qualified-name prefix) and FSDP1's ``FullyShardedDataParallel.clip_grad_norm_``
#: (``distributed/fsdp/fully_sharded_data_parallel.py``).
PLAIN_CLIP_PREFIX = "torch.nn.utils."
PLAIN_CLIP_OWNERS = frozenset({Role.FSDP_MODEL})

#: Accelerator keywords that select the DeepSpeed backend, where ``accelerator.clip_grad_norm_``
#: only returns the engine's norm and clips nothing (accelerate 1.15.0 ``accelerator.py``
#: ``clip_grad_norm_``, DeepSpeed branch; the engine clips at its boundary from its config).
ACCELERATE_DEEPSPEED_KEYWORDS = ("deepspeed_plugin", "deepspeed_plugins")

#: ``GradScaler(enabled=...)``: a disabled scaler returns the loss unscaled and its ``unscale_``
#: and ``update`` do nothing (torch 2.13.0 ``amp/grad_scaler.py``).
SCALER_ENABLED_KEYWORD = "enabled"

# --- schedulers: who steps them, and the parameters that size them ---------------------------

#: ``deepspeed.initialize(lr_scheduler=...)``: the engine keeps the client scheduler (or builds
#: one from the config's ``"scheduler"`` section when none is passed) and steps it inside
#: ``engine.step()`` on every accumulation boundary whose update was not skipped for overflow.
#: Source: deepspeed 0.19.6 (deepspeedai master @edaa722) ``runtime/engine.py``
#: (``_configure_lr_scheduler``; ``step`` → ``_take_model_step`` → ``self.lr_scheduler.step()``)
#: and ``runtime/constants.py`` (``SCHEDULER = "scheduler"``).
DEEPSPEED_SCHEDULER_KEYWORD = "lr_scheduler"
DEEPSPEED_SCHEDULER_POSITION = 5  # initialize(args, model, optimizer, model_parameters, training_data, lr_scheduler, …)
DEEPSPEED_CONFIG_KEYWORDS = ("config", "config_params")
DEEPSPEED_SCHEDULER_CONFIG_KEY = "scheduler"

#: Lightning under automatic optimization steps every scheduler that ``configure_optimizers``
#: returns (once per optimizer update with ``interval="step"``, once per epoch by default)
#: through the ``lr_scheduler_step`` hook; under manual optimization it steps none.
#: Source: lightning 2.6.2 (master @7f0c343) ``pytorch/loops/training_epoch_loop.py``
#: ``_update_learning_rates`` (returns early unless ``automatic_optimization``).
LIGHTNING_CONFIGURE_OPTIMIZERS = "configure_optimizers"
LIGHTNING_SCHEDULER_STEP_HOOK = "lr_scheduler_step"  # overriding it hands the stepping to the user
LIGHTNING_SCHEDULER_KEYS = frozenset({"lr_scheduler", "scheduler"})  # dict keys of the returned config
#: LightningModule hooks that run during the fit loop (per batch or per epoch): a scheduler
#: step there runs in addition to Lightning's own (lightning 2.6.2 ``pytorch/core/hooks.py``).
LIGHTNING_TRAINING_HOOKS = frozenset({
    "training_step", "on_train_batch_start", "on_train_batch_end", "on_before_backward", "on_after_backward",
    "on_before_optimizer_step", "optimizer_step", "on_train_epoch_start", "on_train_epoch_end",
})

#: Parameters that size a schedule (its horizon or warmup, in scheduler steps), by keyword.
#: Sources: torch 2.13.0 ``optim/lr_scheduler.py`` (``T_max``, ``T_0``, ``total_steps``,
#: ``steps_per_epoch``, ``total_iters``); transformers 5.23.0 and diffusers 0.42.1
#: ``optimization.py`` (``num_warmup_steps``, ``num_training_steps``, ``num_decay_steps``);
#: pytorch-transformers 1.x ``WarmupLinearSchedule(warmup_steps, t_total)``.
SCHEDULE_HORIZON_KEYWORDS = frozenset({
    "num_training_steps", "num_warmup_steps", "num_decay_steps", "T_max", "T_0", "total_steps",
    "steps_per_epoch", "total_iters", "warmup_steps", "t_total",
})

#: The same parameters by position, for constructors whose signature is fixed (callee last
#: segment → {position: parameter}); ``get_scheduler`` differs between transformers and
#: diffusers, so only its keywords count.
SCHEDULE_HORIZON_POSITIONS: dict[str, dict[int, str]] = {
    **{name: {1: "num_warmup_steps", 2: "num_training_steps"} for name in (
        "get_linear_schedule_with_warmup", "get_cosine_schedule_with_warmup",
        "get_cosine_with_hard_restarts_schedule_with_warmup", "get_polynomial_decay_schedule_with_warmup",
        "get_cosine_with_min_lr_schedule_with_warmup")},
    "get_constant_schedule_with_warmup": {1: "num_warmup_steps"},
    "CosineAnnealingLR": {1: "T_max"},
    "CosineAnnealingWarmRestarts": {1: "T_0"},
    "OneCycleLR": {2: "total_steps", 4: "steps_per_epoch"},
    "PolynomialLR": {1: "total_iters"},
    "LinearLR": {3: "total_iters"},
}

# --- logging: the argument that is the x-axis of a logged curve -------------------------------

#: Keywords that give a logged value its x position: ``wandb.log(data, step=None)``,
#: accelerate 1.15.0 ``Accelerator.log(values, step=None)``, lightning 2.6.6 fabric
#: ``Logger.log_metrics(metrics, step=None)``, torch 2.13.0 ``utils/tensorboard/writer.py``
#: ``SummaryWriter.add_*(tag, value, global_step=None)``.
LOGGING_STEP_KEYWORDS = frozenset({"step", "global_step"})
#: The calls those keywords are read on (callee last segment): ``log``, ``log_metrics``,
#: ``log_metric`` (mlflow 2.x ``log_metric(key, value, step=None)``), ``add_scalar`` …, aim's
#: ``track`` (not ``range``/``arange``-like calls, whose ``step=`` is a stride).
LOGGING_STEP_CALLEE = re.compile(r"^(log\w*|add_\w+|track|record\w*)$")
#: Logging methods whose x position is positional (method → position).
LOGGING_STEP_POSITIONS: dict[str, int] = {
    "add_scalar": 2, "add_scalars": 2, "add_histogram": 2, "add_image": 2, "add_images": 2, "add_figure": 2,
    "add_text": 2, "add_audio": 2, "add_pr_curve": 3, "log_metrics": 1,
}
#: Calls that print or record a progress line (callee last segment, lower-cased): a counter
#: formatted into their message labels the line's position in training.
LOGGING_CALLS = frozenset({
    "print", "log", "info", "debug", "warning", "logger", "write", "print_rank_0", "log_dist", "set_description",
    "set_postfix", "set_postfix_str",
})

# --- data parallelism: replicas, loaders, samplers, counts (ACC403-ACC405, ACC901) -----------

#: Callees (last segment) that start a process group: the module runs as several processes
#: (torch 2.13.0 ``distributed/distributed_c10d.py`` ``init_process_group``; deepspeed 0.19.6
#: ``comm/comm.py`` ``init_distributed``, which calls it).
PROCESS_GROUP_INIT = frozenset({"init_process_group", "init_distributed"})

#: Single-process replication (torch 2.13.0 ``nn/parallel/data_parallel.py``): one process
#: splits the loader's batch over the visible GPUs, so there the GPU count *is* the replica count.
SINGLE_PROCESS_REPLICATION = frozenset({
    "torch.nn.DataParallel", "torch.nn.parallel.DataParallel", "torch.nn.parallel.data_parallel.DataParallel",
})

#: torch's DataLoader, whose sampler decides what each replica reads (torch 2.13.0
#: ``utils/data/dataloader.py``); positional order of its first parameters.
TORCH_DATALOADERS = frozenset({"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"})
DATALOADER_PARAMETERS = ("dataset", "batch_size", "shuffle", "sampler", "batch_sampler")

#: Samplers that hand every replica the whole dataset (torch 2.13.0 ``utils/data/sampler.py``:
#: none of them reads a rank), by last segment; ``BatchSampler`` wraps its first argument.
LOCAL_SAMPLERS = frozenset({"RandomSampler", "SequentialSampler", "WeightedRandomSampler"})
BATCH_SAMPLER_WRAPPERS = frozenset({"BatchSampler"})
#: the calls that wrap a model for data parallelism (torch 2.13.0 ``nn/parallel/distributed.py``,
#: ``distributed/fsdp/``): a project helper that calls one makes its callers' models averaging
WRAPPER_CONSTRUCTOR_NAMES = frozenset({"DistributedDataParallel", "FullyShardedDataParallel", "FSDP", "fully_shard"})
#: the token losses whose reduction decides a mean of means (torch 2.13.0 ``nn/functional.py``):
#: a project module that calls one may return the loss a caller divides by A
TOKEN_LOSS_CALLS = frozenset({"cross_entropy", "nll_loss"})
#: Any sampler class (last segment): a call of one never shards a dataset by itself.
SAMPLER_NAME = re.compile(r"Sampler$")

#: Map-style datasets: with no sampler every replica reads all of them. ``shuffle=True`` also
#: proves a map-style dataset (torch 2.13.0 ``dataloader.py`` raises for an IterableDataset).
MAP_STYLE_DATASETS = frozenset({"torch.utils.data.TensorDataset", "torch.utils.data.dataset.TensorDataset"})
MAP_STYLE_PREFIXES = ("torchvision.datasets.",)
MAP_STYLE_BASES = frozenset({"Dataset", "TensorDataset"})  # last segment of a local class's base


@dataclass(frozen=True)
class LoaderSharding:
    """A framework call that gives each replica its own samples when it builds or prepares a loader."""

    framework: str
    call: str  # method name, or ``module.function`` with ``keyword`` naming the dataset argument
    keyword: str | None
    source: str


LOADER_SHARDING: tuple[LoaderSharding, ...] = (
    LoaderSharding("Accelerate", "prepare", None,
                   "accelerate 1.15.0 data_loader.py prepare_data_loader: BatchSamplerShard / "
                   "IterableDatasetShard over num_processes"),
    LoaderSharding("Accelerate", "prepare_data_loader", None, "accelerate 1.15.0 data_loader.py"),
    LoaderSharding("Lightning Fabric", "setup_dataloaders", None,
                   "lightning 2.6.6 fabric/fabric.py _setup_dataloader: DistributedSampler when "
                   "use_distributed_sampler (default True)"),
    LoaderSharding("DeepSpeed", "deepspeed.initialize", "training_data",
                   "deepspeed 0.19.6 runtime/engine.py deepspeed_io -> runtime/dataloader.py DeepSpeedDataLoader: "
                   "DistributedSampler(num_replicas=data_parallel_world_size, rank=data_parallel_rank) when "
                   "local_rank >= 0 and no data_sampler is given"),
)

#: Names that hold a replica's rank (last segment, lower-cased) and calls that return it.
RANK_NAME = re.compile(r"^_*(\w+_)?rank(_id|_index)?$|^(local_)?process_index$")
RANK_CALLS = frozenset({"get_rank", "get_local_rank", "get_global_rank", "get_data_parallel_rank", "get_dp_rank"})
#: Calls that split a dataset between nodes or replicas by name (HF datasets ``shard`` /
#: ``split_dataset_by_node``, webdataset ``split_by_node``).
SHARDING_CALL = re.compile(r"shard|split_dataset_by_node|split_by_node|nodesplitter", re.IGNORECASE)
#: Callees whose rank argument places a process or a tensor, never a dataset.
RANK_PLACEMENT_CALLS = frozenset({
    "init_process_group", "init_distributed", "new_group", "DistributedDataParallel", "DDP",
    "FullyShardedDataParallel", "FSDP", "fully_shard", "cuda", "to", "device", "set_device", "print", "format",
    "manual_seed", "seed", "barrier", "spawn", "int", "str", "float", "bool", "info", "warning", "debug", "error",
    "log", "write", "broadcast", "all_reduce", "all_gather", "gather", "reduce", "Generator",
})

#: Calls that count the GPUs of this node (torch 2.13.0 ``cuda/__init__.py`` ``device_count``;
#: ``torch.xpu``/``torch.accelerator`` and DeepSpeed's ``get_accelerator()`` have the same method).
DEVICE_COUNT_CALLS = frozenset({"device_count"})
#: Names and environment variables that hold the number of processes of one node.
DEVICE_COUNT_NAME = re.compile(r"^(nproc_per_node|n?gpus_per_node|num_gpus_per_node|local_world_size)$", re.I)
DEVICE_COUNT_ENV = frozenset({"LOCAL_WORLD_SIZE"})
#: Names that count nodes (a GPU count times a node count is the world size).
NODE_COUNT_NAME = re.compile(r"^(n_?nodes|num_?nodes|node_count|num_machines|n_machines)$", re.I)
#: The whole world size (every process, data-parallel or not): torch 2.13.0
#: ``distributed_c10d.get_world_size(group=None)`` and torchrun's ``WORLD_SIZE``.
WORLD_SIZE_CALLS = frozenset({"get_world_size"})
WORLD_SIZE_ENV = frozenset({"WORLD_SIZE"})
#: Names that count data-parallel replicas (or every process): multiplying by one undoes
#: DDP's average (``shared/docs/framework-contracts.md`` section 0; Accelerate ``num_processes``;
#: Fabric ``world_size``).
REPLICA_COUNT_NAME = re.compile(
    r"^_*(\w+_)?(world_size|num_processes|num_replicas|n_replicas|nranks|n_ranks|dp_size|dp_degree|"
    r"data_parallel_size|dp_world_size|get_world_size|get_data_parallel_world_size)$", re.I)
#: Tensor- and pipeline-parallel sizes: GPUs that share one replica.
MODEL_PARALLEL_NAME = re.compile(
    r"^(tp|pp)_?(size|degree|world_size)$|^(tensor|pipeline)(_model)?_parallel(_size|_degree|_world_size)?$|"
    r"^model_parallel(_size|_degree)?$", re.I)
#: Effective / global batch names (A is recognised by ``ACCUMULATION_NAME``).
GLOBAL_BATCH_NAME = re.compile(
    r"^(global|total|effective|eff)_\w*batch\w*$|^tokens_per_(iter|iteration|step|update)$", re.I)
#: What a file's bytes hold wherever it names A (``ACCUMULATION_NAME``) or a global batch
#: (``GLOBAL_BATCH_NAME``): the two patterns with their anchors loosened, so a match of either
#: in a name spelled in ASCII implies a match here. Strings and comments match too: the
#: ``ast`` stage decides those.
_NAME_END = rb"(?![a-z0-9_\x80-\xff])"
A_OR_GLOBAL_BATCH_BYTES = NeedlePattern(
    {
        b"accum": b"accum",  # also accumulat, iters_to_accumulate, accumulative_counts
        b"grad": rb"grad(ient)?_?acc",
        b"ga": rb"ga(s|_steps)?" + _NAME_END,
        b"update_freq": b"update_freq",
        b"micro": rb"micro_?(steps|batches)",  # also num_micro_batches, n_micro_batches
        b"global_": rb"global_[a-z0-9_\x80-\xff]*batch",
        b"total_": rb"total_[a-z0-9_\x80-\xff]*batch",
        b"eff": rb"eff(ective)?_[a-z0-9_\x80-\xff]*batch",
        b"tokens_per_": rb"tokens_per_(iter|step|update)",
    }
)

#: Reductions whose result is the sum over replicas. In place: torch 2.13.0
#: ``distributed_c10d.all_reduce(tensor, op=ReduceOp.SUM)``. Returned: accelerate 1.15.0
#: ``Accelerator.reduce(tensor, reduction="sum")``; Fabric's ``all_reduce`` defaults to "mean"
#: (lightning 2.6.6 ``fabric.py``), so only an explicit "sum" counts; ``gather(...).sum()``.
IN_PLACE_SUM = frozenset({"all_reduce"})
RETURNED_REDUCTIONS = frozenset({"reduce", "all_reduce"})
GATHERS = frozenset({"gather", "all_gather", "gather_for_metrics"})
SUM_DEFAULT_REDUCTIONS = frozenset({"reduce"})  # accelerate Accelerator.reduce
#: Switches that change what a wrapper does with the replicas' gradients (torch 2.13.0 DDP
#: ``register_comm_hook``; FSDP1/FSDP2 divide factors): with one, the average is not known.
AVERAGING_OVERRIDES = frozenset({"register_comm_hook", "gradient_divide_factor", "set_gradient_divide_factor",
                                 "set_reduce_scatter_divide_factor", "gradient_predivide_factor"})

#: Calls that rescale gradients after the backward (torchtune 0.6.1 ``training/_grad_scaler.py``
#: ``scale_grads(model, scaler)``; tensor ``mul_``/``div_``; torch ``_foreach_mul_``/``_foreach_div_``):
#: a replica count among their arguments undoes (or changes) the wrapper's average.
GRAD_SCALING_CALLS = frozenset({"scale_grads", "mul_", "div_", "_foreach_mul_", "_foreach_div_"})

#: BatchNorm layers (torch 2.13.0 ``nn/modules/batchnorm.py``): statistics per forward pass.
BATCHNORM_CLASSES = frozenset({"BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm",
                               "LazyBatchNorm1d", "LazyBatchNorm2d", "LazyBatchNorm3d"})

# --- HF Trainer -------------------------------------------------------------------------------

#: Trainer classes whose ``training_step`` decides the division by A from
#: ``model_accepts_loss_kwargs`` (transformers 5.24.0 trainer.py ``training_step``; the
#: group count ``num_items_in_batch`` exists only when batches carry ``"labels"``,
#: ``_get_num_items_in_batch``). Subclasses from other packages (trl, unsloth) may declare
#: their own normalization, so only these bases are judged.
HF_TRAINER_CLASSES = frozenset({
    "transformers.Trainer", "transformers.trainer.Trainer",
    "transformers.Seq2SeqTrainer", "transformers.trainer_seq2seq.Seq2SeqTrainer",
})
#: the classes' own names, whatever module they are imported from
HF_TRAINER_CLASS_NAMES = frozenset(name.rsplit(".", 1)[-1] for name in HF_TRAINER_CLASSES)
#: the Trainer method a subclass overrides to compute the loss of a microbatch
HF_COMPUTE_LOSS = "compute_loss"
#: the Trainer method called once per microbatch (transformers 5.24.0 ``trainer.py``
#: ``_inner_training_loop`` → ``training_step``) and the update counter it can read:
#: ``self.state.global_step`` advances once per optimizer update, after the group's last microbatch
HF_TRAINING_STEP = "training_step"
HF_UPDATE_COUNTER = "self.state.global_step"
#: Collators that pad labels with -100 to each batch's longest sequence, so a model's
#: ``outputs.loss`` is a mean over a count of supervised tokens that varies per microbatch
#: (transformers 5.24.0 ``data/data_collator.py``: ``DataCollatorForSeq2Seq`` and
#: ``DataCollatorForTokenClassification`` pad labels with ``label_pad_token_id=-100``; the
#: built-in losses, ``loss/loss_utils.py``, take ``ignore_index=-100`` with a mean when no
#: ``num_items_in_batch`` is passed). Not ``DataCollatorForLanguageModeling``: over grouped
#: fixed-length blocks its causal labels have no padding, and its MLM masks a fixed ratio.
HF_LABEL_MASKING_COLLATORS = frozenset({"DataCollatorForSeq2Seq", "DataCollatorForTokenClassification"})
