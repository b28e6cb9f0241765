"""Human-readable output: the full ruff-like format, the concise one, statistics and summary."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import click

from accumlint.spec.findings import Finding, LoopVerdict, Severity

if TYPE_CHECKING:
    from accumlint.run.suggested_fixes import SuggestedFix

SourceLines = Callable[..., "list[str] | None"]
#: each finding's mechanical fix (findings without one are absent)
Fixes = Mapping[Finding, "SuggestedFix"]
FIX_MARK = "[*]"

_SEVERITY_COLOR = {Severity.ERROR: "red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}
#: control characters of the checked files (C0 but tab, DEL, C1) shown as one visible character each,
#: so that a source line, a path or a message cannot drive the terminal (an OSC title or clipboard
#: write, a cursor move) and the carets under a line stay aligned
_VISIBLE = {**{code: 0x2400 + code for code in range(0x20) if code != 0x09}, 0x7F: 0x2421,
            **{code: 0xFFFD for code in range(0x80, 0xA0)}}


def printable(text: str) -> str:
    """``text`` with its control characters replaced, one for one: C0 (but tab) by the Unicode
    control pictures (ESC -> U+241B), DEL by U+2421, C1 by U+FFFD."""
    return text.translate(_VISIBLE)


def sort_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Findings in report order: by path, line, column, then code."""
    return sorted(findings, key=lambda f: (f.path, f.cell, f.line, f.column, f.code, f.message))


def _style(text: str, color: bool, **styles: Any) -> str:
    return click.style(text, **styles) if color else text


def _location(finding: Finding, color: bool) -> str:
    path = _style(printable(finding.path), color, bold=True)
    return f"{path}{finding.where[len(finding.path):]}:"


def _code(finding: Finding, color: bool) -> str:
    return _style(finding.code, color, fg=_SEVERITY_COLOR.get(finding.severity, "red"), bold=True)


def applies(finding: Finding, fixes: Fixes | None, unsafe: bool = False) -> bool:
    """Whether the finding has a fix that ``--fix`` (with ``unsafe``: ``--fix --unsafe-fixes``)
    applies: as its rule declares it, or as verified where the run verified ``fixes``."""
    fix = (fixes or {}).get(finding)
    return fix is not None and (fix.safe or unsafe)


def _mark(finding: Finding, fixes: Fixes | None, unsafe: bool, color: bool) -> str:
    return f" {_style(FIX_MARK, color, fg='cyan')}" if applies(finding, fixes, unsafe) else ""


def format_concise(
    findings: Iterable[Finding], *, color: bool = False, fixes: Fixes | None = None, unsafe: bool = False
) -> str:
    """One line per finding: ``path:line:col: CODE [*] message`` (``[*]``: ``--fix`` repairs it)."""
    return "\n".join(
        f"{_location(f, color)} {_code(f, color)}{_mark(f, fixes, unsafe, color)} {printable(f.message + _via(f))}"
        for f in sort_findings(findings)
    )


def _fix_lines(fix: SuggestedFix, lines: list[str] | None, color: bool) -> list[str]:
    """``--show-fixes``: the fix's edits as removed (``-``) and added (``+``) lines."""
    out = [f"  {_style('fix:', color, fg='cyan', bold=True)} ({fix.applicability}) {fix.message}"]
    for edit in fix.edits:
        (row, _), (end_row, end_column) = edit.location, edit.end_location
        if lines is not None:
            old = lines[row - 1 : end_row - 1 if end_column == 1 else end_row]
            out += [f"  {_style(f'{row + i:>4} -', color, fg='red')} {printable(text)}" for i, text in enumerate(old)]
        new = edit.content.splitlines()
        out += [f"  {_style(f'{row:>4} +', color, fg='green')} {printable(text)}" for text in new]
    return out


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


def _full_one(
    finding: Finding, lines: list[str] | None, color: bool, fixes: Fixes | None, unsafe: bool, show_fixes: bool
) -> list[str]:
    severity = _style(f"[{finding.severity.value}]", color, fg=_SEVERITY_COLOR.get(finding.severity))
    mark = _mark(finding, fixes, unsafe, color)
    out = [f"{_location(finding, color)} {_code(finding, color)}{mark} {severity} "
           f"{printable(finding.message + _via(finding))}"]
    if lines is not None and 1 <= finding.line <= len(lines):
        number = str(finding.line)
        gutter = " " * len(number)
        text, carets = _caret_line(lines[finding.line - 1], finding)
        text = printable(text)  # (one character for one: the carets stay under the node)
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
    fix = (fixes or {}).get(finding)
    if show_fixes and fix is not None:
        out += _fix_lines(fix, lines, color)
    return out


