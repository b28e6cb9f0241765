"""Checking the ``# noqa`` directives themselves: unknown codes and unused suppressions.

* An ``ACC`` code in a directive that names no rule (``# noqa: ACC777``) is always reported,
  as a warning on stderr: it suppresses nothing and is most likely a typo.
* ``ACC990 unused-noqa`` (off by default, like ruff's ``RUF100``; enable it with
  ``--extend-select ACC990``) reports the ``ACC`` codes of a directive (``# noqa: ...`` or
  ``# accumlint: noqa: ...`` after code) that suppressed nothing on its line (or, for a
  file-level ``# accumlint: noqa`` on a line of its own, in the file): the bug was fixed, the
  line moved, or the rule is not enabled. Codes of other tools (``E501``) and bare
  ``# noqa`` comments, which other linters share, are never reported. Its fix
  (:func:`remove_codes`) takes those codes out of the directive.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from accumlint.files.text_edits import SAFE, SuggestedFix, split_lines, text_edits
from accumlint.noqa.suppression import comment_directives, comments
from accumlint.spec import UNUSED_NOQA_CODE, spec_of
from accumlint.spec.findings import Finding, Severity

UNUSED_NOQA_NAME = spec_of(UNUSED_NOQA_CODE).name
UNUSED_NOQA_URL = spec_of(UNUSED_NOQA_CODE).url
FIX_MESSAGE = "remove these codes from the directive (the whole comment if none is left)"
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

Remove the code from the directive (or the whole comment when no code is left). `--fix`
does it (a safe fix): it keeps the codes of other tools (`# noqa: ACC001, E501` becomes
`# noqa: E501`), and removes a directive left without a code together with the reason
that follows its codes; a comment after a second `#` stays.
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


@dataclass(frozen=True)
class UnusedCodes:
    """The ``ACC`` codes of one directive that suppressed nothing, by why."""

    use: NoqaUse
    unused: tuple[str, ...]  #: enabled codes that matched no finding there
    disabled: tuple[str, ...]  #: codes of rules that did not run on the file
    unknown: tuple[str, ...]  #: codes that name no rule

    @property
    def codes(self) -> frozenset[str]:
        """Every code to take out of the directive."""
        return frozenset((*self.unused, *self.disabled, *self.unknown))

    def message(self) -> str:
        """The finding's message: the codes, grouped by why they suppress nothing."""
        parts = [
            f"{label}: {', '.join(codes)}"
            for label, codes in (("unused", self.unused), ("non-enabled", self.disabled), ("unknown", self.unknown))
            if codes
        ]
        return f"`noqa` directive suppresses nothing for these codes ({'; '.join(parts)})"


def unused_codes(
    text: str, suppressed: Sequence[Finding], known: Sequence[str], enabled: Iterable[str]
) -> list[UnusedCodes]:
    """The directives of ``text`` with ``ACC`` codes that suppressed nothing, and those codes.

    ``suppressed`` are the findings that the directives removed; ``enabled`` the codes
    that ran on this file.
    """
    enabled = frozenset(enabled)
    found = []
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
        if unused or unknown or disabled:
            found.append(UnusedCodes(use, tuple(unused), tuple(disabled), tuple(unknown)))
    return found


def unused_noqa(
    path: str,
    text: str,
    suppressed: Sequence[Finding],
    known: Sequence[str],
    enabled: Iterable[str],
    fixes: dict[Finding, SuggestedFix] | None = None,
) -> list[Finding]:
    """``ACC990`` findings for the directives whose ``ACC`` codes suppressed nothing
    (:func:`unused_codes`); ``fixes``, where given, receives each finding's fix: its directive
    without those codes (:func:`remove_codes`)."""
    findings = []
    for found in unused_codes(text, suppressed, known, enabled):
        finding = Finding(
            path=path,
            line=found.use.line,
            column=found.use.column,
            code=UNUSED_NOQA_CODE,
            name=UNUSED_NOQA_NAME,
            severity=Severity.INFO,
            message=found.message(),
            fix=FIX_MESSAGE,
            url=UNUSED_NOQA_URL,
        )
        findings.append(finding)
        if fixes is not None:
            fixed = remove_codes(text, {found.use.line: found.codes})
            fixes[finding] = SuggestedFix(SAFE, FIX_MESSAGE, tuple(text_edits(text, fixed)))
    return findings


def remove_unused(
    text: str, suppressed: Sequence[Finding], known: Sequence[str], enabled: Iterable[str]
) -> tuple[str, int]:
    """``text`` with every ``ACC990`` fixed (``--fix``), and how many directives changed."""
    found = unused_codes(text, suppressed, known, enabled)
    removals: dict[int, set[str]] = {}
    for item in found:  # two directives may share a line
        removals.setdefault(item.use.line, set()).update(item.codes)
    return remove_codes(text, removals), len(found)


def remove_codes(text: str, removals: Mapping[int, Collection[str]]) -> str:
    """``text`` with the codes ``removals`` names for a line (upper case) taken out of the
    directive in that line's comment.

    A directive left without a code goes whole, with the reason that follows its codes (as
    ruff's ``RUF100`` fix; a later ``# ...`` comment stays): a bare ``# noqa`` would suppress
    everything. A line that held nothing else goes too. Other tools' codes (``E501``) stay.
    """
    lines = split_lines(text)
    for row, comment, own_line in comments(text):
        codes = removals.get(row)
        if not codes or row > len(lines):
            continue
        new_comment = _without(comment, own_line, frozenset(codes))
        if new_comment == comment:
            continue
        raw = lines[row - 1]
        body = raw.rstrip("\r\n")
        at = len(body) - len(comment) if body.endswith(comment) else body.rfind(comment)
        code = body[:at] if at >= 0 else body
        if new_comment:
            lines[row - 1] = code + new_comment + raw[len(body):]
        elif code.strip():
            lines[row - 1] = code.rstrip() + raw[len(body):]
        else:
            lines[row - 1] = ""
    return "".join(lines)


def _without(comment: str, own_line: bool, codes: frozenset[str]) -> str:
    """``comment`` with ``codes`` out of its directives ("" when nothing of the comment is left)."""
    for written in reversed(comment_directives(comment, own_line)):  # from the end: offsets stay valid
        if not written.codes:
            continue
        kept = [code for code in written.codes if code not in codes]
        if len(kept) == len(written.codes):
            continue
        if kept:
            head = comment[written.start : written.end]
            colon = head.rindex(":")  # the codes follow the directive's last colon
            comment = comment[: written.start] + head[: colon + 1] + " " + ", ".join(kept) + comment[written.end :]
            continue
        after = comment[written.end :]
        later = after.find("#")  # the reason ends at the next comment, which is not the directive's
        after = after[later:] if later >= 0 else ""
        before = comment[: written.start].rstrip()
        comment = f"{before} {after}" if before and after else before or after
    return comment
