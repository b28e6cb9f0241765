"""The last group of an epoch: what happens to the microbatches after the last full group (P9)."""

from __future__ import annotations

from collections.abc import Iterator

from accumlint.checks.base import Hit, Rule
from accumlint.findings import Severity
from accumlint.model import FileModel


class PartialFinalGroup(Rule):
    """ACC005: the epoch's last partial group leaks into the next epoch, is dropped, or is mis-weighted"""

    code = "ACC005"
    name = "partial-final-group"
    severity = Severity.WARNING
    principle = "P9"
    summary = "the epoch's last partial group leaks into the next epoch, is dropped, or is mis-weighted"

    def check(self, model: FileModel) -> Iterator[Hit]:
        return iter(())  # SCAFFOLD: to be written
