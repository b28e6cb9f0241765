"""PyTorch itself (torch 2.13.0 installed sources): the constructors of the objects a training
loop uses, DDP's and FSDP's sync switches, the plain clips, the GradScaler, the schedulers'
horizon parameters, the data loader and samplers, and the process-group calls.

Named ``pytorch`` so that ``from accumlint.frameworks import pytorch`` shadows no real package.
"""

from __future__ import annotations

from accumlint.frameworks.contracts import ConfigCarrier, GroupContract, Owner, Role, Source

VERSION = "2.13.0"
#: Every version a fact of this module was read in (the installed one first).
READ_VERSIONS = (VERSION,)

#: The baseline: in a loop the user writes, the user does everything
#: (``shared/docs/framework-contracts.md`` section 0).
CONTRACT = GroupContract(
    "PyTorch", "a loop the user writes", divides=Owner.USER, divisor="", resets=Owner.USER,
    gates_update=Owner.USER, steps_scheduler=Owner.USER, clips=Owner.USER,
    sync="DDP: at forward (require_backward_grad_sync read in forward); FSDP: in the post-backward hook",
    tail=None, a_from="the user's code", packages=("torch",),
    source=Source("torch", VERSION, "nn/parallel/distributed.py; distributed/fsdp/"),
)

# --- constructors: qualified callee → role of the value it returns -------------------------

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
    "torch.utils.data.DataLoader": Role.LOADER,
    "torch.utils.data.dataloader.DataLoader": Role.LOADER,
    "torch.distributed.optim.ZeroRedundancyOptimizer": Role.OPTIMIZER,
    "torch.nn.Module": Role.MODEL,
    # `prof.step()` marks a profiler's step boundary (``profiler/profiler.py`` ``profile.step``): never an update
    "torch.profiler.profile": Role.OTHER,
    "torch.profiler.profiler.profile": Role.OTHER,
}

#: The keywords of a pipeline schedule's ``step(*args, target=None, losses=None, return_outputs=True,
#: loss_kwargs=None, **kwargs)`` (``distributed/pipelining/schedules.py``, ``PipelineScheduleSingle``
#: and ``PipelineScheduleMulti``): it runs the forward and backward of every microbatch of the batch
#: it is given, never an optimizer update; no optimizer's, LR scheduler's or scaler's ``step`` takes one.
PIPELINE_STEP_KEYWORDS = frozenset({"target", "losses", "return_outputs", "loss_kwargs"})

#: Calls that return a saved object, a checkpoint (``serialization.py``, torch 2.13.0: ``load(f,
#: map_location=None, pickle_module=None, *, weights_only=None, mmap=None, **pickle_load_args)``
#: unpickles what ``torch.save`` wrote): what a run reads from one (an epoch, an update count) is
#: where a resumed run starts, a value a fresh run does not have.
CHECKPOINT_LOADS = frozenset({"torch.load", "torch.serialization.load"})

#: Qualified-name prefixes (module → every public class in it has the role); order matters.
CONSTRUCTOR_PREFIXES: tuple[tuple[str, Role], ...] = (
    ("torch.optim.lr_scheduler.", Role.SCHEDULER),
    ("torch.optim.swa_utils.SWALR", Role.SCHEDULER),
    ("torch.optim.", Role.OPTIMIZER),  # after lr_scheduler and SWALR
)

#: ``torch.nn.Module``'s iterators over its own members (``nn/modules/module.py``, torch 2.13.0:
#: ``parameters``, ``named_parameters``, ``buffers``, ``named_buffers``, ``children``,
#: ``named_children``, ``modules``, ``named_modules``, each a generator): what ``next()`` takes from
#: one (``next(model.parameters()).device``) is a tensor or a submodule of the model, never a microbatch.
MODULE_MEMBER_ITERATORS = frozenset({
    "parameters", "named_parameters", "buffers", "named_buffers", "children", "named_children", "modules",
    "named_modules",
})

#: the iterators of ``torch.nn.Module`` over its parameters (same file and version): a loop over
#: one that tests its item (``if "head" in name:``) acts on some parameters only
PARAMETER_ITERATORS = frozenset({"parameters", "named_parameters"})

# --- gradient sync ---------------------------------------------------------------------------

