"""PyTorch Lightning and Lightning Fabric (lightning 2.6.6 installed; hooks and scheduler
stepping read in master @7f0c343, 2.6.2): under automatic optimization the Trainer divides by
``accumulate_grad_batches``, resets, updates and steps the schedulers; Fabric divides nothing.
"""

from __future__ import annotations

from accumlint.frameworks.contracts import (
    BackwardContract,
    FrameworkTail,
    GroupContract,
    LoaderSharding,
    Normalizes,
    Owner,
    Role,
    Source,
    TailTreatment,
)

VERSION = "2.6.6"
#: Every version a fact of this module was read in (the installed one first).
#: 2.6.2: master @7f0c343, read for the hooks and the scheduler stepping.
READ_VERSIONS = (VERSION, "2.6.2")

CONTRACT = GroupContract(
    "Lightning", "Trainer(accumulate_grad_batches=A), automatic optimization",
    divides=Owner.FRAMEWORK, divisor="A", resets=Owner.FRAMEWORK, gates_update=Owner.FRAMEWORK,
    steps_scheduler=Owner.FRAMEWORK, clips=Owner.FRAMEWORK,
    sync="no_sync around forward and backward off the boundary", tail=TailTreatment.WEIGHTED,
    a_from="Trainer(accumulate_grad_batches=)", packages=("lightning", "pytorch_lightning"),
    source=Source("lightning", VERSION, "pytorch/loops/optimization/automatic.py; loops/training_epoch_loop.py"),
)
FABRIC_CONTRACT = GroupContract(
    "Lightning Fabric", "Fabric.backward (and manual optimization)",
    divides=Owner.USER, divisor="", resets=Owner.USER, gates_update=Owner.USER, steps_scheduler=Owner.USER,
    clips=Owner.USER, sync="fabric.no_backward_sync(model) at forward", tail=None, a_from="the user's code",
    packages=("lightning_fabric",),
    source=Source("lightning", VERSION, "fabric/fabric.py Fabric.backward"),
)

CONSTRUCTORS: dict[str, Role] = {
    "lightning.Fabric": Role.FABRIC,
    "lightning.fabric.Fabric": Role.FABRIC,
    "lightning_fabric.Fabric": Role.FABRIC,
}

#: ``Trainer(accumulate_grad_batches=)``: the value passed is A whatever its name.
ACCUMULATION_KEYWORD = "accumulate_grad_batches"

BACKWARD = BackwardContract(
    Role.FABRIC, "backward", Normalizes.NEVER, None, "Lightning Fabric",
    f"lightning {VERSION} fabric.py Fabric.backward: no division",
)

#: Lightning accessors inside a LightningModule.
ACCESSORS: dict[str, Role] = {"self.optimizers()": Role.OPTIMIZER, "self.lr_schedulers()": Role.SCHEDULER}
#: LightningModule hooks where automatic optimization owns normalization, reset, update
#: (``loops/optimization/automatic.py``: loss / accumulate_grad_batches); last segment of the base.
MODULE_BASES = frozenset({"LightningModule"})
#: ``core/module.py``: ``automatic_optimization`` defaults to True; this attribute turns it off.
AUTOMATIC_OPTIMIZATION_ATTR = "automatic_optimization"
#: Methods called once per microbatch, read as the body of that loop (``loops/optimization``:
#: automatic and manual optimization both call training_step per batch).
MICROBATCH_HOOKS = frozenset({"training_step"})
#: The LightningModule hooks the fit loop calls for every batch, so for every microbatch under
#: ``accumulate_grad_batches`` (lightning 2.6.6 ``loops/training_epoch_loop.py`` ``advance``:
#: ``on_train_batch_start``, the batch's ``training_step`` and its backward hooks, then
#: ``on_train_batch_end``; the optimizer-step hooks run at the group's boundary only).
BATCH_HOOKS = MICROBATCH_HOOKS | {"on_train_batch_start", "on_train_batch_end", "on_before_backward",
                                  "on_after_backward"}
