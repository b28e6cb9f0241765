"""DeepSpeed (deepspeed 0.19.8 ``runtime/engine.py``; scheduler and loader facts read in
deepspeedai master @edaa722, 0.19.6): the engine divides by its GAS, resets after the boundary
update and steps its own scheduler; ``engine.step()`` must run after every microbatch.
"""

from __future__ import annotations

from accumlint.frameworks.contracts import (
    BackwardContract,
    CountingDriver,
    FrameworkTail,
    GroupContract,
    LoaderSharding,
    Normalizes,
    Owner,
    Role,
    Source,
    TailTreatment,
)

VERSION = "0.19.8"
#: Every version a fact of this module was read in (the installed one first).
#: 0.19.6: deepspeedai master @edaa722, read for the scheduler and loader facts.
READ_VERSIONS = (VERSION, "0.19.6")

CONTRACT = GroupContract(
    "DeepSpeed", "DeepSpeedEngine, managed accumulation (the default)",
    divides=Owner.FRAMEWORK, divisor="A (gradient_accumulation_steps of the config)", resets=Owner.FRAMEWORK,
    gates_update=Owner.FRAMEWORK, steps_scheduler=Owner.FRAMEWORK, clips=Owner.FRAMEWORK,
    sync="ZeRO 0/1: in the boundary backward only; ZeRO 2/3: every backward",
    tail=TailTreatment.MERGED, a_from='the config\'s "gradient_accumulation_steps"', packages=("deepspeed",),
    source=Source("deepspeed", VERSION, "runtime/engine.py backward/step/is_gradient_accumulation_boundary"),
)

BACKWARD = BackwardContract(
    Role.ENGINE, "backward", Normalizes.ALWAYS, "scale_wrt_gas", "DeepSpeed",
    f"deepspeed {VERSION} runtime/engine.py DeepSpeedEngine.backward(scale_wrt_gas=True) scales by 1/GAS",
)

#: The package (the ``owner`` of the objects ``initialize`` returns) and its entry point, which
#: returns ``(engine, optimizer, training_dataloader, lr_scheduler)`` (``deepspeed/__init__.py``).
PACKAGE = "deepspeed"
INITIALIZE = "deepspeed.initialize"
INITIALIZE_RETURNS = (Role.ENGINE, Role.OPTIMIZER, Role.LOADER, Role.SCHEDULER)
#: The config key that holds A.
ACCUMULATION_KEY = "gradient_accumulation_steps"
#: The engine resets gradients after the boundary update, so a loop with ``engine.step()`` needs
#: no reset of its own; ``engine.step()`` must run after every microbatch (managed mode, the
#: default) and only acts at the boundary.
BOUNDARY_CALLS = frozenset({"is_gradient_accumulation_boundary"})
#: ``"managed_gradient_accumulation": False`` turns the engine's own accounting off (0.19.x).
UNMANAGED_KEY = "managed_gradient_accumulation"
#: The engine told the boundary by hand before each backward (``set_gradient_accumulation_boundary``):
#: its own micro-step counter no longer decides, so ``engine.step()`` may run on the boundary only.
MANUAL_BOUNDARY_CALLS = frozenset({"set_gradient_accumulation_boundary"})
#: The engine's own counters (``DeepSpeedEngine.__init__``), advanced only by the engine: ``step()``
#: adds one to ``micro_steps`` after every microbatch, and ``is_gradient_accumulation_boundary()`` is
#: ``(micro_steps + 1) % gradient_accumulation_steps() == 0`` unless the boundary was set by hand;
#: ``_take_model_step`` adds one to ``global_steps`` per update (the engine's update count, which its
#: checkpoint tags, ``steps_per_print`` and monitors read; ``load_checkpoint`` restores it).
#: A write by user code inside the loop moves the boundary or the update count. Source: deepspeed
#: 0.19.8 ``runtime/engine.py``.
#: Each counter → (what it is to the engine, what a write in the loop does).
#: the engine's count of microbatches, from which ``is_gradient_accumulation_boundary()`` decides
MICRO_STEPS = "micro_steps"
ENGINE_COUNTERS: dict[str, tuple[str, str]] = {
    MICRO_STEPS: ("the engine's micro-step counter, from which it decides its accumulation boundary "
                    "((micro_steps + 1) % A == 0)",
                    "the boundary moves: with A > 1 it never comes (no update) or comes at the wrong microbatch"),
    "global_steps": ("the engine's count of applied updates (its checkpoint tags, curriculum and logging read it)",
                     "it stops counting updates: checkpoints are tagged, and resumed, at the wrong update"),
}
#: ``engine.no_sync()`` exists (ZeRO 0/1) and skips the all-reduce.
NO_SYNC_ROLES = (Role.ENGINE,)
#: ``DeepSpeedEngine.step(self, lr_kwargs=None)`` takes no positional argument in use (the
#: keyword is passed by name): an object whose ``step`` is handed one (``x.step(optimizer)``) is
#: no engine. Source: deepspeed 0.19.6 ``runtime/engine.py`` (``DeepSpeedEngine.step``).
STEP_POSITIONALS = 0

