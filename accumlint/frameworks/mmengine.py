"""mmengine (owned-loop section; the coordinator merges it with the module's other rows)."""

from __future__ import annotations

from accumlint.frameworks.loops import CallbackLoop, Phase

# --- owned loop: the Runner calls the model's train_step once per iteration (one microbatch) ---

#: mmengine 0.10.7 ``runner/loops.py`` ``EpochBasedTrainLoop.run_iter`` /
#: ``IterBasedTrainLoop.run_iter``: ``before_train_iter`` hooks, ``model.train_step(data_batch,
#: optim_wrapper=...)``, ``after_train_iter`` hooks; ``model/base_model/base_model.py``
#: ``BaseModel.train_step`` runs ``optim_wrapper.update_params(loss)``, which counts the
#: microbatches against ``accumulative_counts`` (``optim/optimizer/optimizer_wrapper.py``).
#: An override of ``train_step`` is the loop body; its ``optim_wrapper`` parameter is the wrapper.
BASE_MODEL = CallbackLoop(
    framework="mmengine",
    version="0.10.7",
    source="mmengine/runner/loops.py run_iter, model/base_model/base_model.py BaseModel.train_step",
    bases=frozenset({"BaseModel"}),
    hooks={"train_step": Phase.BODY},
    packages=("mmengine", "mmcv"),
    attributes={"optim_wrapper": "mmengine optimizer wrapper"},
)
