"""The epoch's partial group at run time (ACC005), from the classification in runtime_guard.inference."""

from __future__ import annotations

from collections.abc import Iterator

from runtime_guard.checks.base import finding, run_trace
from runtime_guard.inference import last_group
from runtime_guard.record import RunRecord
from runtime_guard.report import RuntimeFinding


def partial_group(rec: RunRecord) -> Iterator[RuntimeFinding]:
    lg = last_group(rec)
    if lg.finding is not None:
        yield finding("ACC005", lg.group, None, lg.finding, run_trace(rec), lg.site_fix)