#: ``deepspeed.initialize(lr_scheduler=...)``: the engine keeps the client scheduler (or builds
#: one from the config's ``"scheduler"`` section when none is passed) and steps it inside
#: ``engine.step()`` on every accumulation boundary whose update was not skipped for overflow.
#: Source: deepspeed 0.19.6 (deepspeedai master @edaa722) ``runtime/engine.py``
#: (``_configure_lr_scheduler``; ``step`` → ``_take_model_step`` → ``self.lr_scheduler.step()``)
#: and ``runtime/constants.py`` (``SCHEDULER = "scheduler"``).
SCHEDULER_KEYWORD = "lr_scheduler"
SCHEDULER_POSITION = 5  # initialize(args, model, optimizer, model_parameters, training_data, lr_scheduler, …)
CONFIG_KEYWORDS = ("config", "config_params")
SCHEDULER_CONFIG_KEY = "scheduler"

TAILS: dict[str, FrameworkTail] = {
    "deepspeed": FrameworkTail(
        "DeepSpeed", TailTreatment.MERGED,
        f"deepspeed {VERSION} runtime/engine.py is_gradient_accumulation_boundary: (micro_steps + 1) % GAS"),
}

LOADER_SHARDING: tuple[LoaderSharding, ...] = (
    LoaderSharding("DeepSpeed", "deepspeed.initialize", "training_data",
                   f"deepspeed {READ_VERSIONS[1]} runtime/engine.py deepspeed_io -> runtime/dataloader.py "
                   "DeepSpeedDataLoader: "
                   "DistributedSampler(num_replicas=data_parallel_world_size, rank=data_parallel_rank) when "
                   "local_rank >= 0 and no data_sampler is given"),
)

#: ``deepspeed.ops.adam.*``: optimizers.
CONSTRUCTOR_PREFIXES: tuple[tuple[str, Role], ...] = (("deepspeed.ops.adam.", Role.OPTIMIZER),)
#: ``comm/comm.py`` ``init_distributed`` (0.19.6), which calls torch's ``init_process_group``.
PROCESS_GROUP_INIT = frozenset({"init_distributed"})

#: The reference driver (deepspeed 0.19.8 ``runtime/engine.py``; read in 0.19.6, deepspeedai master
#: @edaa722): ``step()`` asks ``is_gradient_accumulation_boundary()`` — ``(micro_steps + 1) % GAS == 0``
#: unless the boundary was set by hand — and only there runs ``_take_model_step``: the optimizer's
#: update, the gradient reset (``zero_grad``), then the step of the scheduler the engine holds
#: (``lr_scheduler``, unless the update was skipped for overflow); after it, whatever the boundary,
#: ``micro_steps += 1``. Nothing resets ``micro_steps`` at a loader's end: groups run across epochs.
#: The engine comes out of ``initialize`` (the first of its tuple); A is the config's
#: ``gradient_accumulation_steps``.
DRIVER = CountingDriver(
    "DeepSpeed", Role.ENGINE, ACCUMULATION_KEY, None, None, next(iter(BOUNDARY_CALLS)), None, frozenset(),
    loader_end_syncs=False, no_sync_off_boundary=False, other_backends=(),
    source=Source("deepspeed", VERSION, "runtime/engine.py step/_take_model_step/is_gradient_accumulation_boundary"),
    counts="step", performs=("step", "zero_grad"), flag_call=True, builder=INITIALIZE, returns=INITIALIZE_RETURNS,
    config_keywords=CONFIG_KEYWORDS, scheduler=(SCHEDULER_KEYWORD, SCHEDULER_POSITION),
    scheduler_key=SCHEDULER_CONFIG_KEY, unmanaged=(UNMANAGED_KEY, False), manual_calls=MANUAL_BOUNDARY_CALLS,
    counters=frozenset(ENGINE_COUNTERS), count=MICRO_STEPS,
)
