"""skorch: ``NeuralNet.fit`` owns the loop and calls ``train_step`` once per batch.

Source: skorch 1.4.0 ``skorch/net.py``: ``run_single_epoch`` notifies ``on_batch_begin``, calls
``train_step(batch)``, notifies ``on_batch_end`` (the net's own methods of those names are
notified too); ``train_step`` resets the gradients (``_zero_grad_optimizer``), runs
``train_step_single`` (forward, ``get_loss``, ``loss.backward()``) and steps the optimizer
(``_step_optimizer``) on every batch. A subclass that overrides ``train_step`` to accumulate
owns that cadence; an inherited ``train_step_single`` is its microbatch's backward. ``initialize``
sets ``self.optimizer_`` and ``self.module_``.
"""

from __future__ import annotations

from accumlint.frameworks.loops import CallbackLoop, Phase

NET = CallbackLoop(
    framework="skorch",
    version="1.4.0",
    source="skorch/net.py NeuralNet.run_single_epoch, train_step, train_step_single",
    bases=frozenset({"NeuralNet", "NeuralNetClassifier", "NeuralNetRegressor", "NeuralNetBinaryClassifier"}),
    hooks={
        "on_epoch_begin": Phase.EPOCH_START,
        "on_batch_begin": Phase.BATCH_START,
        "train_step": Phase.BODY,
        "on_batch_end": Phase.BATCH_END,
        "on_epoch_end": Phase.EPOCH_END,
    },
    packages=("skorch",),
    backward_methods=frozenset({"train_step_single"}),
    # NeuralNet.initialize_optimizer: ``self.optimizer_``; initialize_module: ``self.module_``
    attributes={"self.optimizer_": "optimizer", "self.module_": "model"},
)