#: FSDP2's ``fully_shard`` (``distributed/fsdp/_fully_shard/_fully_shard.py``): it shards the
#: module in place and its class ``FSDPModule`` has no ``no_sync``; its switch is
#: ``set_requires_gradient_sync(False)``, and ``require_backward_grad_sync`` is read by nothing.
FSDP2_SHARD_CALLS = frozenset({
    "torch.distributed.fsdp.fully_shard", "torch.distributed._composable.fsdp.fully_shard",
    "torch.distributed.fsdp._fully_shard.fully_shard", "torch.distributed._composable.fsdp.fully_shard.fully_shard",
})
FSDP2_SHARD_PARAMETER = "module"
#: FSDP1, the ``FullyShardedDataParallel`` wrapper (``distributed/fsdp/fully_sharded_data_parallel.py``),
#: and the first parameters of its ``__init__`` in order (an argument passed by position is read by them).
FSDP1_WRAPPERS = frozenset({
    "torch.distributed.fsdp.FullyShardedDataParallel",
    "torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel",
})
FSDP1_PARAMETERS = ("module", "process_group", "sharding_strategy", "cpu_offload")
#: ``CPUOffload(offload_params=...)`` (``distributed/fsdp/api.py``; its only field, default False) passed
#: as FSDP1's ``cpu_offload=``: with True the sharded parameters and their gradients live on the CPU.
#: ``cpu_offload=None`` (the default) offloads nothing.
#: Optimizers whose update does not change when every gradient is multiplied by one constant c
#: (up to ``eps``, and a coupled L2 ``weight_decay`` added to the gradient): Adam, AdamW, Adamax
#: and NAdam divide the first moment by the root of the second (``optim/adam.py``,
#: ``adamw.py``, ``adamax.py``, ``nadam.py``), Adagrad and RMSprop the gradient by the root of
#: its squares (``adagrad.py``, ``rmsprop.py``), Rprop uses its sign (``rprop.py``). Left out:
#: RAdam (its first steps, while the variance is not tractable, apply the moment unnormalised).
#: An undivided sum of A gradients changes nothing for them but an absolute clip threshold.
SCALE_INVARIANT_OPTIMIZERS = frozenset({"Adam", "AdamW", "Adamax", "NAdam", "Adagrad", "RMSprop", "Rprop"})
#: Where a ``torch.optim`` optimizer's constructor takes its learning rate: the keyword ``lr``,
#: else the second positional argument (``SGD(params, lr=1e-3, ...)``, ``optim/sgd.py``; the
#: same in every optimizer of ``torch.optim``).
OPTIMIZER_LR_KEYWORD = "lr"
OPTIMIZER_LR_POSITION = 1

CPU_OFFLOAD = ConfigCarrier(
    "CPUOffload", "offload_params", 0, "offload_params", "cpu_offload",
    Source("torch", VERSION, "distributed/fsdp/api.py CPUOffload"),
)
CPU_OFFLOAD_DEFAULT = False
#: Whether FSDP1 with parameter offload sums the gradients of backwards run outside ``no_sync()``:
#: it does not. The "Limitations" of ``FullyShardedDataParallel``'s docstring say FSDP then uses the
#: newly reduced gradient instead of adding it to the existing one; ``FlatParamHandle.
#: prepare_gradient_for_backward`` keeps the CPU gradient aside and leaves the addition undone (a TODO:
#: a CPU tensor and a device tensor cannot be added in the post-backward hook). Inside ``no_sync()``
#: the unsharded gradients accumulate on the device and are offloaded after the group's synced backward.
FSDP1_OFFLOAD_ACCUMULATES_OUTSIDE_NO_SYNC = False
FSDP1_OFFLOAD_SOURCE = Source(
    "torch", VERSION, "distributed/fsdp/fully_sharded_data_parallel.py FullyShardedDataParallel (Limitations); "
    "distributed/fsdp/_flat_param.py FlatParamHandle.prepare_gradient_for_backward",
)
#: DDP's sync switches (``nn/parallel/distributed.py``): the context and the flag it flips.
DDP_NO_SYNC_METHOD = "no_sync"
DDP_SYNC_FLAG = "require_backward_grad_sync"
#: DDP's communication hook (``nn/parallel/distributed.py`` ``register_comm_hook(state, hook)``):
#: the hook computes what each synchronized gradient bucket becomes (it may rescale it, by A too);
#: the stock hooks of ``distributed/algorithms/ddp_comm_hooks/default_hooks.py`` average by the world
#: size only.
REGISTER_COMM_HOOK = "register_comm_hook"
STOCK_COMM_HOOKS = frozenset({"allreduce_hook", "fp16_compress_hook", "bf16_compress_hook"})
#: DDP decides at forward time (reducer armed in forward); FSDP reads its flag in the
#: post-backward hook, so forward placement does not matter there.
FORWARD_DECIDES_SYNC = frozenset({Role.DDP_MODEL})
#: the calls that wrap a model for data parallelism (``nn/parallel/distributed.py``,
#: ``distributed/fsdp/``): a project helper that calls one makes its callers' models averaging
WRAPPER_CONSTRUCTOR_NAMES = frozenset({"DistributedDataParallel", "FullyShardedDataParallel", "FSDP", "fully_shard"})
#: wrappers whose result, called, runs the module (or function) given as the first argument:
#: ``torch.compile`` (``_dynamo/eval_frame.py`` OptimizedModule forwards to ``_orig_mod``), DDP and
#: DataParallel (``forward`` calls ``self.module``), FSDP1 (``forward`` calls the wrapped module),
#: FSDP2 ``fully_shard`` (returns the module itself, sharded in place)
FORWARD_WRAPPERS = frozenset({
    "torch.compile",
    "torch.nn.DataParallel", "torch.nn.parallel.DataParallel", "torch.nn.parallel.data_parallel.DataParallel",
    "torch.nn.parallel.DistributedDataParallel", "torch.nn.parallel.distributed.DistributedDataParallel",
    "torch.distributed.fsdp.FullyShardedDataParallel",
    "torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel",
    *FSDP2_SHARD_CALLS,
})
#: Switches that change what a wrapper does with the replicas' gradients (DDP
#: ``register_comm_hook``; FSDP1/FSDP2 divide factors): with one, the average is not known.
AVERAGING_OVERRIDES = frozenset({"register_comm_hook", "gradient_divide_factor", "set_gradient_divide_factor",
                                 "set_reduce_scatter_divide_factor", "gradient_predivide_factor"})

