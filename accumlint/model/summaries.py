"""Summaries of functions the project does not define, as data: what a library function
or method does to the accumulation group, in the model's terms, one table row each.

A :class:`Summary` says which parameters the function takes, which training events it
performs on which of them (a backward of a parameter, a scaler's unscale, a clip, an
optimizer update, a reset, a scheduler step), under which of its own parameters as a gate
(``update_grad``), and whether it divides the loss it backpropagates. The walker inlines a
summary like a project function (:meth:`Summary.function` is the body it stands for), so
argument binding, gates, report positions and the rules need nothing of their own.

Rows live with their framework (issue 9: timm's ``NativeScaler``, torchtune's
``scale_grads``); :data:`LIBRARY_SUMMARIES` maps a qualified name to its row. A row that
names an unknown event kind or parameter raises ``ValueError`` when it is built.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import libcst as cst

#: event kind → the statement that performs it on the row's ``on`` expression
_STATEMENTS = {
    "backward": "{on}.backward()",
    "scaled_backward": "grad_scaler.scale({on}).backward()",
    "unscale": "grad_scaler.unscale_({on})",
    "clip": "torch.nn.utils.clip_grad_norm_({on}, 1.0)",
    "update": "{on}.step()",
    "scaler_update": "grad_scaler.step({on})\ngrad_scaler.update()",
    "reset": "{on}.zero_grad()",
    "scheduler_step": "{on}.step()",
}


@dataclass(frozen=True)
class SummaryEvent:
    """One event of a summary: ``kind`` (a key of the statements above) on the parameter (or
    ``self`` attribute) ``on``, run only when the parameter ``gate`` is true (None: always)."""

    kind: str
    on: str
    gate: str | None = None


@dataclass(frozen=True)
class Summary:
    """What calling ``name`` does. ``params``: its parameters in order (a ``name=default``
    string gives a literal default, as a row writes it); ``method``: the first parameter is
    the receiver; ``divides``: the backpropagated loss is divided by this parameter first."""

    name: str
    params: tuple[str, ...]
    events: tuple[SummaryEvent, ...]
    method: bool = False
    divides: str | None = None

    def __post_init__(self) -> None:
        names = {param.split("=", 1)[0] for param in self.params}
        for event in self.events:
            if event.kind not in _STATEMENTS:
                raise ValueError(f"{self.name}: unknown event kind {event.kind!r}")
            root = event.on.split(".", 1)[0]
            if root not in names:
                raise ValueError(f"{self.name}: {event.on!r} is not a parameter")
            if event.gate is not None and event.gate not in names:
                raise ValueError(f"{self.name}: gate {event.gate!r} is not a parameter")

    def source(self) -> str:
        """The Python text of the body this summary stands for."""
        lines = [f"def {self.name.rsplit('.', 1)[-1]}({', '.join(self.params)}):"]
        for event in self.events:
            on = event.on
            if event.kind in ("backward", "scaled_backward") and self.divides:
                on = f"({on} / {self.divides})"
            indent = "    "
            if event.gate is not None:
                lines.append(f"    if {event.gate}:")
                indent = "        "
            for statement in _STATEMENTS[event.kind].format(on=on).splitlines():
                lines.append(indent + statement)
        if len(lines) == 1:
            lines.append("    pass")
        return "\n".join(lines) + "\n"

    def function(self) -> cst.FunctionDef:
        """The body this summary stands for, parsed once."""
        return _parsed(self.source())


@functools.lru_cache(maxsize=256)
def _parsed(source: str) -> cst.FunctionDef:
    module = cst.parse_module(source)
    return module.body[0]  # type: ignore[return-value]


@functools.lru_cache(maxsize=256)
def owner_of(summary: Summary) -> object:
    """The functions table of the one-function module a summary's body forms (the walker's
    ``owner`` while it walks the body: a library's code, reported at the caller's call)."""
    from accumlint.model.sites import ModuleFunctions

    function = summary.function()
    return ModuleFunctions(cst.Module(body=[function]))


def mentioned(data: bytes) -> bool:
    """Whether ``data`` names a summarized function or class (its last names, as whole words):
    a file that calls one may run a backward through it (the prefilter lets it through)."""
    for qualified in LIBRARY_SUMMARIES:
        for part in qualified.split(".")[-2:]:
            if part != "__call__" and re.search(rb"(?<![A-Za-z0-9_])" + re.escape(part.encode()) + rb"(?![A-Za-z0-9_])",
                                                data):
                return True
    return False


def lookup(qualified: str | None) -> Summary | None:
    """The row for a qualified callee name, if one is registered."""
    return LIBRARY_SUMMARIES.get(qualified) if qualified else None


#: qualified name → summary; the rows come with their framework (issue 9)
LIBRARY_SUMMARIES: dict[str, Summary] = {}
