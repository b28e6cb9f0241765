"""Output formats for ``accumlint check``: ``text`` (full), ``concise``, ``json``, ``sarif``,
``github`` (workflow-command annotations) and ``junit``.

Every formatter takes the findings (any order; they are sorted here) and returns the
text to print; :func:`render` picks one by name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from accumlint.findings import Finding
from accumlint.output.github import format_github
from accumlint.output.json import format_json, format_json_statistics
from accumlint.output.junit import format_junit
from accumlint.output.sarif import format_sarif
from accumlint.output.text import (
    SourceLines,
    format_concise,
    format_full,
    format_statistics,
    sort_findings,
    summary_line,
)

FORMATS = ("text", "concise", "json", "sarif", "github", "junit")
#: The formats for people: a summary line follows them.
HUMAN_FORMATS = ("text", "concise")

__all__ = [
    "FORMATS",
    "HUMAN_FORMATS",
    "SourceLines",
    "format_concise",
    "format_full",
    "format_github",
    "format_json",
    "format_json_statistics",
    "format_junit",
    "format_sarif",
    "format_statistics",
    "render",
    "sort_findings",
    "summary_line",
]


def render(
    findings: Iterable[Finding],
    output_format: str,
    *,
    source_lines: Callable[[str], list[str] | None] | None = None,
    color: bool = False,
    statistics: bool = False,
) -> str:
    """The findings in ``output_format`` (or their per-code statistics), without a summary line.

    ``--statistics`` is JSON for ``json`` and a text table for every other format.
    """
    findings = list(findings)
    if output_format == "json":
        return format_json_statistics(findings) if statistics else format_json(findings)
    if statistics:
        return format_statistics(findings, color=color)
    if output_format == "concise":
        return format_concise(findings, color=color)
    if output_format == "text":
        return format_full(findings, source_lines=source_lines, color=color)
    if output_format == "sarif":
        return format_sarif(findings)
    if output_format == "github":
        return format_github(findings)
    if output_format == "junit":
        return format_junit(findings)
    raise ValueError(f"unknown output format {output_format!r}; allowed: {', '.join(FORMATS)}")
