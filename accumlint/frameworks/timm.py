"""timm (pytorch-image-models): its optimizers and schedulers, the per-update scheduler hook
and the loss-scaler helper ``NativeScaler`` (read in timm 1.0.29.dev0, main @aa4b585:
``utils/cuda.py``, ``scheduler/scheduler.py``).
"""

from __future__ import annotations

import re

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
#: its position parameter: ``step_update`` sets every group's learning rate from ``num_updates``
#: (``_get_values(num_updates)``), keeping no count of its own calls, so a call per microbatch
#: with the same position sets the same value again (``scheduler/scheduler.py``)
SCHEDULER_POSITION_PARAMETER = "num_updates"

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

#: The same convention where the scaler's class is out of view (an object passed in, a project
#: copy in another file): MAE / DeiT / ConvNeXt(-V2) copy ``NativeScaler`` as
#: ``NativeScalerWithGradNormCount`` (gate ``update_grad``), timm keeps ``need_update``. Applied
#: only to a call that the project does not resolve, whose callee is named like a scaler, that
#: passes the loss and the optimizer by position and the gate by keyword (without the gate it may
#: be any callable). Gate keyword -> the summary of the call.
LOSS_SCALER_CONVENTION: dict[str, Summary] = {
    gate: Summary(
        f"loss_scaler_{gate}.__call__",
        ("self", "loss", "optimizer", "clip_grad=None", "parameters=None", "create_graph=False", f"{gate}=True"),
        (SummaryEvent("scaled_backward", "loss"), SummaryEvent("scaler_update", "optimizer", gate)),
        method=True,
        read_from=Source("timm", VERSION, "timm/utils/cuda.py NativeScaler.__call__"),
    )
    for gate in ("need_update", "update_grad")
}
LOSS_SCALER_NAME = re.compile(r"scaler$", re.I)
#: the bytes of a file that may call such a scaler (the prefilter's marker: no `backward(` of its own)
LOSS_SCALER_GATE_BYTES = re.compile(rb"(?<![A-Za-z0-9_])(?:need_update|update_grad)\s*=(?!=)")
