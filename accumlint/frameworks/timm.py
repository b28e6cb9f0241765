"""timm (pytorch-image-models): its optimizers and schedulers, the per-update scheduler hook
and the loss-scaler helper ``NativeScaler`` (read in timm 1.0.22 ``utils/cuda.py``,
``scheduler/scheduler.py``).
"""

from __future__ import annotations

from accumlint.frameworks.contracts import Role

VERSION = "1.0.22"

CONSTRUCTOR_PREFIXES: tuple[tuple[str, Role], ...] = (
    ("timm.scheduler.", Role.SCHEDULER),
    ("timm.optim.", Role.OPTIMIZER),
)

#: ``Scheduler.step_update(num_updates)``: the per-update scheduler step (``scheduler/scheduler.py``).
SCHEDULER_STEP_METHOD = "step_update"
