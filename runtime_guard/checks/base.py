"""What every family of runtime checks shares: the codes the guard checks (from the spec), their
fix and meaning texts, the finding constructor and readers of a group's event trace."""


from __future__ import annotations

from accumlint.spec import RULES, Runtime, help_text, spec_of
from runtime_guard.events import BACKWARD, FORWARD
from runtime_guard.record import RunRecord
from runtime_guard.report import RuntimeFinding
from runtime_guard.trace import Microbatch, ObservedEvent, ObservedGroup

RuntimeCheck = Runtime
"""How the guard observes one code: the ``runtime`` entry of its spec (``accumlint/spec/__init__.py``)."""

#: The codes the guard checks, and how (every spec with a ``runtime`` entry).
RUNTIME_CHECKS: dict[str, Runtime] = {rule.code: rule.runtime for rule in RULES if rule.runtime is not None}
#: The codes read from the code only (no ``runtime`` entry: each rule's page says why the guard
#: cannot observe it); the card says so for each, instead of leaving them out.
STATIC_ONLY: tuple[str, ...] = tuple(rule.code for rule in RULES if rule.runtime is None)
#: The fix and the meaning printed with a finding: the same words as the linter's (the spec's).
FIXES = {code: spec_of(code).fix for code in RUNTIME_CHECKS}
MEANINGS = {code: spec_of(code).meaning for code in RUNTIME_CHECKS}


def finding(code: str, group: int | None, microbatch: int | None, observed: str, evidence: str = "",
             site_fix: str = "") -> RuntimeFinding:
    """A finding of ``code``: its help is the spec's fix and ``site_fix``, composed as the
    linter's (:func:`accumlint.spec.help_text`)."""
    return RuntimeFinding(code, group, microbatch, observed, MEANINGS[code], help_text(spec_of(code), site_fix),
                          evidence)


def trace(events: list[ObservedEvent]) -> str:
    return " ".join(e.kind for e in events)


def run_trace(rec: RunRecord) -> str:
    return " ‖ ".join(trace(g.events) + ("*" if g.tail else "") for g in rec.groups)


def between(group: ObservedGroup, start: int, end: int, kind: str) -> list[ObservedEvent]:
    return [e for e in group.events if e.kind == kind and start < e.seq < end]


def forward_seq(group: ObservedGroup, index: int) -> int:
    return [e.seq for e in group.events if e.kind == FORWARD][index]


def backward_end_seq(group: ObservedGroup, mb: Microbatch) -> int | None:
    seqs = [e.seq for e in group.events if e.kind == BACKWARD and e.microbatch == mb.index]
    return seqs[-1] if seqs else None
