"""Human-readable output: the full ruff-like format, the concise one, statistics and summary."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

import click

from accumlint.findings import Finding, Severity

SourceLines = Callable[..., "list[str] | None"]

_SEVERITY_COLOR = {Severity.ERROR: "red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}


def sort_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Findings in report order: by path, line, column, then code."""
    return sorted(findings, key=lambda f: (f.path, f.cell, f.line, f.column, f.code, f.message))


def _style(text: str, color: bool, **styles: Any) -> str:
    return click.style(text, **styles) if color else text


def _location(finding: Finding, color: bool) -> str:
    path = _style(finding.path, color, bold=True)
    return f"{path}{finding.where[len(finding.path):]}:"


def _code(finding: Finding, color: bool) -> str:
    return _style(finding.code, color, fg=_SEVERITY_COLOR.get(finding.severity, "red"), bold=True)


def format_concise(findings: Iterable[Finding], *, color: bool = False) -> str:
    """One line per finding: ``path:line:col: CODE message``."""
    return "\n".join(f"{_location(f, color)} {_code(f, color)} {f.message}{_via(f)}" for f in sort_findings(findings))


def _via(finding: Finding) -> str:
    return f" ({finding.via})" if finding.related else ""


def _caret_line(source: str, finding: Finding) -> tuple[str, str]:
    """The flagged line (tabs kept) and the marker line under it (``^`` over the node's span)."""
    start = max(finding.column - 1, 0)
    text = source.rstrip("\r\n")
    if not finding.end_line:  # a point (e.g. a syntax error), not a node
        end = start + 1
    elif finding.end_line == finding.line and finding.end_column > finding.column:
        end = finding.end_column - 1
    else:  # the node goes on below: mark the rest of its first line
        end = len(text.rstrip())
    width = max(min(end, len(text)) - start, 1)
    # keep tabs in the indent so the carets line up under the same characters
    indent = "".join("\t" if ch == "\t" else " " for ch in text[:start])
    return text, indent + "^" * width


def _full_one(finding: Finding, lines: list[str] | None, color: bool) -> list[str]:
    severity = _style(f"[{finding.severity.value}]", color, fg=_SEVERITY_COLOR.get(finding.severity))
    out = [f"{_location(finding, color)} {_code(finding, color)} {severity} {finding.message}{_via(finding)}"]
    if lines is not None and 1 <= finding.line <= len(lines):
        number = str(finding.line)
        gutter = " " * len(number)
        text, carets = _caret_line(lines[finding.line - 1], finding)
        label = _style(f"{carets} {finding.name}", color, fg=_SEVERITY_COLOR.get(finding.severity), bold=True)
        bar = _style("|", color, fg="blue", bold=True)
        out += [
            f"{gutter} {bar}",
            f"{_style(number, color, fg='blue', bold=True)} {bar} {text}",
            f"{gutter} {bar} {label}",
            f"{gutter} {bar}",
        ]
    if finding.fix:
        out.append(f"  {_style('help:', color, fg='cyan', bold=True)} {finding.fix}")
    if finding.url:
        out.append(f"  {_style('see:', color, dim=True)} {finding.url}")
    return out


def format_full(
    findings: Iterable[Finding], *, source_lines: SourceLines | None = None, color: bool = False
) -> str:
    """The full format: header line, the source line with carets, ``help:`` and ``see:`` lines.

    ``source_lines(path)`` returns the file's lines (or ``None`` when unavailable, in which
    case the snippet is left out); for a notebook finding it is called as
    ``source_lines(path, cell)`` and returns that cell's lines.
    """
    blocks = []
    cache: dict[tuple[str, int], list[str] | None] = {}
    for finding in sort_findings(findings):
        key = (finding.path, finding.cell)
        if key not in cache:
            if source_lines is None:
                cache[key] = None
            else:  # a notebook's snippet comes from the finding's cell
                cache[key] = source_lines(finding.path, finding.cell) if finding.cell else source_lines(finding.path)
        blocks.append("\n".join(_full_one(finding, cache[key], color)))
    return "\n\n".join(blocks)


def statistics(findings: Iterable[Finding]) -> list[tuple[str, str, int]]:
    """``(code, name, count)`` per code, most frequent first, then by code."""
    counts = Counter((f.code, f.name) for f in findings)
    return sorted(((code, name, n) for (code, name), n in counts.items()), key=lambda t: (-t[2], t[0]))


def format_statistics(findings: Iterable[Finding], *, color: bool = False) -> str:
    """Like ``ruff check --statistics``: ``count<TAB>code<TAB>name`` per code."""
    rows = statistics(findings)
    if not rows:
        return ""
    width = max(len(str(n)) for _, _, n in rows)
    return "\n".join(
        f"{n:>{width}}\t{_style(code, color, fg='red', bold=True)}\t{name}" for code, name, n in rows
    )


def summary_line(count: int, *, color: bool = False) -> str:
    """``Found N findings.`` or ``All checks passed!``."""
    if count == 0:
        return _style("All checks passed!", color, fg="green", bold=True)
    return f"Found {count} finding{'s' if count != 1 else ''}."