def format_full(
    findings: Iterable[Finding],
    *,
    source_lines: SourceLines | None = None,
    color: bool = False,
    fixes: Fixes | None = None,
    unsafe: bool = False,
    show_fixes: bool = False,
) -> str:
    """The full format: header line (``[*]`` after the code: ``--fix`` repairs it), the source line
    with carets, ``help:`` and ``see:`` lines, and with ``show_fixes`` the fix's edits.

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
        blocks.append("\n".join(_full_one(finding, cache[key], color, fixes, unsafe, show_fixes)))
    return "\n\n".join(blocks)


def statistics(
    findings: Iterable[Finding], fixes: Fixes | None = None, unsafe: bool = False
) -> list[tuple[str, str, int, int]]:
    """``(code, name, count, fixable)`` per code, most frequent first, then by code; ``fixable``
    counts the findings ``--fix`` (with ``unsafe``: ``--unsafe-fixes`` too) repairs."""
    findings = list(findings)
    counts = Counter((f.code, f.name) for f in findings)
    fixable = Counter((f.code, f.name) for f in findings if applies(f, fixes, unsafe))
    rows = [(code, name, n, fixable[code, name]) for (code, name), n in counts.items()]
    return sorted(rows, key=lambda t: (-t[2], t[0]))


#: The accumulation loops the check found, each with its sites and its undecided reasons (empty: decided).
Loops = Sequence[LoopVerdict]
#: what differs between two reasons of one kind: the code they quote, the names they repeat
_QUOTED = re.compile(r"`[^`\n]*`|(?<!\w)'[^'\n]*'(?!\w)")  # (not an apostrophe: "the loop's events")


def reason_kind(reason: str) -> str:
    """An undecided reason with the code it quotes elided (`` `…` ``), so that the loops left
    undecided for one reason count together: ``the condition `…` on the microbatch's data
    decides an event``."""
    return _QUOTED.sub(lambda quoted: f"{quoted.group()[0]}…{quoted.group()[0]}", reason)


def loop_statistics(loops: Loops) -> tuple[int, int, list[tuple[str, int]]]:
    """``(decided, undecided, [(reason kind, loops), ...])`` of ``loops``, the reasons most
    frequent first, then by text (a loop undecided for several reasons counts under each).
    Verdicts with the same sites are one loop that several entry points run (each script that
    starts one trainer): it counts once, decided where one of its entry points decides it, else
    undecided for all their reasons."""
    merged: dict[object, list[str] | None] = {}
    for index, loop in enumerate(loops):
        key = loop.sites or index  # (no sites: a loop of its own)
        if key in merged and merged[key] is None:
            continue
        merged[key] = None if not loop.reasons else [*(merged.get(key) or ()), *loop.reasons]
    undecided = [reasons for reasons in merged.values() if reasons]
    kinds = Counter(kind for reasons in undecided for kind in dict.fromkeys(map(reason_kind, reasons)))
    return len(merged) - len(undecided), len(undecided), sorted(kinds.items(), key=lambda t: (-t[1], t[0]))


def format_statistics(
    findings: Iterable[Finding], *, color: bool = False, fixes: Fixes | None = None, unsafe: bool = False,
    loops: Loops = (),
) -> str:
    """Like ``ruff check --statistics``: ``count<TAB>code<TAB>[*]<TAB>name`` per code (``[*]``:
    ``--fix`` repairs some of them; blank otherwise); then, where the files hold accumulation
    loops, how many the simulator decided and ``count<TAB>reason`` per kind of undecided reason."""
    rows = statistics(findings, fixes, unsafe)
    blank = " " * len(FIX_MARK)
    width = max((len(str(n)) for _, _, n, _ in rows), default=1)
    lines = [f"{n:>{width}}\t{_style(code, color, fg='red', bold=True)}\t{FIX_MARK if fixable else blank}\t{name}"
             for code, name, n, fixable in rows]
    if loops:
        decided, undecided, reasons = loop_statistics(loops)
        width = max((len(str(n)) for _, n in reasons), default=1)
        lines += [*([""] if lines else []), f"Accumulation loops: {decided} decided, {undecided} undecided"]
        lines += [f"{n:>{width}}\tundecided: {printable(reason)}" for reason, n in reasons]
    return "\n".join(lines)


def fixable_counts(findings: Iterable[Finding], fixes: Fixes | None, unsafe: bool = False) -> tuple[int, int]:
    """``(applied by --fix, more with --unsafe-fixes)`` (with ``unsafe``: all count as applied)."""
    findings = list(findings)
    now = sum(applies(f, fixes, unsafe) for f in findings)
    return now, sum(applies(f, fixes, True) for f in findings) - now


def _files(count: int) -> str:
    return f"{count} file{'s' if count != 1 else ''}"


def not_fully_checked(count: int) -> str:
    """The sentence a summary gives for ``count`` files that were not fully checked."""
    return f"{_files(count)} {'was' if count == 1 else 'were'} not fully checked."


#: the files that were not fully checked, and why (path -> reasons): :attr:`accumlint.run.runner.RunResult.incomplete`
Incomplete = Mapping[str, "Sequence[str]"]


def incomplete_reasons(incomplete: Incomplete | None) -> list[tuple[str, str]]:
    """``(path, reason)`` for each reason a file was not fully checked; a file with none of its
    own had an internal error (its message is on stderr)."""
    return [(path, reason) for path, reasons in (incomplete or {}).items()
            for reason in reasons or ["an internal error"]]


def summary_line(count: int, *, color: bool = False, fixable: int = 0, unsafe_fixable: int = 0,
                 incomplete: int = 0) -> str:
    """``Found N findings.`` or ``All checks passed!``, then, when some are fixable, a line
    ``[*] N fixable with `--fix` (M more with `--unsafe-fixes`).`` ``incomplete``: the number of
    files that were not fully checked (:attr:`accumlint.run.runner.RunResult.incomplete`): the
    summary says so, and never ``All checks passed!``."""
    if count == 0 and not incomplete:
        return _style("All checks passed!", color, fg="green", bold=True)
    if count == 0:
        return _style(f"No findings, but {not_fully_checked(incomplete)}", color, fg="yellow", bold=True)
    line = f"Found {count} finding{'s' if count != 1 else ''}."
    if incomplete:
        line += f" {not_fully_checked(incomplete)}"
    if fixable:
        more = f" ({unsafe_fixable} more with `--unsafe-fixes`)" if unsafe_fixable else ""
        line += f"\n{_style(FIX_MARK, color, fg='cyan')} {fixable} fixable with `--fix`{more}."
    elif unsafe_fixable:
        line += f"\n{unsafe_fixable} fixable with `--fix --unsafe-fixes`."
    return line
