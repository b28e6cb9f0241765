"""Framework contracts as data, one module per framework, each with its sources.

Each module states what its framework does per microbatch and per optimizer update (who divides
the loss by A and by what, who gates the update, the reset, the scheduler and the clip, when
gradient sync is decided, how the partial last group is treated, which user hooks it calls per
microbatch and in which order, where A comes from), with the package version and the source file
each fact was read from. The linter's model and the runtime guard both read these rows; a
framework's version bump edits its one module. The row vocabulary is :mod:`.contracts`.

This package imports neither LibCST nor torch. The tables below join the modules' rows where
a question spans frameworks (which constructor builds which role, which backward divides).
"""

from __future__ import annotations

from accumlint.frameworks import (
    accelerate,
    apex,
    bitsandbytes,
    deepspeed,
    diffusers,
    fairseq,
    fastprogress,
    lightning,
    mmengine,
    peft,
    pytorch,
    timm,
    torch_xla,
    torchtune,
    torchvision,
    transformers,
)
from accumlint.frameworks.contracts import (
    BackwardContract,
    CountingDriver,
    FrameworkTail,
    GroupContract,
    LoaderSharding,
    Normalizes,
    Owner,
    Role,
    Summary,
    TailTreatment,
)

__all__ = [
    "ACCUMULATION_KEYWORDS", "BACKWARD_CONTRACTS", "CONSTRUCTORS", "CONSTRUCTOR_PREFIXES", "FORWARD_DECIDES_SYNC",
    "COUNTER_BUILDER_NAMES", "COUNTING_DRIVERS", "FRAMEWORK_TAILS", "FSDP2_SHARDS",
    "FSDP2_SHARD_NAMES", "GATHERS", "GRAD_SCALING_CALLS", "GROUP_CONTRACTS", "INHERITED_BACKWARDS", "INHERITED_METHODS",
    "LOADER_SHARDING", "NAMED_SCHEDULE_READS", "NO_SYNC_METHODS", "PROCESS_GROUP_INIT", "RETURNED_REDUCTIONS",
    "SCHEDULE_HORIZON_KEYWORDS",
    "SCHEDULE_HORIZON_POSITIONS", "SUMMARIES", "UNSCALING_CLIP_OWNERS", "BackwardContract", "FrameworkTail",
    "GroupContract", "LoaderSharding", "Normalizes", "Owner", "Role", "Summary", "TailTreatment", "accelerate",
    "apex", "backward_contract", "bitsandbytes", "deepspeed", "diffusers", "fairseq", "fastprogress", "lightning",
    "mmengine", "peft", "pytorch", "timm", "torch_xla", "torchtune", "torchvision", "transformers",
]

#: Exact qualified constructor names → the role of the value they return.
CONSTRUCTORS: dict[str, Role] = {
    **pytorch.CONSTRUCTORS, **accelerate.CONSTRUCTORS, **lightning.CONSTRUCTORS, **transformers.CONSTRUCTORS,
    **diffusers.CONSTRUCTORS, **mmengine.CONSTRUCTORS,
}
#: Qualified-name prefixes (module → every public class in it has the role), first match wins.
CONSTRUCTOR_PREFIXES: tuple[tuple[str, Role], ...] = (
    *pytorch.CONSTRUCTOR_PREFIXES, *transformers.CONSTRUCTOR_PREFIXES, *timm.CONSTRUCTOR_PREFIXES,
    *bitsandbytes.CONSTRUCTOR_PREFIXES, *apex.CONSTRUCTOR_PREFIXES, *deepspeed.CONSTRUCTOR_PREFIXES,
)

#: Keywords that configure A, so the value passed is A whatever its name (``A = 8``;
#: ``Trainer(accumulate_grad_batches=A)``).
ACCUMULATION_KEYWORDS = frozenset({
    accelerate.ACCUMULATION_KEYWORD, transformers.ACCUMULATION_KEYWORD, lightning.ACCUMULATION_KEYWORD,
    mmengine.ACCUMULATION_KEYWORD,
})

#: Backward APIs and whether they divide by A.
BACKWARD_CONTRACTS: tuple[BackwardContract, ...] = (
    accelerate.BACKWARD, deepspeed.BACKWARD, mmengine.BACKWARD, lightning.BACKWARD,
)


def backward_contract(role: Role, method: str) -> BackwardContract | None:
    """The contract of ``<role>.<method>(loss)``, if a framework module has one."""
    for contract in BACKWARD_CONTRACTS:
        if contract.role is role and contract.method == method:
            return contract
    return None


#: What each framework API does to the group (``shared/docs/framework-contracts.md``'s summary).
GROUP_CONTRACTS: tuple[GroupContract, ...] = (
    pytorch.CONTRACT, accelerate.CONTRACT, transformers.CONTRACT, lightning.CONTRACT, lightning.FABRIC_CONTRACT,
    deepspeed.CONTRACT, mmengine.CONTRACT, torchtune.CONTRACT,
)

#: How frameworks that own the group boundary treat the partial final group. They disagree; the
#: linter reports what the user's own gate does and leaves a framework's choice to the runtime card.
FRAMEWORK_TAILS: dict[str, FrameworkTail] = {
    **accelerate.TAILS, **deepspeed.TAILS, **lightning.TAILS, **transformers.TAILS,
}

