"""The normalization ledger (P4): every factor the code applies between a backward's
per-element loss and the gradient the optimizer update reads, in order, with how often each
runs (per microbatch or once per group).

Loss side (from the loss's value history): the loss's reduction when it is a mean over a
microbatch's own supervised tokens (``cross_entropy(ignore_index=...)`` over token positions,
a hand-written ``sum(x * mask) / mask.sum()``, an HF model's ``outputs.loss`` with a
label-masking collator), divisions by A, any multiplication. Gradient side: in-place rescales
of the accumulated ``.grad`` (``p.grad.div_(n)``, ``mul_(1 / n)``, ``/=``, ``_foreach_div_``,
``scale_grads``, ``multiply_grads``) with their divisor and cadence. The rules ACC101, ACC102,
ACC307 and ACC405 read it, so they count the same denominators.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

import libcst as cst

from accumlint.model import frameworks as fw
from accumlint.model import losses
from accumlint.model.dataflow import arithmetic, value_history
from accumlint.model.grad_ops import op_cadence, report_node
from accumlint.model.groups import AccumulationLoop
from accumlint.model.kinds import Cadence, EventKind, Role
from accumlint.model.names import dotted, keyword, last_segment, method_name, walk

if TYPE_CHECKING:
    from accumlint.model import FileModel
    from accumlint.model.events import Event
    from accumlint.model.sites import Site


class Factor(str, Enum):
    """One kind of ledger entry."""

    TOKEN_MEAN = "mean over the microbatch's supervised tokens"
    DIVIDE_A = "divided by the accumulation steps A"
    MULTIPLY = "multiplied by a factor"
    GRAD_RESCALE = "accumulated gradients rescaled in place"


@dataclass(frozen=True)
class Entry:
    """A factor applied to one backward's gradient.

    ``node``: where the code applies it (the division, the loss call, the rescale call);
    ``cadence``: how often it runs in the group; ``divisor``: for a gradient-side rescale, the
    expression the gradients are divided by (``n`` for ``div_(n)``, ``mul_(1 / n)``), else None;
    ``evidence``: why the entry is what it is, for messages; ``report``: where a finding about a
    gradient-side entry goes (the helper call in the loop, or the rescale itself); ``source``:
    the rescale's event."""

    factor: Factor
    node: cst.CSTNode
    cadence: Cadence
    divisor: cst.BaseExpression | None = None
    evidence: str = ""
    report: cst.CSTNode | None = None
    source: Event | None = None


@dataclass(frozen=True)
class Ledger:
    """The factors of one backward ``event`` of ``group`` (loss side, then gradient side)."""

    event: Event
    entries: tuple[Entry, ...]

    def of(self, factor: Factor) -> list[Entry]:
        """The entries of one kind, in order."""
        return [entry for entry in self.entries if entry.factor is factor]


def ledger_of(model: FileModel, group: AccumulationLoop, event: Event) -> Ledger:
    """The ledger of a backward ``event`` of ``group`` (see the module docstring)."""
    entries: list[Entry] = []
    mean = token_mean_of(model, event)
    if mean is not None:
        entries.append(Entry(Factor.TOKEN_MEAN, mean.call, Cadence.MICROBATCH, evidence=mean.evidence))
    for node in model.divisions_by(event, model.is_accumulation_name):
        entries.append(Entry(Factor.DIVIDE_A, node, group.cadence(event)))
    for node in _multiplications(event):
        entries.append(Entry(Factor.MULTIPLY, node, group.cadence(event)))
    entries.extend(gradient_rescales(model, group))
    return Ledger(event, tuple(entries))


def token_mean_of(model: FileModel, event: Event) -> losses.TokenMean | None:
    """The per-microbatch token mean a backward differentiates, by any of the shapes the
    ledger knows (:mod:`accumlint.model.losses`), or None."""
    return (model.token_mean(event) or losses.masked_mean_by_hand(event)
            or losses.hf_output_token_mean(event, lambda e, s: _model_output(model, e, s), _collators(model)))


def _multiplications(event: Event) -> list[cst.CSTNode]:
    """``loss * w`` / ``loss *= w`` in the value history (a weight that may undo a mean)."""
    if event.loss is None:
        return []
    found: list[cst.CSTNode] = []
    for value, operator, statement in value_history(event.loss, event.site):
        if isinstance(operator, cst.MultiplyAssign):
            found.append(statement)  # type: ignore[arg-type]
        elif operator is None:
            found.extend(node for node in arithmetic(value) if isinstance(node.operator, cst.Multiply)
                         and not _reciprocal(node))
    return found


