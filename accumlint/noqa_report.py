"""Checking the ``# noqa`` directives themselves: unknown codes and unused suppressions.

* An ``ACC`` code in a directive that names no rule (``# noqa: ACC777``) is always reported,
  as a warning on stderr: it suppresses nothing and is most likely a typo.
* ``ACC990 unused-noqa`` (off by default, like ruff's ``RUF100``; enable it with
  ``--extend-select ACC990``) reports the ``ACC`` codes of a directive (``# noqa: ...`` or
  ``# accumlint: noqa: ...`` after code) that suppressed nothing on its line (or, for a
  file-level ``# accumlint: noqa`` on a line of its own, in the file): the bug was fixed, the
  line moved, or the rule is not enabled. Codes of other tools (``E501``) and bare
  ``# noqa`` comments, which other linters share, are never reported.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from accumlint.findings import Finding, Severity
from accumlint.spec import UNUSED_NOQA_CODE, spec_of
from accumlint.suppression import comment_directives, comments

UNUSED_NOQA_NAME = spec_of(UNUSED_NOQA_CODE).name
UNUSED_NOQA_URL = spec_of(UNUSED_NOQA_CODE).url
UNUSED_NOQA_PAGE = """\
# ACC990 unused-noqa

info · off by default (enable with `--extend-select ACC990` or `select = ["ALL"]`)

## What it does

Flags the `ACC` codes of a `# noqa: ...` or `# accumlint: noqa: ...` directive (or of
a file-level `# accumlint: noqa: ...`) that suppressed no finding: the bug was fixed, the
code moved to another line, the code is not enabled, or it names no rule at all. Codes of other
tools (`E501`, `F401`) and bare `# noqa` comments are left alone, since other linters
read them too.

## Why is this bad

A stale suppression hides the next real finding on that line: when the accumulation loop
is edited again, a genuine bug there is silenced by a comment nobody remembers writing.

## Fix

Remove the code from the directive (or the whole comment when no code is left).
"""

_ACC = re.compile(r"^ACC\d+$")


@dataclass(frozen=True)
class NoqaUse:
    """One directive: where it is, whether it is file-wide, and the ``ACC`` codes it names."""

    line: int
    column: int
    file_wide: bool
    codes: tuple[str, ...]


def directives(text: str) -> list[NoqaUse]:
    """Every ``noqa`` directive of ``text`` that names codes, with its position (1-based: the
    column of its ``#``; two directives may share a comment)."""
    lines = text.splitlines()
    found = []
    for line, comment, own_line in comments(text):
        column = lines[line - 1].find(comment) + 1 if line <= len(lines) else 1
        for written in comment_directives(comment, own_line):
            if written.codes:
                found.append(NoqaUse(line, max(column, 1) + written.start, written.file_wide, written.codes))
    return found


def _known(code: str, known: Iterable[str]) -> bool:
    return any(k.startswith(code) for k in known)


#: a line where a directive could name an ``ACC`` code (codes follow ``noqa`` on its line)
_MAY_NAME_ACC = re.compile(r"noqa[^\n]*acc", re.IGNORECASE)


def unknown_codes(text: str, known: Sequence[str]) -> list[tuple[int, str]]:
    """``(line, code)`` for every ``ACC`` code in a directive that matches no rule."""
    if _MAY_NAME_ACC.search(text) is None:  # most files with noqa name other tools' codes only
        return []  # and finding the comments exactly means running the (pure Python) tokenizer
    return [
        (use.line, code)
        for use in directives(text)
        for code in use.codes
        if _ACC.match(code) and not _known(code, known)
    ]


def unused_noqa(
    path: str, text: str, suppressed: Sequence[Finding], known: Sequence[str], enabled: Iterable[str]
) -> list[Finding]:
    """``ACC990`` findings for the directives whose ``ACC`` codes suppressed nothing.

    ``suppressed`` are the findings that the directives removed; ``enabled`` the codes
    that ran on this file.
    """
    enabled = frozenset(enabled)
    findings = []
    for use in directives(text):
        used = [f for f in suppressed if use.file_wide or f.line == use.line]
        unused, unknown, disabled = [], [], []
        for code in use.codes:
            if not _ACC.match(code) or any(f.code.startswith(code) for f in used):
                continue
            if not _known(code, known):
                unknown.append(code)
            elif not any(c.startswith(code) for c in enabled):
                disabled.append(code)
            else:
                unused.append(code)
        parts = [
            f"{label}: {', '.join(codes)}"
            for label, codes in (("unused", unused), ("non-enabled", disabled), ("unknown", unknown))
            if codes
        ]
        if not parts:
            continue
        findings.append(
            Finding(
                path=path,
                line=use.line,
                column=use.column,
                code=UNUSED_NOQA_CODE,
                name=UNUSED_NOQA_NAME,
                severity=Severity.INFO,
                message=f"`noqa` directive suppresses nothing for these codes ({'; '.join(parts)})",
                fix="remove these codes from the directive (the whole comment if none is left)",
                url=UNUSED_NOQA_URL,
            )
        )
    return findings
