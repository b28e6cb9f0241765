"""Hugging Face Accelerate (accelerate 1.15.0: ``accelerator.py``, ``optimizer.py``,
``scheduler.py``, ``data_loader.py``, ``utils/dataclasses.py``): ``Accelerator.backward``
divides by the configured A; inside ``accumulate()`` prepared optimizers and schedulers act on
the sync microbatch only.
"""

from __future__ import annotations

from accumlint.frameworks.contracts import (
    BackwardContract,
    ConfigCarrier,
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

VERSION = "1.15.0"
#: Every version a fact of this module was read in (the installed one first).
READ_VERSIONS = (VERSION,)

CONTRACT = GroupContract(
    "Accelerate", "Accelerator(gradient_accumulation_steps=A) + accumulate() + accelerator.backward",
    divides=Owner.FRAMEWORK, divisor="A", resets=Owner.USER, gates_update=Owner.FRAMEWORK,
    steps_scheduler=Owner.USER, clips=Owner.USER,
    sync="at the entry of accumulate(): no_sync around the whole body off the boundary",
    tail=TailTreatment.WEIGHTED, a_from="Accelerator(gradient_accumulation_steps=) or its plugin's num_steps",
    packages=("accelerate",),
    source=Source("accelerate", VERSION, "accelerator.py accumulate/_do_sync; optimizer.py; scheduler.py"),
)

CONSTRUCTORS: dict[str, Role] = {
    "accelerate.Accelerator": Role.ACCELERATOR,
    "accelerate.accelerator.Accelerator": Role.ACCELERATOR,
}

#: Prepared loaders that read their ``base_dataloader`` one batch ahead of the loop, to know when
#: they yield the last batch (``data_loader.py`` ``DataLoaderShard.__iter__``: "We iterate one batch
#: ahead to check when we are at the end"): the inner loader's iterator runs a batch early, and its
#: end comes before the loop's last batch. ``DataLoaderDispatcher`` does not.
READ_AHEAD_LOADERS = frozenset({"DataLoaderShard"})
#: How the loop's epoch shows on such a loader (``DataLoaderShard.__iter__`` and
#: ``DataLoaderStateMixin``, ``data_loader.py``): its ``end_of_dataloader`` turns True when the inner
#: iterator ran out (the loop then holds the epoch's last batch); its ``end()`` is called when the loop
#: asks for a batch after the last, before its iteration stops (the loop's epoch end); its
#: ``skip_batches`` first batches are read but never yielded (a resumed epoch).
READ_AHEAD_LAST_FLAG = "end_of_dataloader"
READ_AHEAD_END_METHOD = "end"
READ_AHEAD_SKIP = "skip_batches"

#: Prepared loaders whose ``__class__`` answers the wrapped DataLoader's class (``data_loader.py``
#: ``DataLoaderAdapter.__class__``, a property): ``isinstance(shard, DataLoader)`` holds while
#: ``type(shard)`` is no DataLoader subclass. Module and class names of the base of such wrappers.
LOADER_ADAPTERS = (("accelerate.data_loader", "DataLoaderAdapter"),)

#: ``Accelerator(gradient_accumulation_steps=)``: the value passed is A whatever its name.
ACCUMULATION_KEYWORD = "gradient_accumulation_steps"
#: ``with accelerator.accumulate(model):``: the context that gates the group.
ACCUMULATE_METHOD = "accumulate"
#: ``Accelerator.accumulate(self, *models)`` (accelerator.py): every model passed is entered in
#: ``no_sync(m)`` off the boundary (its DDP all-reduce deferred to the sync microbatch); a prepared
#: model left out all-reduces on every backward that reaches it. Several models in one call are
#: accepted (read in the installed accelerate 1.15.0).
ACCUMULATE_SIGNATURE = Source("accelerate", VERSION, "accelerator.py Accelerator.accumulate(self, *models)")
#: ``Accelerator(gradient_accumulation_plugin=)``: A configured through a plugin object.
PLUGIN_KEYWORD = "gradient_accumulation_plugin"

#: ``GradientAccumulationPlugin(num_steps=A)`` (``utils/dataclasses.py``; ``num_steps`` is its
#: first field) passed as ``Accelerator(gradient_accumulation_plugin=...)`` configures A.
ACCUMULATION_PLUGIN = ConfigCarrier(
    "GradientAccumulationPlugin", "num_steps", 0, ACCUMULATION_KEYWORD, PLUGIN_KEYWORD,
    Source("accelerate", VERSION, "utils/dataclasses.py GradientAccumulationPlugin"),
)

BACKWARD = BackwardContract(
    Role.ACCELERATOR, "backward", Normalizes.IF_CONFIGURED, None, "Accelerate",
    f"accelerate {VERSION} accelerator.py Accelerator.backward: loss / gradient_accumulation_steps "
    "(every backend but DeepSpeed, where the engine divides by its own GAS)",
)

#: Inside ``accumulate()``, a *prepared* optimizer's ``step``/``zero_grad`` and a prepared
#: scheduler's ``step`` act only on the sync microbatch (``optimizer.py``, ``scheduler.py``).
#: ``nn.Module.zero_grad`` and unprepared objects are never gated.
GATED_ROLES = frozenset({Role.OPTIMIZER, Role.SCHEDULER})
#: The boundary flag (``accelerator.sync_gradients``; ``gradient_state.sync_gradients``): False
#: on the microbatches inside ``accumulate()`` that do not end a group.
SYNC_FLAG = "sync_gradients"
BOUNDARY_ATTRS = frozenset({SYNC_FLAG})
#: ``accelerator.no_sync(model)``: a sync switch decided at forward time (over DDP).
NO_SYNC_ROLES = (Role.ACCELERATOR,)
FORWARD_DECIDES_SYNC = frozenset({Role.ACCELERATOR})

#: ``clip_grad_norm_``/``clip_grad_value_`` call ``unscale_gradients()`` (fp16 with native AMP;
#: a no-op otherwise) on every call, with no sync guard.
UNSCALING_CLIP_OWNERS = frozenset({Role.ACCELERATOR})
#: ``Accelerator.unscale_gradients(optimizer=None)``: a no-op unless fp16 with native AMP.
UNSCALE_METHOD = "unscale_gradients"
#: Keywords that select the DeepSpeed backend, where ``accelerator.clip_grad_norm_`` only
#: returns the engine's norm and clips nothing (``clip_grad_norm_``, DeepSpeed branch; the
#: engine clips at its boundary from its config).
DEEPSPEED_KEYWORDS = ("deepspeed_plugin", "deepspeed_plugins")

#: The reference driver (``accelerator.py`` ``accumulate``/``_do_sync``: each entry of
#: ``accumulate()`` sets ``sync_gradients`` to ``step % A == 0`` after ``step += 1``, or, at a
#: prepared loader's last batch (``end_of_dataloader`` with ``sync_with_dataloader``, the
#: default), to True with ``step = 0``; off the boundary the body runs under ``no_sync(model)``;
#: ``optimizer.py``/``scheduler.py``: a prepared optimizer's ``step``/``zero_grad`` and a prepared
#: scheduler's ``step`` return without acting while ``sync_gradients`` is False).
DRIVER = CountingDriver(
    "Accelerate", Role.ACCELERATOR, ACCUMULATION_KEYWORD, 1, ACCUMULATE_METHOD, SYNC_FLAG, "prepare",
    frozenset({(Role.OPTIMIZER, "step"), (Role.OPTIMIZER, "zero_grad"), (Role.SCHEDULER, "step")}),
    loader_end_syncs=True, no_sync_off_boundary=True, other_backends=DEEPSPEED_KEYWORDS,
    source=Source("accelerate", VERSION, "accelerator.py accumulate/_do_sync; optimizer.py; scheduler.py"),
)

TAILS: dict[str, FrameworkTail] = {
    "accelerate-prepared-loader": FrameworkTail(
        "Accelerate", TailTreatment.WEIGHTED,
        f"accelerate {VERSION} accelerator.py _do_sync: sync_with_dataloader syncs at end_of_dataloader; "
        "backward still divides by A"),
    "accelerate-unprepared-loader": FrameworkTail(
        "Accelerate", TailTreatment.MERGED,
        f"accelerate {VERSION} accelerator.py _do_sync: without a prepared loader the step counter runs on"),
}

LOADER_SHARDING: tuple[LoaderSharding, ...] = (
    LoaderSharding("Accelerate", "prepare", None,
                   f"accelerate {VERSION} data_loader.py prepare_data_loader: BatchSamplerShard / "
                   "IterableDatasetShard over num_processes"),
    LoaderSharding("Accelerate", "prepare_data_loader", None, f"accelerate {VERSION} data_loader.py"),
)

#: ``Accelerator.reduce(tensor, reduction="sum")``: returns the sum over replicas by default.
RETURNED_REDUCTIONS = frozenset({"reduce"})
SUM_DEFAULT_REDUCTIONS = frozenset({"reduce"})
#: ``gather`` / ``gather_for_metrics``: every replica's values.
GATHERS = frozenset({"gather", "gather_for_metrics"})
