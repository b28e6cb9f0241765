"""Output formats for ``accumlint check``: ``text`` (full), ``concise`` and ``json``.

Every formatter takes the findings (any order; they are sorted here) and returns the
text to print; :func:`render` picks one by name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from accumlint.findings import Finding
from accumlint.output.json import format_json, format_json_statistics
from accumlint.output.text import (
    SourceLines,
    format_concise,
    format_full,
    format_statistics,
    sort_findings,
    summary_line,
)

FORMATS = ("text", "concise", "json")

__all__ = [
    "FORMATS",
    "SourceLines",
    "format_concise",
    "format_full",
    "format_json",
    "format_json_statistics",
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
    """The findings in ``output_format`` (or their per-code statistics), without a summary line."""
    findings = list(findings)
    if output_format == "json":
        return format_json_statistics(findings) if statistics else format_json(findings)
    if statistics:
        return format_statistics(findings, color=color)
    if output_format == "concise":
        return format_concise(findings, color=color)
    if output_format == "text":
        return format_full(findings, source_lines=source_lines, color=color)
    raise ValueError(f"unknown output format {output_format!r}; allowed: {', '.join(FORMATS)}")
