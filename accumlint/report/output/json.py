"""Machine-readable output: a JSON list of findings in ruff's shape (``json``), or one finding per
line (``json-lines``)."""

from __future__ import annotations

import json
from collections.abc import Iterable

from accumlint.report.output.text import Fixes, Loops, loop_statistics, sort_findings, statistics
from accumlint.spec.findings import Finding


def finding_json(finding: Finding, fixes: Fixes | None = None) -> dict:
    """One finding as ruff prints it; ``fix`` holds the edits when the finding has a mechanical fix
    (``{applicability: safe|unsafe, message, edits: [{content, location, end_location}]}``), is
    ``display-only`` with no edits when only a sentence says how to repair it, else ``null``."""
    data = finding.to_json()
    fix = (fixes or {}).get(finding)
    if fix is not None:
        data["fix"] = fix.to_json()
    return data


def format_json(findings: Iterable[Finding], fixes: Fixes | None = None) -> str:
    """A JSON list of :func:`finding_json` objects, sorted by filename, row and column."""
    return json.dumps([finding_json(f, fixes) for f in sort_findings(findings)], indent=2)


def format_json_lines(findings: Iterable[Finding], fixes: Fixes | None = None) -> str:
    """``json-lines``: one :func:`finding_json` object per line, in report order."""
    return "\n".join(json.dumps(finding_json(f, fixes)) for f in sort_findings(findings))


def format_json_statistics(findings: Iterable[Finding], fixes: Fixes | None = None, unsafe: bool = False,
                           loops: Loops = ()) -> str:
    """``--statistics`` as JSON: ``{"findings": [{"code", "name", "count", "fixable"}],
    "accumulation_loops": {"decided", "undecided", "reasons": [{"reason", "count"}]}}``, codes and
    reasons most frequent first (``fixable``: how many of them ``--fix`` repairs; a reason's
    ``count``: the undecided loops it holds, see :func:`~accumlint.report.output.text.loop_statistics`)."""
    rows = [
        {"code": code, "name": name, "count": n, "fixable": fixable}
        for code, name, n, fixable in statistics(findings, fixes, unsafe)
    ]
    decided, undecided, reasons = loop_statistics(loops)
    return json.dumps({"findings": rows, "accumulation_loops": {
        "decided": decided, "undecided": undecided,
        "reasons": [{"reason": reason, "count": n} for reason, n in reasons]}}, indent=2)
