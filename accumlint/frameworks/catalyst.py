"""catalyst and callback runners: the runner owns the loop and calls its callbacks' hooks by name.

Source: catalyst 22.4 ``catalyst/core/runner.py`` ``IRunner._run_loader``: per batch
``_run_event("on_batch_start")``, ``self.handle_batch(batch)``, ``_run_event("on_batch_end")``;
``on_epoch_start`` / ``on_loader_start`` / ``on_epoch_end`` around them; ``core/callback.py``
names the hooks. The backward of a catalyst run is the user's ``handle_batch`` or a callback's
``on_batch_end`` (``BackwardCallback``), so the runner adds none itself.

A runner whose callbacks have an after-backward hook (``on_backward_end``, ``on_after_backward``)
has run the microbatch's backward before calling it: that row reads the backward as the
runner's.
"""

from __future__ import annotations

from accumlint.frameworks.loops import CallbackLoop, Phase

_CALLBACK_HOOKS = {
    "on_epoch_start": Phase.EPOCH_START,
    "on_loader_start": Phase.EPOCH_START,
    "on_batch_start": Phase.BATCH_START,
    "on_batch_end": Phase.BATCH_END,
    "on_epoch_end": Phase.EPOCH_END,
}

#: a ``dl.Runner`` subclass's ``handle_batch`` and its callbacks
RUNNER = CallbackLoop(
    framework="catalyst",
    version="22.4",
    source="catalyst/core/runner.py IRunner._run_loader, core/callback.py",
    bases=frozenset({"Callback", "Runner", "IRunner", "SupervisedRunner"}),
    hooks={**_CALLBACK_HOOKS, "handle_batch": Phase.BODY},
    packages=("catalyst",),
)

#: callback runners that call an after-backward hook (the runner ran the backward before it)
AFTER_BACKWARD_RUNNER = CallbackLoop(
    framework="callback runner",
    version="-",
    source="the hook names of callback-style trainers: on_batch_start, on_backward_end, on_batch_end",
    bases=frozenset({"Callback"}),
    hooks={**_CALLBACK_HOOKS, "on_backward_end": Phase.AFTER_BACKWARD, "on_after_backward": Phase.AFTER_BACKWARD},
    framework_backward=True,
    # those frameworks' callbacks have other hook names, or call these with another meaning
    excluded_packages=("lightning", "pytorch_lightning", "transformers", "keras", "tensorflow", "catalyst",
                       "ignite", "skorch", "mmengine", "fastai"),
)

#: the callback that owns the update cadence (catalyst 22.4 ``callbacks/optimizer.py``
#: ``OptimizerCallback.on_batch_end``: counts batches, steps and resets when the count is a
#: multiple of ``accumulation_steps``); the backward is ``BackwardCallback.on_batch_end``
#: (``callbacks/backward.py``) on every batch. A user callback's per-batch hook that clips
#: therefore sees a partial sum (or, ordered after the update, gradients just reset).
OPTIMIZER_CALLBACKS = frozenset({
    "catalyst.dl.OptimizerCallback", "catalyst.callbacks.OptimizerCallback",
    "catalyst.callbacks.optimizer.OptimizerCallback",
})
ACCUMULATION_KEYWORD = "accumulation_steps"
#: the per-batch hooks of a user callback
BATCH_HOOKS = frozenset({"on_batch_start", "on_batch_end"})
