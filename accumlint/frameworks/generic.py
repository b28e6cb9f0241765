"""Trainer base classes the linter does not know by import: a subclass's per-batch hook with no
caller in its module is called by the base class's loop, once per microbatch.

Recognized only when the hook runs a backward (its own, or an inherited method whose name says
it runs one, ``forward_and_backward``); the epoch-start hook is its epoch loop's top. These
names are conventions shared by small trainer libraries, not one package's contract.
"""

from __future__ import annotations

import re

from accumlint.frameworks.loops import CallbackLoop, Phase

BASE_TRAINER = CallbackLoop(
    framework="trainer base class",
    version="-",
    source="hook names shared by trainer base classes",
    bases=frozenset(),  # any base class the project does not define
    hooks={
        "on_epoch_start": Phase.EPOCH_START,
        "on_epoch_begin": Phase.EPOCH_START,
        "on_train_epoch_start": Phase.EPOCH_START,
        "batch_update": Phase.BODY,
        "train_batch": Phase.BODY,
        "training_batch": Phase.BODY,
        "train_on_batch": Phase.BODY,
        "on_epoch_end": Phase.EPOCH_END,
    },
    uncalled=True,
    excluded_packages=("lightning", "pytorch_lightning", "transformers", "keras", "tensorflow", "ignite",
                       "skorch", "catalyst", "mmengine"),
)

#: an inherited method whose name says it runs the backward
BACKWARD_NAME = re.compile(r"backward", re.I)