#: Context managers that skip the gradient all-reduce: method → receiver roles.
NO_SYNC_METHODS: dict[str, tuple[Role, ...]] = {
    pytorch.DDP_NO_SYNC_METHOD: (*pytorch.NO_SYNC_ROLES, *accelerate.NO_SYNC_ROLES, *deepspeed.NO_SYNC_ROLES),
    lightning.NO_SYNC_METHOD: lightning.NO_SYNC_ROLES,
}
#: Sync switches whose decision is taken at forward time.
FORWARD_DECIDES_SYNC = pytorch.FORWARD_DECIDES_SYNC | accelerate.FORWARD_DECIDES_SYNC | lightning.FORWARD_DECIDES_SYNC
#: Clip owners whose clip unscales the GradScaler's gradients itself before clipping.
UNSCALING_CLIP_OWNERS = accelerate.UNSCALING_CLIP_OWNERS | lightning.UNSCALING_CLIP_OWNERS

#: Parameters that size a schedule (its horizon or warmup, in scheduler steps), by keyword.
SCHEDULE_HORIZON_KEYWORDS = (pytorch.SCHEDULE_HORIZON_KEYWORDS | transformers.SCHEDULE_HORIZON_KEYWORDS
                             | transformers.LEGACY_SCHEDULE_HORIZON_KEYWORDS | diffusers.SCHEDULE_HORIZON_KEYWORDS)
#: The same by position, for constructors whose signature is fixed (callee last segment →
#: {position: parameter}); ``get_scheduler`` differs between transformers and diffusers, so only
#: its keywords count.
SCHEDULE_HORIZON_POSITIONS: dict[str, dict[int, str]] = {
    **transformers.SCHEDULE_HORIZON_POSITIONS, **pytorch.SCHEDULE_HORIZON_POSITIONS,
}
#: ``get_scheduler(name=...)`` of transformers and diffusers: per schedule name, the sizing keywords it
#: reads (each library rejects a name it does not define; a name both define keeps what either reads).
NAMED_SCHEDULE_READS: dict[str, frozenset[str]] = {
    name: transformers.NAMED_SCHEDULE_READS.get(name, frozenset())
    | diffusers.NAMED_SCHEDULE_READS.get(name, frozenset())
    for name in {*transformers.NAMED_SCHEDULE_READS, *diffusers.NAMED_SCHEDULE_READS}
}

#: Calls that start a process group: the module runs as several processes.
PROCESS_GROUP_INIT = pytorch.PROCESS_GROUP_INIT | deepspeed.PROCESS_GROUP_INIT
#: Calls that shard a module with FSDP2 in place (qualified name → the parameter naming it, also
#: the first positional): torch's ``fully_shard(module)``, torchtune's ``shard_model(model, ...)``.
FSDP2_SHARDS: dict[str, str] = {
    **dict.fromkeys(pytorch.FSDP2_SHARD_CALLS, pytorch.FSDP2_SHARD_PARAMETER),
    **dict.fromkeys(torchtune.SHARD_CALLS, torchtune.SHARD_PARAMETER),
}
#: Their last names (what a file's bytes show).
FSDP2_SHARD_NAMES = frozenset(qualified.rsplit(".", 1)[-1] for qualified in FSDP2_SHARDS)
#: Frameworks whose loader call gives each replica its own samples.
LOADER_SHARDING: tuple[LoaderSharding, ...] = (
    *accelerate.LOADER_SHARDING, *lightning.LOADER_SHARDING, *deepspeed.LOADER_SHARDING,
)
#: Reductions whose returned result is the sum over replicas (``accelerator.reduce``; Fabric's
#: ``all_reduce`` with an explicit "sum"), and gathers of every replica's values.
RETURNED_REDUCTIONS = accelerate.RETURNED_REDUCTIONS | lightning.RETURNED_REDUCTIONS
GATHERS = pytorch.GATHERS | accelerate.GATHERS
#: Calls that rescale gradients after the backward.
GRAD_SCALING_CALLS = torchtune.GRAD_RESCALE_CALLS | pytorch.IN_PLACE_RESCALES

#: Framework objects that count the microbatches themselves and decide which one ends a group.
COUNTING_DRIVERS: tuple[CountingDriver, ...] = (accelerate.DRIVER, deepspeed.DRIVER)
#: The last names of the calls that build one (Accelerate's ``Accelerator``, DeepSpeed's
#: ``initialize``): a project function calling one hands its caller the object whose A decides
#: the groups, so the project index follows it even where it performs no event (what a file's
#: bytes show).
COUNTER_BUILDER_NAMES = frozenset(
    name.rsplit(".", 1)[-1] for driver in COUNTING_DRIVERS
    for name in (*(q for q, role in CONSTRUCTORS.items() if role is driver.counter), driver.builder) if name)

#: Library functions and methods whose behaviour decides a verdict, summarized (the model
#: inlines them like project functions: :mod:`accumlint.model.summaries`).
SUMMARIES: tuple[Summary, ...] = (*timm.SUMMARIES,)

#: Library base classes (qualified) → the methods a subclass inherits from them, name → the Python text
#: of a function the model runs where the subclass's call on ``self`` finds no project definition
#: (``transformers.INHERITED_METHODS``).
INHERITED_METHODS: dict[str, dict[str, str]] = {
    name: transformers.INHERITED_METHODS for name in transformers.TRAINER_CLASSES}
#: The names of those methods that run a backward: a file calling one on ``self`` may train without
#: writing a backward of its own (the byte stage lets it through)
INHERITED_BACKWARDS = frozenset(name for methods in INHERITED_METHODS.values()
                                for name, text in methods.items() if ".backward(" in text)
