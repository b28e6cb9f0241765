"""Machine-readable output: a JSON list of findings in ruff's shape."""

from __future__ import annotations

import json
from collections.abc import Iterable

from accumlint.findings import Finding
from accumlint.output.text import sort_findings, statistics


def format_json(findings: Iterable[Finding]) -> str:
    """A JSON list of :meth:`Finding.to_json` objects, sorted by filename, row and column."""
    return json.dumps([f.to_json() for f in sort_findings(findings)], indent=2)


def format_json_statistics(findings: Iterable[Finding]) -> str:
    """``--statistics`` as JSON: ``[{"code", "name", "count"}]``, most frequent first."""
    rows = [{"code": code, "name": name, "count": n} for code, name, n in statistics(findings)]
    return json.dumps(rows, indent=2)