# --- clipping and the gradient scaler ----------------------------------------------------------

#: Clips that act on plain ``.grad`` without unscaling: ``nn/utils/clip_grad.py``
#: (qualified-name prefix) and FSDP1's ``FullyShardedDataParallel.clip_grad_norm_``
#: (``distributed/fsdp/fully_sharded_data_parallel.py``).
PLAIN_CLIP_PREFIX = "torch.nn.utils."
#: The clip functions of ``nn/utils/clip_grad.py`` (torch 2.13.0), each taking the parameters
#: first: ``clip_grads_with_norm_(parameters, max_norm, total_norm)`` scales by a norm computed
#: apart (``get_total_norm``), as FSDP2 and tensor-parallel code do; ``clip_grad_norm`` is the
#: deprecated spelling of ``clip_grad_norm_``.
CLIP_FUNCTIONS = frozenset({"clip_grad_norm_", "clip_grad_value_", "clip_grad_norm", "clip_grads_with_norm_"})
#: Those that clip through another of them (``clip_grad_norm`` calls ``clip_grad_norm_``): a probe
#: that patches the others sees their clips once.
CLIP_ALIASES = frozenset({"clip_grad_norm"})
PLAIN_CLIP_OWNERS = frozenset({Role.FSDP_MODEL})
#: ``GradScaler(enabled=...)``: a disabled scaler returns the loss unscaled and its ``unscale_``
#: and ``update`` do nothing (``amp/grad_scaler.py``).
SCALER_ENABLED_KEYWORD = "enabled"

# --- schedulers: the parameters that size them ---------------------------------------------------

#: ``optim/lr_scheduler.py``: parameters that size a schedule (horizon or warmup, in scheduler steps).
SCHEDULE_HORIZON_KEYWORDS = frozenset({"T_max", "T_0", "total_steps", "steps_per_epoch", "total_iters"})
SCHEDULE_HORIZON_POSITIONS: dict[str, dict[int, str]] = {
    "CosineAnnealingLR": {1: "T_max"},
    "CosineAnnealingWarmRestarts": {1: "T_0"},
    "OneCycleLR": {2: "total_steps", 4: "steps_per_epoch"},
    "PolynomialLR": {1: "total_iters"},
    "LinearLR": {3: "total_iters"},
}

# --- data parallelism: processes, loaders, samplers, reductions ------------------------------------

