"""Loss normalization: divide by A once, and only where no framework already does (P4)."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from accumlint.checks.base import Hit, Rule
from accumlint.findings import Severity
from accumlint.model import EventKind, FileModel, Role
from accumlint.model import frameworks as fw
from accumlint.model.dataflow import loss_divisions
from accumlint.model.names import dotted, int_value, keyword


class DoubleNormalization(Rule):
    """ACC101: a manual division by A on a loss whose backward API already divides by A."""

    code = "ACC101"
    name = "double-normalization"
    severity = Severity.ERROR
    principle = "P4"
    summary = "loss divided by A by hand and again by the framework: gradients A times too small"
    markers = (b"backward", b"manual_backward", b"update_params", b"training_step")

    def check(self, model: FileModel) -> Iterator[Hit]:
        reported: set[int] = set()
        for event in model.all_events():
            if event.kind is not EventKind.BACKWARD:
                continue
            for node, framework in self._divisions(model, event):
                if id(node) not in reported:
                    reported.add(id(node))
                    yield Hit(
                        node,
                        f"the loss is divided by the accumulation steps here and {framework} divides it by A "
                        "again in backward: gradients (and the effective learning rate) are A times too small",
                        f"remove the manual division; {framework} already normalizes by A",
                    )
        yield from self._lightning(model, reported)

    def _divisions(self, model: FileModel, event) -> list[tuple[cst.CSTNode, str]]:
        contract = fw.backward_contract(event.role.role, event.method)
        ds_names = model.deepspeed_accumulation_names
        if ds_names and event.role.role in (Role.ACCELERATOR, Role.ENGINE):
            # the divisor is DeepSpeed's own GAS: under DeepSpeed the engine divides by it
            found = model.divisions_by(event, lambda d: dotted(d) in ds_names)
            if found:
                return [(node, "DeepSpeed") for node in found]
        if contract is None or contract.normalizes is fw.Normalizes.NEVER:
            return []
        if contract.opt_out_keyword and event.site.call is not None:
            opt_out = keyword(event.site.call, contract.opt_out_keyword)
            if opt_out is not None:
                return []  # scale_wrt_gas=... given explicitly: the caller owns the division
        if event.role.role is Role.ENGINE and (event.role.owner != "deepspeed" and
                                               not model.imports.imports_module("deepspeed")):
            return []
        if event.role.role is Role.ENGINE and model.deepspeed_unmanaged:
            return []
        if contract.normalizes is fw.Normalizes.IF_CONFIGURED:
            configured = model.accelerate_accumulation(event.role)
            if configured is None or configured is False or int_value(configured) == 1:  # type: ignore[arg-type]
                return []
            text = dotted(configured)  # type: ignore[arg-type]

            def is_a(divisor: cst.BaseExpression) -> bool:
                return (text is not None and dotted(divisor) == text) or model.is_accumulation_name(divisor)

            return [(node, contract.framework) for node in model.divisions_by(event, is_a)]
        return [(node, contract.framework) for node in model.divisions_by(event, model.is_accumulation_name)]

    def _lightning(self, model: FileModel, reported: set[int]) -> Iterator[Hit]:
        for scope in model.scopes:
            node = scope.node
            if not isinstance(node, cst.FunctionDef) or node.name.value != "training_step" or scope.class_def is None:
                continue
            if not model.lightning_automatic(scope.class_def):
                continue
            for site in scope.sites:
                if not site.is_return or site.in_helper or site.value is None:
                    continue
                value = site.value
                if isinstance(value, cst.Dict):  # return {"loss": loss / A, ...}
                    value = next((e.value for e in value.elements if isinstance(e, cst.DictElement)
                                  and isinstance(e.key, cst.SimpleString) and e.key.evaluated_value == "loss"), None)
                for division in loss_divisions(value, site, model.is_accumulation_name):
                    if id(division) not in reported:
                        reported.add(id(division))
                        yield Hit(
                            division,
                            "Lightning's automatic optimization already divides the loss returned by "
                            "`training_step` by `accumulate_grad_batches`; dividing here too makes gradients "
                            "A times too small",
                            "return the undivided loss",
                        )


class MeanOfMeans(Rule):
    """ACC102: per-microbatch mean token losses averaged over A: tokens weighted unequally"""

    code = "ACC102"
    name = "mean-of-means"
    severity = Severity.WARNING
    principle = "P4"
    summary = "per-microbatch mean token losses averaged over A: tokens weighted unequally"

    def check(self, model: FileModel) -> Iterator[Hit]:
        return iter(())  # SCAFFOLD: to be written


class MissingNormalization(Rule):
    """ACC103: accumulated loss never divided by A: gradients are A times the mean"""

    code = "ACC103"
    name = "missing-normalization"
    severity = Severity.WARNING
    principle = "P4"
    summary = "accumulated loss never divided by A: gradients are A times the mean"
    default_enabled = False

    def check(self, model: FileModel) -> Iterator[Hit]:
        return iter(())  # SCAFFOLD: to be written


class NormalizationAfterBackward(Rule):
    """ACC104: loss divided after its backward ran: only the logged value changes"""

    code = "ACC104"
    name = "normalization-after-backward"
    severity = Severity.ERROR
    principle = "P4"
    summary = "loss divided after its backward ran: only the logged value changes"

    def check(self, model: FileModel) -> Iterator[Hit]:
        return iter(())  # SCAFFOLD: to be written


class FrameworkExpectsNormalization(Rule):
    """ACC105: an API that leaves normalization to the user, used without it"""

    code = "ACC105"
    name = "framework-expects-normalization"
    severity = Severity.ERROR
    principle = "P4"
    summary = "an API that leaves normalization to the user, used without it"

    def check(self, model: FileModel) -> Iterator[Hit]:
        return iter(())  # SCAFFOLD: to be written
