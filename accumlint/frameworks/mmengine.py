"""mmengine (OpenMMLab; mmengine 0.10.7 ``optim/optimizer/optimizer_wrapper.py``):
``OptimWrapper(accumulative_counts=A).update_params(loss)`` divides, backpropagates, and updates
and resets at the boundary; iteration schedulers are not gated.
"""

from __future__ import annotations

from accumlint.frameworks.contracts import BackwardContract, GroupContract, Normalizes, Owner, Role, Source
from accumlint.frameworks.loops import CallbackLoop, Phase

VERSION = "0.10.7"
#: Every version a fact of this module was read in (the installed one first).
READ_VERSIONS = (VERSION,)

CONTRACT = GroupContract(
    "mmengine", "OptimWrapper(accumulative_counts=A).update_params(loss)",
    divides=Owner.FRAMEWORK, divisor="A, or the remainder for the last group of the run", resets=Owner.FRAMEWORK,
    gates_update=Owner.FRAMEWORK, steps_scheduler=Owner.USER, clips=Owner.FRAMEWORK,
    sync="optim_context -> no_sync, covers forward", tail=None, a_from="OptimWrapper(accumulative_counts=)",
    packages=("mmengine",),
    source=Source("mmengine", VERSION, "optim/optimizer/optimizer_wrapper.py update_params"),
)

#: ``OptimWrapper(accumulative_counts=)``: the value passed is A whatever its name.
ACCUMULATION_KEYWORD = "accumulative_counts"

#: The wrapper classes (``optim/optimizer/optimizer_wrapper.py``, ``amp_optimizer_wrapper.py``)
#: under every path mmengine 0.10.7 exports them from; a config dict names them by ``type=``.
WRAPPER_CLASSES = ("OptimWrapper", "AmpOptimWrapper")
_WRAPPER_MODULES = {"OptimWrapper": "optimizer_wrapper", "AmpOptimWrapper": "amp_optimizer_wrapper"}
CONSTRUCTORS: dict[str, Role] = {
    f"{module}.{name}": Role.OPTIM_WRAPPER
    for name in WRAPPER_CLASSES
    for module in ("mmengine.optim", "mmengine.optim.optimizer", f"mmengine.optim.optimizer.{_WRAPPER_MODULES[name]}")
}
#: ``dict(type='OptimWrapper', accumulative_counts=A)``: the config key naming the wrapper class.
CONFIG_TYPE_KEY = "type"

#: ``update_params(loss)`` runs ``scale_loss`` first: the loss is divided by
#: ``accumulative_counts`` (default 1: nothing divided), by the remainder in the run's last
#: group once ``initialize_count_status`` set a maximum (the Runner does).
BACKWARD = BackwardContract(
    Role.OPTIM_WRAPPER, "update_params", Normalizes.IF_CONFIGURED, None, "mmengine",
    f"mmengine {VERSION} optim/optimizer/optimizer_wrapper.py OptimWrapper.update_params -> scale_loss divides by "
    "accumulative_counts",
)


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
