"""Lightning (owned-loop section; the coordinator merges it with the module's other rows)."""

from __future__ import annotations

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
ACCUMULATE_KEYWORD = "accumulate_grad_batches"
LIMIT_KEYWORD = "limit_train_batches"
#: ``LightningModule.optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)``: the closure
#: runs the group's last ``training_step``, ``zero_grad`` (first batch of a group) and backward when
#: the optimizer's ``step(closure=...)`` calls it (lightning 2.6.6 ``core/module.py``
#: ``optimizer_step``; ``loops/optimization/automatic.py`` ``Closure``), so what the override does
#: to ``.grad`` before handing the closure on misses that backward.
OPTIMIZER_STEP = "optimizer_step"
CLOSURE_PARAMETER = "optimizer_closure"
CLOSURE_POSITION = 3  # after epoch, batch_idx, optimizer
SOURCE = "lightning 2.6.6 plugins/precision/precision.py, loops/optimization/automatic.py, loops/training_epoch_loop.py"
