"""Framework-neutral naming conventions: the names and call shapes by which the model guesses
a value's role or meaning when no constructor tells (``optimizer``, ``grad_accum_steps``,
``world_size``, ``log(..., step=)``). Framework facts live in :mod:`accumlint.frameworks`.
"""

from __future__ import annotations

import re

import libcst as cst

from accumlint import frameworks as fw
from accumlint.model.kinds import Role
from accumlint.model.names import dotted, last_segment, positional

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

#: roles that one framework's class plays (HF Accelerate's ``Accelerator``, Lightning's ``Fabric``): a
#: class of the same name imported from another package (``audiotools.ml.Accelerator``) is not it
ONE_FRAMEWORK_ROLES = frozenset({Role.ACCELERATOR, Role.FABRIC})

#: Variable names, the weakest evidence (matched against the last segment, lower-cased).
NAME_PATTERNS: tuple[tuple[re.Pattern[str], Role], ...] = (
    (re.compile(r"^(lr_)?(sched|scheduler|schedulers|lr_scheduler|schedulers?_\w+|\w+_scheduler|\w+_sched)$"),
     Role.SCHEDULER),
    # before the optimizer pattern, which `optim_wrapper` also matches
    (re.compile(r"^(\w+_)?optim_wrapper$"), Role.OPTIM_WRAPPER),
    (re.compile(r"^(opt|optim|optimizer|optimiser|optimizers)(_\w+)?$|^\w+_(opt|optim|optimizer|optimiser)$"),
     Role.OPTIMIZER),
    (re.compile(r"^(\w+_)?(grad_)?scaler$"), Role.SCALER),
    (re.compile(r"^(\w+_)?accelerator$"), Role.ACCELERATOR),
    (re.compile(r"^fabric$"), Role.FABRIC),
    (re.compile(r"^ddp_model$|^ddp$"), Role.DDP_MODEL),
    (re.compile(r"^fsdp_model$"), Role.FSDP_MODEL),
    (re.compile(r"^(model_engine|engine|ds_engine|deepspeed_engine)$"), Role.ENGINE),
    (re.compile(r"^(\w+_)?(model|net|network|module|policy|student|generator|discriminator)$"), Role.MODEL),
    # a profiler's `prof.step()` marks its own step boundary (torch 2.13.0 ``profiler/profiler.py``): no update
    (re.compile(r"^(\w+_)?(prof|profiler)$"), Role.OTHER),
    (re.compile(r"^_*(\w+_)?(loader|dataloader)$"), Role.LOADER),
)

#: Roles whose objects can be data-parallel (sync-switch owners).
MODEL_ROLES = frozenset({Role.MODEL, Role.DDP_MODEL, Role.FSDP_MODEL, Role.ENGINE})

#: Names that say "this is A" (variables, attributes, config fields).
ACCUMULATION_NAME = re.compile(
    r"(grad(ient)?_?acc|accum|accumulat|(^|_)gas$|^ga$|(^|_)ga_steps$|iters_to_accumulate|update_freq|"
    r"micro_?steps|num_micro_?batches|n_micro_?batches|accumulative_counts)",
    re.IGNORECASE,
)

#: Names of a function that computes a validation or test metric (``evaluate``, ``validate``,
#: ``eval_epoch``, ``run_validation``, ``test_step``): with no backward in it, an evaluation.
EVALUATION_FUNCTION_NAME = re.compile(r"(^|_)(eval|evaluate|evaluation|validate|validation|val|test)(_|$)", re.I)

#: Names of the samples in one microbatch (``micro_batch_size``, ``micro_bs``): a sample count
#: divided by one counts microbatches.
#: Names of a per-epoch microbatch count (``iters_per_epoch``, ``steps_per_epoch``, ``epoch_len``): a
#: ``range`` of it around ``next(it)`` counts an epoch of a stream (a count of the whole run does not).
EPOCH_LENGTH_NAME = re.compile(r"per_?epoch|epoch_?(len|length|size|steps|iters)", re.I)

MICRO_BATCH_SIZE_NAME = re.compile(r"(^|_)micro_?(batch_?size|bs)$", re.IGNORECASE)

#: Contexts that do nothing (``contextlib.nullcontext``, last segment): the other arm of a context
#: chosen by a flag (``ctx = nullcontext if flag else accelerator.accumulate``).
NULL_CONTEXTS = frozenset({"nullcontext"})

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

# --- data parallelism: names and calls that count or place replicas (ACC403-ACC405, ACC901) ----

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

#: Names and environment variables that hold the number of processes of one node.
DEVICE_COUNT_NAME = re.compile(r"^(nproc_per_node|n?gpus_per_node|num_gpus_per_node|local_world_size)$", re.I)
DEVICE_COUNT_ENV = frozenset({"LOCAL_WORLD_SIZE"})
#: Names that count nodes (a GPU count times a node count is the world size).
NODE_COUNT_NAME = re.compile(r"^(n_?nodes|num_?nodes|node_count|num_machines|n_machines)$", re.I)
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
#: A count of the samples a group has seen so far (the counter of a sample-count gate,
#: ``seen += len(batch); if seen >= global_batch_size: ...``).
#: keywords that hand a loss function the denominator of the group (HF's ``num_items_in_batch``, a
#: total of supervised tokens): the loss it returns may be normalized by it, out of sight
DENOMINATOR_KEYWORD = re.compile(r"^(num_items_in_batch|\w*_?tokens_in_(batch|group|step)|total_\w*tokens\w*|"
                                 r"normaliz(er|ation)|denominator|global_\w*(tokens|count))$", re.IGNORECASE)
SAMPLE_COUNT_NAME = re.compile(r"^(n_|num_)?(samples|examples|seqs|sequences)(_seen|_in_group|_so_far|_acc\w*)?$|"
                               r"^(seen|n_seen|samples_seen|examples_seen|seen_samples|seen_examples)$", re.I)
#: What a sample-count gate compares with: the group's target size in samples.
SAMPLE_TARGET_NAME = re.compile(r"^target_(samples|examples|batch\w*)$|^(samples|examples)_per_(update|step|group)$",
                                re.I)
#: Effective / global batch names (A is recognised by ``ACCUMULATION_NAME``).
GLOBAL_BATCH_NAME = re.compile(
    r"^(global|total|effective|eff)_\w*batch\w*$|^tokens_per_(iter|iteration|step|update)$", re.I)
#: Any sampler class (last segment): a call of one never shards a dataset by itself.
SAMPLER_NAME = re.compile(r"Sampler$")

#: calls (functions or methods) whose result holds no autograd graph: a Python number or string, a
#: tensor cut from the graph, a NumPy copy
DETACHING_CALLS = frozenset({"item", "detach", "float", "int", "tolist", "numpy", "detach_", "len", "str"})

#: calls that pass over their first argument's items as they are (a progress bar, a count beside
#: them): ``for i, b in enumerate(tqdm(loader))`` iterates ``loader``
ITERATION_WRAPPERS = frozenset({"enumerate", "tqdm", "iter"}) | fw.fastprogress.ITERATION_WRAPPERS | \
    fw.torchvision.ITERATION_WRAPPERS


def passed_over(iterable: cst.BaseExpression) -> cst.BaseExpression | None:
    """What a loop over ``iterable`` passes over, through :data:`ITERATION_WRAPPERS`
    (``enumerate(tqdm(loader))`` → ``loader``); None where a wrapper has no positional argument."""
    while isinstance(iterable, cst.Call) and last_segment(dotted(iterable.func)) in ITERATION_WRAPPERS:
        first = positional(iterable, 0)
        if first is None:
            return None
        iterable = first
    return iterable
