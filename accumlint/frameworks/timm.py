"""timm (pytorch-image-models): its optimizers and schedulers, the per-update scheduler hook
and the loss-scaler helper ``NativeScaler`` (read in timm 1.0.29.dev0, main @aa4b585:
``utils/cuda.py``, ``scheduler/scheduler.py``).
"""

from __future__ import annotations

from accumlint.frameworks.contracts import Role, Source, Summary, SummaryEvent

VERSION = "1.0.29.dev0"
#: Every version a fact of this module was read in (the installed one first).
READ_VERSIONS = (VERSION,)

CONSTRUCTOR_PREFIXES: tuple[tuple[str, Role], ...] = (
    ("timm.scheduler.", Role.SCHEDULER),
    ("timm.optim.", Role.OPTIMIZER),
)

#: ``Scheduler.step_update(num_updates)``: the per-update scheduler step (``scheduler/scheduler.py``).
SCHEDULER_STEP_METHOD = "step_update"

#: The loss-scaler helper of timm's training script (``timm.utils.NativeScaler``, defined in
#: ``timm/utils/cuda.py``; read in timm 1.0.29.dev0, main @aa4b585): ``scaler(loss, optimizer,
#: clip_grad=None, clip_mode='norm', parameters=None, create_graph=False, need_update=True)``
#: backpropagates the scaled loss on every call; when ``need_update`` it unscales and clips
#: ``parameters`` (only when ``clip_grad`` is given), steps the optimizer through the scaler and
#: updates the scale. It divides nothing and resets nothing.
_NATIVE_SCALER_PARAMS = ("self", "loss", "optimizer", "clip_grad=None", "clip_mode='norm'", "parameters=None",
                         "create_graph=False", "need_update=True")
_NATIVE_SCALER_EVENTS = (
    SummaryEvent("scaled_backward", "loss"),
    SummaryEvent("unscale", "optimizer", gate="need_update", given="clip_grad"),
    SummaryEvent("clip", "parameters", gate="need_update", given="clip_grad"),
    SummaryEvent("scaler_update", "optimizer", gate="need_update"),
)
SUMMARIES: tuple[Summary, ...] = tuple(
    Summary(f"{module}.NativeScaler.__call__", _NATIVE_SCALER_PARAMS, _NATIVE_SCALER_EVENTS, method=True,
            read_from=Source("timm", VERSION, "timm/utils/cuda.py NativeScaler.__call__"))
    for module in ("timm.utils", "timm.utils.cuda")
)
