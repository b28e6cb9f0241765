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
    (re.compile(r"^(\w+_)?(loader|dataloader)$"), Role.LOADER),
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

#: Context managers that skip the gradient all-reduce, by receiver role and method.
#: DDP decides at forward time (torch 2.13.0 nn/parallel/distributed.py, reducer armed in
#: forward); FSDP reads its flag in the post-backward hook, so forward placement does not matter.
NO_SYNC_METHODS: dict[str, tuple[Role, ...]] = {
    "no_sync": (Role.DDP_MODEL, Role.ACCELERATOR, Role.MODEL, Role.FSDP_MODEL, Role.ENGINE),
    "no_backward_sync": (Role.FABRIC,),
}
#: Sync switches whose decision is taken at forward time.
FORWARD_DECIDES_SYNC = frozenset({Role.DDP_MODEL, Role.ACCELERATOR, Role.FABRIC})

#: LightningModule hooks where automatic optimization owns normalization, reset, update
#: (lightning 2.6.6 loops/optimization/automatic.py: loss / accumulate_grad_batches).
LIGHTNING_MODULE_BASES = frozenset({"LightningModule"})  # last segment of the base class

#: Methods a framework calls once per microbatch, read as the body of that loop (lightning
#: 2.6.6 ``loops/optimization``: automatic and manual optimization both call training_step per batch).
MICROBATCH_HOOKS = frozenset({"training_step"})
