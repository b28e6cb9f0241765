"""mmcv 1.x runners: ``EpochBasedRunner`` / ``IterBasedRunner`` own the loop and call the hooks
of the ``Hook`` subclasses registered with them, by method name, once per iteration (one
microbatch).

Source: mmcv 1.7.2 ``mmcv/runner/epoch_based_runner.py`` ``EpochBasedRunner.train``: per epoch
``call_hook('before_train_epoch')``, then per batch ``_inner_iter = i``,
``call_hook('before_train_iter')``, ``run_iter`` (the model's ``train_step``: the forward, its
outputs kept as ``runner.outputs``), ``call_hook('after_train_iter')``, ``_iter += 1``; then
``call_hook('after_train_epoch')``. ``iter_based_runner.py`` ``IterBasedRunner.train`` runs the
same iteration hooks around one batch and increments ``_inner_iter`` and ``_iter`` after
``after_train_iter``, but restarts ``_inner_iter`` with each workflow phase (``run``), not with
a pass over the data: the row's epoch is ``EpochBasedRunner``'s.

The runner runs no backward: an optimizer hook's ``after_train_iter`` does (``hooks/optimizer.py``
``OptimizerHook.after_train_iter``: backward, clip, ``step()`` on every iteration), so that
method is the microbatch's body. ``runner.iter`` counts iterations over the
whole run and ``runner.inner_iter`` within the epoch, both 0 when a hook of the first iteration
reads them.

``hooks/hook.py`` ``Hook.every_n_iters(runner, n)`` is true when ``runner.iter + 1`` is a
multiple of ``n`` (and ``n > 0``), ``every_n_inner_iters`` the same on ``runner.inner_iter``:
a custom optimizer hook gates its update with them. mmcv 2.x moved the runner to mmengine
(:mod:`accumlint.frameworks.mmengine`).
"""

from __future__ import annotations

from accumlint.frameworks.loops import CallbackLoop, Phase

VERSION = "1.7.2"
#: Every version a fact of this module was read in.
READ_VERSIONS = (VERSION,)

#: the hook classes of ``mmcv/runner/hooks/`` a project's optimizer hook subclasses
_HOOK_BASES = frozenset({"Hook", "OptimizerHook", "Fp16OptimizerHook", "GradientCumulativeOptimizerHook",
                         "GradientCumulativeFp16OptimizerHook"})

#: ``Hook.every_n_iters`` / ``every_n_inner_iters`` restated as the value they return
_EVERY_N = "def {name}(self, runner, n):\n    return n > 0 and (runner.{counter} + 1) % n == 0\n"

RUNNER_HOOKS = CallbackLoop(
    framework="mmcv",
    version=VERSION,
    source="mmcv/runner/epoch_based_runner.py EpochBasedRunner.train, runner/hooks/hook.py Hook",
    bases=_HOOK_BASES,
    hooks={
        "before_train_epoch": Phase.EPOCH_START,
        "before_train_iter": Phase.BATCH_START,
        # the runner's forward (run_iter) comes before it; an optimizer hook backpropagates here
        "after_train_iter": Phase.BODY,
        "after_train_epoch": Phase.EPOCH_END,
    },
    packages=("mmcv",),
    # both are 0 on the first iteration: the runner increments them after `after_train_iter`
    counters={"iter": 0},
    epoch_counters={"inner_iter": 0},
    counter_position=1,  # `def after_train_iter(self, runner)`
    # run_iter keeps the model's train_step outputs (the loss among them) as `runner.outputs`;
    # `train` sets `runner.data_batch` before the hooks
    data=frozenset({"outputs", "data_batch"}),
    base_methods={
        "every_n_iters": _EVERY_N.format(name="every_n_iters", counter="iter"),
        "every_n_inner_iters": _EVERY_N.format(name="every_n_inner_iters", counter="inner_iter"),
    },
)
