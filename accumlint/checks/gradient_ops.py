"""Gradient operations once per group: clipping and the gradient scaler (P6, P7)."""

from __future__ import annotations

from collections.abc import Iterator

from accumlint.checks.base import Hit, Rule
from accumlint.findings import Severity
from accumlint.model import FileModel


class ClipInsideGroup(Rule):
    """ACC301: gradients clipped every microbatch: partial sums are clipped, not the group's gradient"""

    code = "ACC301"
    name = "clip-inside-group"
    severity = Severity.ERROR
    principle = "P6"
    summary = "gradients clipped every microbatch: partial sums are clipped, not the group's gradient"

    def check(self, model: FileModel) -> Iterator[Hit]:
        return iter(())  # SCAFFOLD: to be written


class ClipBeforeUnscale(Rule):
    """ACC302: gradients clipped while still multiplied by the GradScaler's scale"""

    code = "ACC302"
    name = "clip-before-unscale"
    severity = Severity.ERROR
    principle = "P7"
    summary = "gradients clipped while still multiplied by the GradScaler's scale"

    def check(self, model: FileModel) -> Iterator[Hit]:
        return iter(())  # SCAFFOLD: to be written


class ScalerInsideGroup(Rule):
    """ACC303: GradScaler unscale/step/update on every microbatch"""

    code = "ACC303"
    name = "scaler-inside-group"
    severity = Severity.ERROR
    principle = "P7"
    summary = "GradScaler unscale/step/update on every microbatch"

    def check(self, model: FileModel) -> Iterator[Hit]:
        return iter(())  # SCAFFOLD: to be written