#: where Lightning passes ``training_step`` the batch's index, counting ``self``: the argument
#: after ``batch``, whatever it is named, 0 at each epoch's first batch (lightning 2.6.6
#: ``loops/training_epoch_loop.py`` ``advance``: ``batch_idx = self.batch_idx + 1`` with
#: ``batch_idx`` the epoch's ``batch_progress.current.ready - 1``; ``_build_kwargs``: two arguments
#: after ``self`` are the batch and ``batch_idx``)
BATCH_INDEX_POSITION = 2
#: LightningModule hooks the evaluation and prediction loops call with the module in eval mode
#: and under ``torch.no_grad``/``torch.inference_mode`` (``loops/utilities.py`` ``_no_grad_context``
#: wraps ``_EvaluationLoop.run`` and ``_PredictionLoop.run``): what they compute is never
#: backpropagated.
EVALUATION_HOOKS = frozenset({"validation_step", "test_step", "predict_step"})
#: ``core/module.py`` ``manual_backward``: the backward under manual optimization.
MANUAL_BACKWARD = "manual_backward"
#: ``LightningModule.clip_gradients(optimizer, ...)``: a clip (through the precision plugin).
CLIP_METHOD = "clip_gradients"

#: ``Fabric.no_backward_sync(model)``: decided at forward time (over DDP).
NO_SYNC_METHOD = "no_backward_sync"
NO_SYNC_ROLES = (Role.FABRIC,)
FORWARD_DECIDES_SYNC = frozenset({Role.FABRIC})
#: ``fabric/strategies/strategy.py`` ``clip_gradients_norm``/``clip_gradients_value`` call
#: ``precision.unscale_gradients(optimizer)``.
UNSCALING_CLIP_OWNERS = frozenset({Role.FABRIC})

#: Under automatic optimization Lightning steps every scheduler that ``configure_optimizers``
#: returns (once per optimizer update with ``interval="step"``, once per epoch by default)
#: through the ``lr_scheduler_step`` hook; under manual optimization it steps none.
#: Source: lightning 2.6.2 (master @7f0c343) ``pytorch/loops/training_epoch_loop.py``
#: ``_update_learning_rates`` (returns early unless ``automatic_optimization``).
CONFIGURE_OPTIMIZERS = "configure_optimizers"
SCHEDULER_STEP_HOOK = "lr_scheduler_step"  # overriding it hands the stepping to the user
SCHEDULER_KEYS = frozenset({"lr_scheduler", "scheduler"})  # dict keys of the returned config
#: LightningModule hooks that run during the fit loop (per batch or per epoch): a scheduler
#: step there runs in addition to Lightning's own (lightning 2.6.2 ``pytorch/core/hooks.py``).
TRAINING_HOOKS = frozenset({
    "training_step", "on_train_batch_start", "on_train_batch_end", "on_before_backward", "on_after_backward",
    "on_before_optimizer_step", "optimizer_step", "on_train_epoch_start", "on_train_epoch_end",
})

#: ``LRSchedulerConfig.interval`` (lightning 2.6.6 ``pytorch/utilities/types.py``: ``interval: str =
#: "epoch"``): a scheduler returned bare, in ``[opt], [sched]`` or in a config dict without the key
#: is stepped once per epoch; only ``"step"`` (once per optimizer update) and ``"epoch"`` are
#: accepted (``pytorch/core/optimizer.py`` ``_configure_schedulers_automatic_opt``; stepped by
#: ``loops/training_epoch_loop.py`` ``update_lr_schedulers("step"/"epoch")``).
SCHEDULER_INTERVAL_KEY = "interval"
SCHEDULER_DEFAULT_INTERVAL = "epoch"
SCHEDULER_UPDATE_INTERVAL = "step"
#: Trainer attributes that count optimizer updates or batches, never epochs, with what one unit
#: of each is (lightning 2.6.6 ``pytorch/trainer/trainer.py``): ``estimated_stepping_batches``
#: ("the estimated number of batches that will optimizer.step() during training", accumulation
#: counted) and ``max_steps`` (``fit_loop.max_steps``, compared with ``global_step``, "the number
#: of optimizer steps taken") count optimizer updates; ``num_training_batches``
#: (``fit_loop.max_batches``) counts the batches of an epoch, one microbatch each.
TRAINER_COUNT_UNITS = {"estimated_stepping_batches": "update", "max_steps": "update",
                       "num_training_batches": "microbatch"}

