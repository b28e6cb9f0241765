"""torch_xla (``core/xla_model.py``): ``xm.optimizer_step(optimizer)`` all-reduces the gradients
across the replicas and steps the optimizer: an optimizer update written as a function call."""

from __future__ import annotations

OPTIMIZER_STEP = "optimizer_step"