def _reciprocal(node: cst.BinaryOperation) -> bool:
    """``x * (1 / d)``: a division written as a product (counted by the division's entry)."""
    return any(isinstance(side, cst.BinaryOperation) and isinstance(side.operator, cst.Divide)
               for side in (node.left, node.right))


def gradient_rescales(model: FileModel, group: AccumulationLoop) -> list[Entry]:
    """The group's in-place rescales of the accumulated gradients, with their divisor (the
    ``n`` of ``div_(n)``, ``/= n``, ``mul_(1 / n)``, ``_foreach_div_(grads, n)``,
    ``scale_grads(model, 1 / n)``; None for a factor that is no division) and cadence."""
    entries: list[Entry] = []
    for event in group.of_kind(EventKind.GRAD_RESCALE):
        entries.append(Entry(Factor.GRAD_RESCALE, event.node, op_cadence(model, group, event),
                             _rescale_divisor(event), event.method, report_node(group, event), event))
    return entries


def _rescale_divisor(event: Event) -> cst.BaseExpression | None:
    site = event.site
    call = site.call
    if call is None:  # p.grad /= n, p.grad *= 1 / n
        if isinstance(site.augmented, cst.DivideAssign):
            return site.value
        return _reciprocal_of(site.value)
    name = method_name(call) or last_segment(dotted(call.func) or "")
    factor = call.args[-1].value if call.args else None
    if name in ("div_", "divide_", "_foreach_div_"):
        return factor
    return _reciprocal_of(factor)


def _reciprocal_of(expression: cst.BaseExpression | None) -> cst.BaseExpression | None:
    """``1 / n`` (``1.0 / n``) → ``n``."""
    if (isinstance(expression, cst.BinaryOperation) and isinstance(expression.operator, cst.Divide)
            and isinstance(expression.left, (cst.Integer, cst.Float))
            and float(expression.left.value) == 1.0):
        return expression.right
    return None


def _collators(model: FileModel) -> set[str]:
    """The label-masking collators this module constructs (framework rows)."""
    found: set[str] = set()
    for scope in model.scopes:
        for site in scope.sites:
            if site.call is not None and not site.in_helper:
                name = last_segment(dotted(site.call.func) or "")
                if name in fw.HF_LABEL_MASKING_COLLATORS:
                    found.add(name)
    return found


def _model_output(model: FileModel, holder: cst.BaseExpression, site: Site) -> bool:
    """Whether ``holder`` (the ``outputs`` of ``outputs.loss``) is bound to a model's forward
    that is given the batch's labels (``model(**batch)``, ``model(..., labels=...)``)."""
    name = dotted(holder)
    definition = model.reaching(name, site) if name else None
    call = definition.value if definition is not None else None
    if not isinstance(call, cst.Call):
        return False
    if model.roles.of(call.func, definition).role not in (Role.MODEL, Role.DDP_MODEL, Role.FSDP_MODEL):
        return False
    return any(arg.star == "**" for arg in call.args) or keyword(call, "labels") is not None


def is_token_count(model: FileModel, group: AccumulationLoop, divisor: cst.BaseExpression | None) -> bool:
    """Whether ``divisor`` is a count of tokens accumulated over the group: a name increased in
    the loop (``n += (labels != -100).sum()``, ``n += mask.sum()``, ``n += x.numel()``)."""
    name = dotted(divisor) if isinstance(divisor, (cst.Name, cst.Attribute)) else None
    if name is None:
        return False
    increments = [s for s in group.loop_sites if s.targets == (name,) and isinstance(s.augmented, cst.AddAssign)
                  and s.value is not None]
    return bool(increments) and all(_counts_elements(s.value) for s in increments)  # type: ignore[arg-type]


def _counts_elements(expression: cst.BaseExpression) -> bool:
    for node in walk(expression):
        if isinstance(node, cst.Call) and method_name(node) in ("sum", "numel", "count_nonzero"):
            return True
        if isinstance(node, cst.Call) and dotted(node.func) in ("torch.sum", "torch.count_nonzero"):
            return True
    return False
