"""Gates on a counter of optimizer updates inside a per-microbatch hook (ACC006).

HF Trainer calls ``training_step`` once per microbatch and advances ``self.state.global_step``
once per optimizer update (transformers 5.24.0 ``trainer.py``), so within a group of A
microbatches the counter is constant: ``if (self.state.global_step + 1) % A == 0:`` in a
``training_step`` override is true on all A microbatches of every A-th group, not on the
last microbatch of each group.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from accumlint import frameworks as fw
from accumlint.model.names import children, dotted, walk
from accumlint.model.sites import FrameKind

if TYPE_CHECKING:
    from accumlint.model import FileModel


def _modulo_of_update_counter(model: FileModel, test: cst.BaseExpression) -> cst.BinaryOperation | None:
    stack: list[cst.CSTNode] = [test]
    while stack:
        node = stack.pop()
        if (isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Modulo)
                and model.is_accumulation_name(node.right)):
            dividend = [n for n in walk(node.left) if dotted(n) == fw.transformers.UPDATE_COUNTER]  # type: ignore[arg-type]
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
