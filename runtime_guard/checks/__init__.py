"""The rules of the catalogue, evaluated on the observed trace (the linter's codes).

One module per family, with the linter's family names (``accumlint/checks/``).

``RUNTIME_CHECKS`` says, per code, what the guard needs to observe it; the catalogue test
uses it to decide which expected codes of a ``bad_*.py`` example a run must reproduce.
Each check stays silent where the evidence is ambiguous (precision over recall): resets are
judged by fingerprints before and after (a framework no-op ``zero_grad`` is not a reset),
and group-structure findings switch off the checks that assume the groups are right.
"""

from __future__ import annotations

from runtime_guard.checks.base import FIXES, MEANINGS, RUNTIME_CHECKS, STATIC_ONLY, RuntimeCheck
from runtime_guard.checks.data_parallel import data_parallel
from runtime_guard.checks.figures import logged_rates, rate_status, rates, resume, resumed_counters
from runtime_guard.checks.gradient_ops import gradient_ops
from runtime_guard.checks.memory import graph_findings, graphs, kept_graph_unobservable
from runtime_guard.checks.normalization import normalization
from runtime_guard.checks.resets import resets
from runtime_guard.checks.schedule import (
    lr_written_each_microbatch,
    scheduler_indexed_by_microbatch,
    scheduler_owners,
    scheduler_steps,
)
from runtime_guard.checks.tail import partial_group
from runtime_guard.checks.updates import structure, weight_averages
from runtime_guard.inference import (
    LastGroup,
    Normalization,
    infer_normalization,
    last_group,
    microbatch_size,
    normalization_tolerance,
)
from runtime_guard.record import RunRecord
from runtime_guard.report import RuntimeFinding

__all__ = [
    "FIXES", "MEANINGS", "RUNTIME_CHECKS", "STATIC_ONLY", "LastGroup", "Normalization", "RuntimeCheck",
    "evaluate",
    "graph_findings", "infer_normalization", "kept_graph_unobservable", "last_group", "microbatch_size",
    "normalization_tolerance", "rate_status", "rates", "resume", "scheduler_owners",
]


def evaluate(rec: RunRecord) -> list[RuntimeFinding]:
    """Every runtime check on the record, in code order."""
    findings, structure_bad = structure(rec)
    findings += list(partial_group(rec))
    findings += list(weight_averages(rec))
    findings += list(resets(rec, structure_bad))
    findings += list(graphs(rec))
    findings += list(gradient_ops(rec))
    scheduled = list(scheduler_steps(rec))
    findings += scheduled or list(scheduler_indexed_by_microbatch(rec)) or list(lr_written_each_microbatch(rec))
    findings += list(data_parallel(rec))
    findings += list(normalization(rec))
    findings += list(logged_rates(rec))
    findings += list(resumed_counters(rec))
    return sorted(findings, key=lambda f: (f.code, f.group if f.group is not None else -1))
