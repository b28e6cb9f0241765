"""Gates on a counter of optimizer updates on a per-microbatch path (ACC006).

HF Trainer calls ``training_step`` once per microbatch and advances ``self.state.global_step``
once per optimizer update (transformers 5.24.0 ``trainer.py``), so within a group of A
microbatches the counter is constant: ``if (self.state.global_step + 1) % A == 0:`` in a
``training_step`` override is true on all A microbatches of every A-th group, not on the
last microbatch of each group. The plain-loop form is the same mistake in the user's own loop:
a counter the loop advances only under its update gate (``n_updates += 1``), tested with
``n_updates % A`` by an ``if`` that runs on every microbatch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from accumlint import frameworks as fw
from accumlint.checks.shared.counts import counter_units
from accumlint.model import EventKind, FrameKind
from accumlint.model.boundary import index_offset
from accumlint.model.names import children, dotted, walk

if TYPE_CHECKING:
    from accumlint.model import FileModel


def _modulo_of_update_counter(model: FileModel, test: cst.BaseExpression,
                              is_counter=lambda node: dotted(node) == fw.transformers.UPDATE_COUNTER,
                              ) -> cst.BinaryOperation | None:
    """The ``counter % A`` inside ``test`` (``is_counter`` picks the counter's nodes)."""
    stack: list[cst.CSTNode] = [test]
    while stack:
        node = stack.pop()
        if (isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Modulo)
                and model.is_accumulation_name(node.right)):
            dividend = [n for n in walk(node.left) if is_counter(n)]  # type: ignore[arg-type]
            if dividend:
                return node
        stack.extend(children(node))
    return None



def update_counter_gates(model: FileModel) -> list[cst.BinaryOperation]:
    """The ``global_step % A`` tests of ``if`` statements in ``training_step`` overrides of HF
    Trainer subclasses (each test once)."""
    if not (model.imports.imports_module("transformers") or model.imports.imports_module("trl")):
        return []
    found: list[cst.BinaryOperation] = []
    seen: set[int] = set()
    for scope in model.scopes:
        function, owner = scope.node, scope.class_def
        if (not isinstance(function, cst.FunctionDef) or owner is None
                or function.name.value != fw.transformers.TRAINING_STEP):
            continue
        if not any(model.imports.qualify(dotted(base.value)) in fw.transformers.TRAINER_CLASSES
                   or dotted(base.value) in fw.transformers.TRAINER_CLASS_NAMES for base in owner.bases):
            continue
        for site in scope.sites:
            for frame in site.frames:
                if frame.kind not in (FrameKind.IF, FrameKind.GUARD) or id(frame.node) in seen:
                    continue
                seen.add(id(frame.node))
                modulo = _modulo_of_update_counter(model, frame.test) if frame.test is not None else None
                if modulo is not None:
                    found.append(modulo)
    return found


#: what a per-microbatch gate on the update counter may wrongly gate: accumulation events
_GATED_KINDS = frozenset({EventKind.UPDATE, EventKind.RESET, EventKind.SCHEDULER_STEP, EventKind.CLIP,
                          EventKind.UPDATE_HOOK, EventKind.GRAD_RESCALE})


def plain_update_counter_gates(model: FileModel) -> list[tuple[cst.BinaryOperation, str, cst.CSTNode]]:
    """``(modulo, counter, the if statement)`` for ``if`` tests ``counter % A`` (``(counter + k) % A``) in the
    user's own accumulation loops where ``counter`` is advanced only by the loop's update
    (``counter_units`` says "update") and the ``if`` runs on every microbatch (it is not nested
    under the update gate) and gates an accumulation event (update, reset, scheduler step,
    clipping, an update hook). The counter is constant within a group, so the test is true on
    all A microbatches of every A-th group."""
    units = counter_units(model)
    counters = {name for name, unit in units.items() if unit == "update"}
    if not counters:
        return []
    found: list[tuple[cst.BinaryOperation, str, cst.CSTNode]] = []
    seen: set[int] = set()
    for group in model.loops:
        gate = group.gate
        if group.accumulates is not True or gate is None:
            continue
        for event in group.events:
            if event.kind not in _GATED_KINDS or not group.in_loop(event):
                continue
            for index, frame in enumerate(event.site.frames):
                if frame.kind is not FrameKind.IF or frame.test is None or id(frame.node) in seen:
                    continue
                outer = event.site.frames[:index]
                if frame.node is gate.frame_node or any(f.node is gate.frame_node for f in outer):
                    continue  # the update gate itself, or an `if` that runs once per update
                if not any(f.node is group.loop for f in outer):
                    continue  # not inside the microbatch loop
                modulo = _modulo_of_update_counter(model, frame.test, lambda n: _counter_of(n, counters))
                if modulo is None:
                    continue
                seen.add(id(frame.node))
                found.append((modulo, _counter_of(modulo.left, counters) or "", frame.node))
    return found


def _counter_of(node: cst.CSTNode, counters: set[str]) -> str | None:
    split = index_offset(node) if isinstance(node, cst.BaseExpression) else None
    return split[0] if split is not None and split[0] in counters else None

