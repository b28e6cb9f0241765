"""reviewdog's Diagnostic Format (``--output-format rdjson``): one ``DiagnosticResult`` object
(https://github.com/reviewdog/reviewdog/tree/master/proto/rdf, ``jsonschema/DiagnosticResult.json``).

Positions are 1-based; reviewdog counts columns in UTF-8 bytes, so a column is converted from
the finding's code points with the flagged line's text where it is available. A finding with a
mechanical fix carries it as ``suggestions`` (each edit: a range and its replacement text). A
notebook finding's range is in the ``.ipynb`` file's own lines (reviewdog matches them against
the diff), its columns in bytes of those JSON lines; its fixes are not offered as suggestions
(an edit of a cell is not an edit of one JSON line).
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from accumlint.report.output.text import Fixes, Incomplete, SourceLines, incomplete_reasons, sort_findings
from accumlint.spec.findings import Finding, Severity

SEVERITIES = {Severity.ERROR: "ERROR", Severity.WARNING: "WARNING", Severity.INFO: "INFO"}
SOURCE = {"name": "accumlint", "url": "https://github.com/accumlint/accumlint"}


def _byte_column(lines: list[str] | None, row: int, column: int) -> int:
    if lines is None or not 1 <= row <= len(lines):
        return column
    return len(lines[row - 1][: column - 1].encode("utf-8", "surrogateescape")) + 1


def _position(lines: list[str] | None, row: int, column: int) -> dict:
    return {"line": row, "column": _byte_column(lines, row, column)}


def format_rdjson(
    findings: Iterable[Finding], *, source_lines: SourceLines | None = None, fixes: Fixes | None = None,
    incomplete: Incomplete | None = None,
) -> str:
    """``findings`` as an rdjson ``DiagnosticResult``, then a warning per reason a file was not fully
    checked (``incomplete``: path -> reasons)."""
    diagnostics = []
    lines_of: dict[str, list[str] | None] = {}
    for finding in sort_findings(findings):
        if finding.path not in lines_of:
            lines_of[finding.path] = None if source_lines is None else source_lines(finding.path)
        lines = lines_of[finding.path]
        line, column, end_line, end_column = finding.in_file
        end = (end_line or line, end_column or column + 1)
        diagnostic: dict = {
            "message": finding.message,
            "location": {
                "path": finding.path,
                "range": {
                    "start": _position(lines, line, column),
                    "end": _position(lines, *end),
                },
            },
            "severity": SEVERITIES[finding.severity],
            "source": SOURCE,
            "code": {"value": finding.code, "url": finding.url} if finding.url else {"value": finding.code},
        }
        fix = None if finding.cell else (fixes or {}).get(finding)
        if fix is not None:
            diagnostic["suggestions"] = [
                {
                    "range": {"start": _position(lines, *edit.location), "end": _position(lines, *edit.end_location)},
                    "text": edit.content,
                }
                for edit in fix.edits
            ]
        diagnostics.append(diagnostic)
    diagnostics += [
        {"message": f"not fully checked: {reason}", "location": {"path": path}, "severity": "WARNING",
         "source": SOURCE}
        for path, reason in incomplete_reasons(incomplete)
    ]
    return json.dumps({"source": SOURCE, "diagnostics": diagnostics}, indent=2)