TAILS: dict[str, FrameworkTail] = {
    "lightning": FrameworkTail(
        "Lightning", TailTreatment.WEIGHTED,
        f"lightning {VERSION} loops/training_epoch_loop.py _should_accumulate: steps on the last batch; "
        "loops/optimization/automatic.py divides by accumulate_grad_batches"),
}

LOADER_SHARDING: tuple[LoaderSharding, ...] = (
    LoaderSharding("Lightning Fabric", "setup_dataloaders", None,
                   f"lightning {VERSION} fabric/fabric.py _setup_dataloader: DistributedSampler when "
                   "use_distributed_sampler (default True)"),
)

#: Fabric's ``all_reduce`` defaults to "mean" (``fabric.py``): only an explicit "sum" counts.
RETURNED_REDUCTIONS = frozenset({"all_reduce"})


# --- owned loop: the LightningModule hooks the fit loop calls around each microbatch's backward ---

#: hooks called right before / right after each microbatch's backward under automatic
#: optimization, on every microbatch of a group (lightning 2.6.6
#: ``plugins/precision/precision.py`` ``pre_backward`` → ``on_before_backward``,
#: ``post_backward`` → ``on_after_backward``; called from the closure's backward in
#: ``loops/optimization/automatic.py``). A clip there clips a partial sum when A > 1.
BACKWARD_HOOKS = frozenset({"on_before_backward", "on_after_backward"})
#: the hooks Lightning calls once per optimizer update, after the group's last backward
#: (``precision.py`` ``_after_closure``: ``on_before_optimizer_step``, then ``_clip_gradients`` →
#: ``configure_gradient_clipping``): the place for a clip.
UPDATE_HOOKS = frozenset({"on_before_optimizer_step", "configure_gradient_clipping"})
#: the Trainer keyword that sets A, and the one that cuts an epoch to a number of batches
#: (lightning 2.6.6 ``trainer/trainer.py``; ``loops/training_epoch_loop.py``
#: ``_should_accumulate``: the epoch's last batch always steps, so an epoch of
#: ``limit_train_batches`` < A batches makes every update a partial group divided by A)
TRAINER = "Trainer"
LIMIT_KEYWORD = "limit_train_batches"
#: ``LightningModule.optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)``: the closure
#: runs the group's last ``training_step``, ``zero_grad`` (first batch of a group) and backward when
#: the optimizer's ``step(closure=...)`` calls it (lightning 2.6.6 ``core/module.py``
#: ``optimizer_step``; ``loops/optimization/automatic.py`` ``Closure``), so what the override does
#: to ``.grad`` before handing the closure on misses that backward.
OPTIMIZER_STEP = "optimizer_step"
CLOSURE_PARAMETER = "optimizer_closure"
#: Methods called once per optimizer update (``loops/optimization/automatic.py`` ``_optimizer_step``
#: calls ``optimizer_step``; once per batch at ``accumulate_grad_batches=1``), read as the body of
#: the loop over updates. The closure it receives runs the batch's ``training_step`` and backward
#: only when called (by ``optimizer.step(closure=...)`` or directly); a call that never runs it
#: fails in ``loops/optimization/closure.py`` ``consume_result`` ("The closure hasn't been executed").
UPDATE_STEP_HOOKS = frozenset({OPTIMIZER_STEP})
CLOSURE_POSITION = 3  # after epoch, batch_idx, optimizer
SOURCE = "lightning 2.6.6 plugins/precision/precision.py, loops/optimization/automatic.py, loops/training_epoch_loop.py"
