"""Facts worth recording about an accumulating run (info, off by default)."""

from __future__ import annotations

from collections.abc import Iterator

from accumlint.checks.base import Hit, Rule
from accumlint.findings import Severity
from accumlint.model import FileModel


class BatchnormWithAccumulation(Rule):
    """ACC901: BatchNorm statistics are per microbatch, not per effective batch"""

    code = "ACC901"
    name = "batchnorm-with-accumulation"
    severity = Severity.INFO
    principle = "-"
    summary = "BatchNorm statistics are per microbatch, not per effective batch"
    default_enabled = False

    def check(self, model: FileModel) -> Iterator[Hit]:
        return iter(())  # SCAFFOLD: to be written
