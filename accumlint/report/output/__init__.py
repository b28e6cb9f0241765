"""Output formats for ``accumlint check``: text, concise, JSON, SARIF, CI annotations, JUnit.

The formats: ``text`` (full), ``concise``, ``json``, ``json-lines``, ``sarif``, ``github``
(workflow-command annotations), ``gitlab`` (Code Quality), ``rdjson`` (reviewdog) and ``junit``.

Every formatter takes the findings (any order; they are sorted here) and returns the
text to print; :func:`render` picks one by name.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from typing import Any

from accumlint.report.output.text import (
    Fixes,
    Incomplete,
    Loops,
    SourceLines,
    fixable_counts,
    format_concise,
    format_full,
    format_statistics,
    not_fully_checked,
    sort_findings,
    summary_line,
)
from accumlint.spec.findings import Finding

#: the machine formats' formatters (name -> module), each loaded at its first use: a run prints
#: one format, and the people's formats (:mod:`accumlint.report.output.text`) start the fastest
_LOADED_ON_USE = {
    "format_github": "github",
    "format_gitlab": "gitlab",
    "format_json": "json",
    "format_json_lines": "json",
    "format_json_statistics": "json",
    "format_junit": "junit",
    "format_rdjson": "rdjson",
    "format_sarif": "sarif",
}

FORMATS = ("text", "concise", "json", "json-lines", "sarif", "github", "gitlab", "rdjson", "junit")
#: The formats for people: a summary line follows them.
HUMAN_FORMATS = ("text", "concise")
#: The formats that show fixes (so computing them is worth it); ``--statistics`` also does.
FIX_FORMATS = ("text", "concise", "json", "json-lines", "sarif", "rdjson")

__all__ = [
    "FIX_FORMATS",
    "FORMATS",
    "HUMAN_FORMATS",
    "Fixes",
    "Incomplete",
    "SourceLines",
    "fixable_counts",
    "format_concise",
    "format_full",
    "format_github",
    "format_gitlab",
    "format_json",
    "format_json_lines",
    "format_json_statistics",
    "format_junit",
    "format_rdjson",
    "format_sarif",
    "format_statistics",
    "not_fully_checked",
    "render",
    "sort_findings",
    "summary_line",
]


def _formatter(name: str) -> Callable[..., str]:
    """The machine format's formatter ``name`` (:data:`_LOADED_ON_USE`), its module imported now."""
    formatter: Callable[..., str] = getattr(importlib.import_module(f"{__name__}.{_LOADED_ON_USE[name]}"), name)
    return formatter


def __getattr__(name: str) -> Any:
    """``accumlint.report.output.format_sarif`` and the other machine formatters, loaded on use."""
    if name in _LOADED_ON_USE:
        return _formatter(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def render(
    findings: Iterable[Finding],
    output_format: str,
    *,
    source_lines: Callable[..., list[str] | None] | None = None,
    color: bool = False,
    statistics: bool = False,
    fixes: Fixes | None = None,
    unsafe: bool = False,
    show_fixes: bool = False,
    incomplete: Incomplete | None = None,
    loops: Loops = (),
) -> str:
    """The findings in ``output_format`` (or their per-code statistics), without a summary line.

    ``fixes`` maps findings to their mechanical fixes (``[*]`` in text, ``fix`` in JSON, ``fixes`` in
    SARIF, ``suggestions`` in rdjson); ``unsafe``: ``--unsafe-fixes`` is on, so unsafe fixes count as
    applied. ``--statistics`` is JSON for ``json`` and a text table for every other format; it
    counts ``loops``, the accumulation loops with their undecided reasons (empty: decided), too.
    ``incomplete``: the files that were not fully checked and why (path -> reasons): SARIF reports
    them as tool notifications of a run that did not succeed, JUnit as errors, GitHub, GitLab and
    rdjson as warnings of their own (the summary line of the text formats and the exit status read
    them too; ``json`` and ``json-lines`` keep ruff's list of findings).
    """
    findings = list(findings)
    if output_format == "json":
        if statistics:
            return _formatter("format_json_statistics")(findings, fixes, unsafe, loops)
        return _formatter("format_json")(findings, fixes)
    if statistics:
        return format_statistics(findings, color=color, fixes=fixes, unsafe=unsafe, loops=loops)
    if output_format == "concise":
        return format_concise(findings, color=color, fixes=fixes, unsafe=unsafe)
    if output_format == "text":
        return format_full(
            findings, source_lines=source_lines, color=color, fixes=fixes, unsafe=unsafe, show_fixes=show_fixes
        )
    if output_format == "json-lines":
        return _formatter("format_json_lines")(findings, fixes)
    if output_format == "sarif":
        return _formatter("format_sarif")(findings, fixes, incomplete)
    if output_format == "github":
        return _formatter("format_github")(findings, incomplete)
    if output_format == "gitlab":
        return _formatter("format_gitlab")(findings, incomplete)
    if output_format == "rdjson":
        return _formatter("format_rdjson")(findings, source_lines=source_lines, fixes=fixes, incomplete=incomplete)
    if output_format == "junit":
        return _formatter("format_junit")(findings, incomplete)
    raise ValueError(f"unknown output format {output_format!r}; allowed: {', '.join(FORMATS)}")
