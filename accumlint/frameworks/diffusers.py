"""diffusers (diffusers 0.42.1 ``optimization.py``, ``training_utils.py``): its ``get_scheduler``
builds an LR scheduler, sized in scheduler steps like transformers' (``num_warmup_steps``,
``num_training_steps``); ``EMAModel`` keeps shadow weights, and its ``step(parameters)`` moves
them (an average's step, never an optimizer update)."""

from __future__ import annotations

from accumlint.frameworks.contracts import Role

VERSION = "0.42.1"
#: Every version a fact of this module was read in (the installed one first).
READ_VERSIONS = (VERSION,)

CONSTRUCTORS: dict[str, Role] = {"diffusers.optimization.get_scheduler": Role.SCHEDULER,
                                 "diffusers.training_utils.EMAModel": Role.OTHER}
SCHEDULE_HORIZON_KEYWORDS = frozenset({"num_training_steps", "num_warmup_steps"})