#: ``distributed/distributed_c10d.py`` ``init_process_group``: the module runs as several processes.
PROCESS_GROUP_INIT = frozenset({"init_process_group"})
#: Single-process replication (``nn/parallel/data_parallel.py``): one process splits the
#: loader's batch over the visible GPUs, so there the GPU count *is* the replica count.
SINGLE_PROCESS_REPLICATION = frozenset({
    "torch.nn.DataParallel", "torch.nn.parallel.DataParallel", "torch.nn.parallel.data_parallel.DataParallel",
})
#: torch's DataLoader, whose sampler decides what each replica reads (``utils/data/dataloader.py``);
#: positional order of its first parameters.
TORCH_DATALOADERS = frozenset({"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"})
DATALOADER_PARAMETERS = ("dataset", "batch_size", "shuffle", "sampler", "batch_sampler")
#: Samplers that hand every replica the whole dataset (``utils/data/sampler.py``: none of them
#: reads a rank), by last segment; ``BatchSampler`` wraps its first argument.
LOCAL_SAMPLERS = frozenset({"RandomSampler", "SequentialSampler", "WeightedRandomSampler"})
BATCH_SAMPLER_WRAPPERS = frozenset({"BatchSampler"})
#: Map-style datasets: with no sampler every replica reads all of them. ``shuffle=True`` also
#: proves a map-style dataset (``dataloader.py`` raises for an IterableDataset).
MAP_STYLE_DATASETS = frozenset({"torch.utils.data.TensorDataset", "torch.utils.data.dataset.TensorDataset"})
MAP_STYLE_PREFIXES = ("torchvision.datasets.",)
MAP_STYLE_BASES = frozenset({"Dataset", "TensorDataset"})  # last segment of a local class's base
#: ``cuda/__init__.py`` ``device_count`` (``torch.xpu``/``torch.accelerator`` and DeepSpeed's
#: ``get_accelerator()`` have the same method): the GPUs of this node.
DEVICE_COUNT_CALLS = frozenset({"device_count"})
#: The whole world size (every process, data-parallel or not): ``distributed_c10d.get_world_size
#: (group=None)`` and torchrun's ``WORLD_SIZE``.
WORLD_SIZE_CALLS = frozenset({"get_world_size"})
WORLD_SIZE_ENV = frozenset({"WORLD_SIZE"})
#: Reductions whose result is the sum over replicas, in place: ``distributed_c10d.all_reduce
#: (tensor, op=ReduceOp.SUM)``.
IN_PLACE_SUM = frozenset({"all_reduce"})
#: the token losses whose reduction decides a mean of means (``nn/functional.py``): a project
#: module that calls one may return the loss a caller divides by A
TOKEN_LOSS_CALLS = frozenset({"cross_entropy", "nll_loss"})
#: Losses whose ``reduction`` defaults to ``"mean"``: a mean over the elements of the batch they
#: are given, one microbatch on one replica (``nn/functional.py`` functions, ``nn/modules/loss.py``
#: classes; ``cross_entropy``/``nll_loss`` skip ``ignore_index`` in the count).
MEAN_DEFAULT_LOSSES = frozenset({
    "cross_entropy", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "binary_cross_entropy",
    "binary_cross_entropy_with_logits", "CrossEntropyLoss", "NLLLoss", "MSELoss", "L1Loss", "SmoothL1Loss",
    "HuberLoss", "BCELoss", "BCEWithLogitsLoss",
})
#: BatchNorm layers (``nn/modules/batchnorm.py``): statistics per forward pass.
BATCHNORM_CLASSES = frozenset({"BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm",
                               "LazyBatchNorm1d", "LazyBatchNorm2d", "LazyBatchNorm3d"})
#: In-place rescales of gradients (tensor ``mul_``/``div_``; ``_foreach_mul_``/``_foreach_div_``):
#: a replica count among their arguments undoes (or changes) the wrapper's average.
IN_PLACE_RESCALES = frozenset({"mul_", "div_", "_foreach_mul_", "_foreach_div_"})
#: Gathers of every replica's tensors (``distributed_c10d.gather`` / ``all_gather``).
GATHERS = frozenset({"gather", "all_gather"})
#: ``no_sync()`` of DDP, FSDP1 and of a model of unknown wrapper.
NO_SYNC_ROLES = (Role.DDP_MODEL, Role.MODEL, Role.FSDP_MODEL)

#: ``torch.optim.swa_utils.AveragedModel.update_parameters(model)`` (``optim/swa_utils.py``): one
#: averaging step of the weights, meant to run once per optimizer update.
SWA_UPDATE_HOOK = "update_parameters"

#: checks of a tensor's (or number's) finiteness, and what each gives when every value is finite: a
#: branch on one is an exceptional path (torch 2.13.0 ``torch.isfinite``/``isnan``/``isinf``/``isposinf``/
#: ``isneginf``, also as tensor methods; Python's ``math`` functions of the same names)
NON_FINITE_CHECKS: dict[str, bool] = {"isfinite": True, "isnan": False, "isinf": False, "isposinf": False,
                                      "isneginf": False}

#: ``nn.Module`` methods that switch the training mode (torch 2.13.0 ``nn/modules/module.py``:
#: ``train(mode=True)``, ``eval()``): on a model, ``model.train()`` is this, not a project's ``train``
MODULE_MODE_METHODS = frozenset({"train", "eval"})

#: tensor methods whose result leaves the autograd graph (torch 2.13.0 ``_tensor.py``: ``detach``
#: returns a tensor outside the graph; ``item``, ``tolist`` and ``numpy`` return Python or NumPy values)
GRAPH_CUTTING_METHODS = frozenset({"detach", "item", "tolist", "numpy"})
#: tensor methods whose result never requires grad: autograd tracks only floating and complex
#: tensors, and these return sizes, counts, booleans or integers
NON_DIFFERENTIABLE_RESULTS = frozenset({
    "numel", "count_nonzero", "size", "ne", "eq", "lt", "le", "gt", "ge", "isnan", "isinf", "isfinite",
    "logical_not", "logical_and", "logical_or", "argmax", "argmin", "bool", "long", "int", "nonzero",
})
