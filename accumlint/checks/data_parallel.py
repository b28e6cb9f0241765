"""Data parallelism and counting: samples, replicas and denominators (P10–P12)."""

from __future__ import annotations

from collections.abc import Iterator

from accumlint.checks.base import Hit, Rule
from accumlint.findings import Severity
from accumlint.model import FileModel


class DuplicateSamplesAcrossReplicas(Rule):
    """ACC403: every replica reads the same samples: no distributed sampler or rank sharding"""

    code = "ACC403"
    name = "duplicate-samples-across-replicas"
    severity = Severity.ERROR
    principle = "P11"
    summary = "every replica reads the same samples: no distributed sampler or rank sharding"

    def check(self, model: FileModel) -> Iterator[Hit]:
        return iter(())  # SCAFFOLD: to be written


class EffectiveBatchCountsDevices(Rule):
    """ACC404: effective batch computed from the GPU count instead of the data-parallel size"""

    code = "ACC404"
    name = "effective-batch-counts-devices"
    severity = Severity.WARNING
    principle = "P12"
    summary = "effective batch computed from the GPU count instead of the data-parallel size"

    def check(self, model: FileModel) -> Iterator[Hit]:
        return iter(())  # SCAFFOLD: to be written


class GlobalDenominatorWithAveraging(Rule):
    """ACC405: global denominator on top of DDP's averaging: gradients 1/D too small"""

    code = "ACC405"
    name = "global-denominator-with-averaging"
    severity = Severity.ERROR
    principle = "P10"
    summary = "global denominator on top of DDP's averaging: gradients 1/D too small"

    def check(self, model: FileModel) -> Iterator[Hit]:
        return iter(())  # SCAFFOLD: to be written
