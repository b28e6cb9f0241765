"""diffusers (diffusers 0.42.1 ``optimization.py``, ``training_utils.py``): its ``get_scheduler``
builds an LR scheduler, sized in scheduler steps like transformers' (``num_warmup_steps``,
``num_training_steps``); ``EMAModel`` keeps shadow weights, and its ``step(parameters)`` moves
them (an average's step, never an optimizer update). Its noise schedulers (diffusers 0.40.0.dev0
``schedulers/scheduling_utils.py`` ``SchedulerMixin``, ``schedulers/scheduling_ddpm.py``
``DDPMScheduler.step``) share the word "scheduler" with an LR scheduler and nothing else: their
``step(model_output, timestep, sample, ..., return_dict=True)`` takes the model's output and
returns the previous sample (``.prev_sample``, or a tuple whose first element it is)."""

from __future__ import annotations

import re

from accumlint.frameworks.contracts import Role

VERSION = "0.42.1"
#: Every version a fact of this module was read in (the installed one first).
READ_VERSIONS = (VERSION, "0.40.0.dev0")

CONSTRUCTORS: dict[str, Role] = {"diffusers.optimization.get_scheduler": Role.SCHEDULER,
                                 "diffusers.training_utils.EMAModel": Role.OTHER}
SCHEDULE_HORIZON_KEYWORDS = frozenset({"num_training_steps", "num_warmup_steps"})
#: ``optimization.py`` ``get_scheduler(name, optimizer, step_rules, num_warmup_steps, num_training_steps,
#: ...)``: the sizing parameters each named schedule reads (``"constant"`` returns
#: ``get_constant_schedule(optimizer)``, ``"piecewise_constant"`` reads ``step_rules`` only); a name not
#: listed reads both.
NAMED_SCHEDULE_READS: dict[str, frozenset[str]] = {
    "constant": frozenset(), "piecewise_constant": frozenset(),
    "constant_with_warmup": frozenset({"num_warmup_steps"}),
}

#: A noise scheduler's class (every one in ``diffusers.schedulers`` is named ``<Kind>Scheduler``
#: and derives from ``SchedulerMixin``), called or built by its ``ConfigMixin`` class methods
#: (``DDPMScheduler.from_pretrained(...)``, ``FlowMatchEulerDiscreteScheduler(...)``): no LR
#: scheduler, whatever it is named. ``get_scheduler`` (the LR one) does not match.
NOISE_SCHEDULER = re.compile(r"^diffusers\.(\w+\.)*[A-Z]\w*Scheduler(\.(from_pretrained|from_config))?$")
#: The keywords of a noise scheduler's ``step`` that no optimizer's, LR scheduler's or scaler's
#: ``step`` takes (torch 2.13.0 ``Optimizer.step(closure)``, ``LRScheduler.step(epoch)``,
#: ``ReduceLROnPlateau.step(metrics, epoch)``, ``GradScaler.step(optimizer, *args)``).
NOISE_STEP_KEYWORDS = frozenset({"model_output", "timestep", "sample"})
