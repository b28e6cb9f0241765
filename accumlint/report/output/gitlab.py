"""GitLab Code Quality (``--output-format gitlab``): a JSON list of issues in the Code Climate
subset GitLab reads (https://docs.gitlab.com/ci/testing/code_quality/#code-quality-report-format):
``description``, ``check_name``, ``fingerprint``, ``severity`` and ``location`` (``path`` and
``lines.begin``/``lines.end``: for a notebook, the lines of the ``.ipynb`` file itself).

The fingerprint is a SHA-256 of the path, the code, the message and the finding's rank among
identical ones in its file, so it stays the same when lines move and GitLab can tell new
findings from old ones in a merge request.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable

from accumlint.report.output.text import Incomplete, incomplete_reasons, sort_findings
from accumlint.spec.findings import Finding, Severity

SEVERITIES = {Severity.ERROR: "major", Severity.WARNING: "minor", Severity.INFO: "info"}


#: the ``check_name`` of the issue that says a file was not fully checked
NOT_FULLY_CHECKED = "not-fully-checked"


def _fingerprint(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode("utf-8", "surrogateescape")).hexdigest()


def format_gitlab(findings: Iterable[Finding], incomplete: Incomplete | None = None) -> str:
    """``findings`` as a GitLab Code Quality report, then one issue per reason a file was not
    fully checked (``incomplete``: path -> reasons)."""
    seen: Counter[tuple[str, str, str]] = Counter()
    issues = []
    for finding in sort_findings(findings):
        key = (finding.path, finding.code, finding.message)
        seen[key] += 1
        fingerprint = _fingerprint(*key, str(seen[key]))
        line, _, end_line, _ = finding.in_file
        issues.append(
            {
                "type": "issue",
                "description": f"{finding.code} {finding.message}",
                "check_name": finding.code,
                "categories": ["Bug Risk"],
                "fingerprint": fingerprint,
                "severity": SEVERITIES[finding.severity],
                "location": {
                    "path": finding.path,
                    "lines": {"begin": line, "end": end_line or line},
                },
            }
        )
    for path, reason in incomplete_reasons(incomplete):
        issues.append(
            {
                "type": "issue",
                "description": f"not fully checked: {reason}",
                "check_name": NOT_FULLY_CHECKED,
                "categories": ["Bug Risk"],
                "fingerprint": _fingerprint(path, NOT_FULLY_CHECKED, reason),
                "severity": "major",
                "location": {"path": path, "lines": {"begin": 1, "end": 1}},
            }
        )
    return json.dumps(issues, indent=2)
