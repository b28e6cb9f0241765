"""``# noqa`` handling: line directives and the file-level ``# accumlint: noqa``.

The syntax follows ruff's:

* ``# noqa`` (bare) on a line suppresses every finding that starts on that line;
* ``# noqa: ACC001, ACC4`` (also ``# noqa:ACC001`` or codes separated by spaces)
  suppresses the named codes and code prefixes on that line (codes match case-insensitively);
* ``# accumlint: noqa: ACC001`` (or bare ``# accumlint: noqa``) after code on a line does
  the same as ``# noqa: ACC001`` (bare ``# noqa``): a directive of accumlint's own, which
  other tools never read, so ruff's ``RUF100``/``RUF102`` fixes leave it alone (they delete
  ``ACC`` codes from a ``# noqa`` unless ruff's config says ``external = ["ACC"]``). Both
  forms may share a line (``# noqa: E501  # accumlint: noqa: ACC001``);
* ``# accumlint: noqa`` in a comment on a line of its own suppresses the whole file, and
  ``# accumlint: noqa: ACC001`` suppresses those codes in the whole file.

A finding that spans several lines is suppressed by a directive on its first line.
``ACC000`` (the file could not be checked) is never suppressed. ``--ignore-noqa`` applies no
directive at all (the ``ignore`` argument of :func:`apply_noqa`, from the run's context).

Directives are read from real comments (found with :mod:`tokenize`), so ``"# noqa"``
inside a string does not count. When the file cannot be tokenized, a line-based regex
is used instead.
"""

from __future__ import annotations

import io
import re
import tokenize
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from accumlint.spec.findings import Finding

UNSUPPRESSIBLE = frozenset({"ACC000"})
#: the two forms of a line directive, ``noqa`` (shared with other linters) and ``accumlint``
#: (accumlint's own); the ``noqa-style`` setting chooses the one accumlint writes
NOQA_FORM = "noqa"
ACCUMLINT_FORM = "accumlint"
FORMS = (NOQA_FORM, ACCUMLINT_FORM)
#: how a directive of each form starts, as accumlint writes it
DIRECTIVE_START = {NOQA_FORM: "# noqa", ACCUMLINT_FORM: "# accumlint: noqa"}

# A code or code prefix as written in a directive: letters then digits (``ACC001``, ``ACC4``).
_CODE = r"[A-Za-z]+[0-9]+"
_CODES = rf"{_CODE}(?:(?:\s*,\s*|\s+){_CODE})*"

_TAIL = rf"(?P<sep>\s*:\s*(?P<codes>{_CODES})?)?"
_OWN = r"#\s*accumlint\s*:\s*noqa"

# The word ``noqa`` must be followed by the end of the comment, whitespace, ``#`` or ``:``
# (so ``noqafoo`` is not a directive). With ``:`` it must be followed by at least one code,
# otherwise the directive is invalid and ignored (as in ruff).
_END = r"(?=$|[\s#,]|(?<=:))"
_LINE_DIRECTIVE = re.compile(rf"#\s*noqa{_TAIL}{_END}", re.IGNORECASE)
#: accumlint's own line directive (``#`` must directly precede ``noqa`` in the other one, so
#: neither pattern matches inside the other's directives)
_ACCUMLINT_DIRECTIVE = re.compile(rf"{_OWN}{_TAIL}{_END}", re.IGNORECASE)
_FILE_DIRECTIVE = re.compile(rf"^{_OWN}{_TAIL}\s*(?:$|#)", re.IGNORECASE)
_PATTERNS = ((NOQA_FORM, _LINE_DIRECTIVE), (ACCUMLINT_FORM, _ACCUMLINT_DIRECTIVE))
_SPLIT = re.compile(r"[\s,]+")
#: what every file-wide directive holds
_FILE_MENTION = re.compile(r"accumlint\s*:\s*noqa", re.IGNORECASE)


def reads_as_a_code(text: str) -> bool:
    """Whether ``text`` starts with a word a directive would read as one more code (``PR123``):
    a reason after the codes must not."""
    return re.match(rf"{_CODE}\b", text) is not None


@dataclass(frozen=True)
class Directive:
    """One parsed directive: ``codes`` is ``None`` for a bare ``noqa`` (everything)."""

    codes: frozenset[str] | None

    def suppresses(self, code: str) -> bool:
        """Whether this directive suppresses a finding with ``code``."""
        if code.upper() in UNSUPPRESSIBLE:
            return False
        if self.codes is None:
            return True
        upper = code.upper()
        return any(upper.startswith(prefix) for prefix in self.codes)


@dataclass
class NoqaMap:
    """The directives of one file: per line (1-based) and file-wide."""

    lines: dict[int, list[Directive]] = field(default_factory=dict)
    file: list[Directive] = field(default_factory=list)

    def suppresses(self, finding: Finding) -> bool:
        """Whether ``finding`` is suppressed by a file-level or first-line directive."""
        if any(d.suppresses(finding.code) for d in self.file):
            return True
        return any(d.suppresses(finding.code) for d in self.lines.get(finding.line, ()))


@dataclass(frozen=True)
class Written:
    """A valid directive as written in a comment.

    ``form`` is :data:`NOQA_FORM` or :data:`ACCUMLINT_FORM`; ``start``/``end`` are offsets in
    the comment of the directive from its ``#`` to its last code (a reason after the codes is
    not part of it); ``codes`` is ``None`` for a bare directive, else upper-cased as written.
    """

    form: str
    file_wide: bool
    start: int
    end: int
    codes: tuple[str, ...] | None

    @property
    def directive(self) -> Directive:
        """What the directive suppresses."""
        return Directive(None if self.codes is None else frozenset(self.codes))


def _written(match: re.Match[str], form: str, file_wide: bool) -> Written | None:
    sep, codes = match.group("sep"), match.group("codes")
    if sep is not None and not codes:  # a colon without codes: invalid, ignored
        return None
    end = match.end("codes") if codes else match.end()
    parsed = None if sep is None else tuple(c.upper() for c in _SPLIT.split(codes.strip()) if c)
    return Written(form, file_wide, match.start(), end, parsed)


def comment_directives(comment: str, own_line: bool) -> list[Written]:
    """The valid directives of one comment (``own_line``: no code before it), in order.

    On a line of its own, a comment that is exactly ``# accumlint: noqa[: CODES]`` (a further
    ``#`` comment may follow) is the file-wide directive and nothing else. Otherwise the first
    valid directive of each form counts, as ruff counts the first one of a comment; the
    ``# accumlint: noqa`` form counts only after code (alone on its line it would suppress
    nothing there).
    """
    if own_line:
        match = _FILE_DIRECTIVE.match(comment.strip())
        if match:
            written = _written(match, ACCUMLINT_FORM, file_wide=True)
            return [] if written is None else [written]
    found = []
    for form, pattern in _PATTERNS:
        if own_line and form == ACCUMLINT_FORM:
            continue
        valid = (_written(match, form, file_wide=False) for match in pattern.finditer(comment))
        first = next((written for written in valid if written is not None), None)
        if first is not None:
            found.append(first)
    return sorted(found, key=lambda written: written.start)


def _add_comment(noqa: NoqaMap, line: int, comment: str, own_line: bool) -> None:
    for written in comment_directives(comment, own_line):
        target = noqa.file if written.file_wide else noqa.lines.setdefault(line, [])
        target.append(written.directive)


def _comments_by_tokenize(text: str) -> list[tuple[int, str, bool]]:
    comments = []
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            row, col = tok.start
            comments.append((row, tok.string, not tok.line[:col].strip()))
    return comments


def _comments_by_regex(text: str) -> list[tuple[int, str, bool]]:
    comments = []
    for number, line in enumerate(text.splitlines(), start=1):
        hash_at = line.find("#")
        if hash_at >= 0:
            comments.append((number, line[hash_at:], not line[:hash_at].strip()))
    return comments


def comments(text: str) -> list[tuple[int, str, bool]]:
    """``(line, comment, on a line of its own)`` for each comment of ``text``: its real comments
    (:mod:`tokenize`), or, where it cannot be tokenized (an unclosed bracket, string or
    indentation error: a file with a syntax error still has its directives read), each line's
    text from its first ``#``."""
    try:
        return _comments_by_tokenize(text)
    except (tokenize.TokenError, SyntaxError, ValueError):  # TokenError is neither on 3.11
        return _comments_by_regex(text)


def parse_noqa(text: str) -> NoqaMap:
    """Collect every ``noqa`` directive of a source text."""
    noqa = NoqaMap()
    for line, comment, own_line in comments(text):
        _add_comment(noqa, line, comment, own_line)
    return noqa


def apply_noqa(findings: Iterable[Finding], text: str, *, ignore: bool = False) -> list[Finding]:
    """Drop the findings that a ``# noqa`` directive in ``text`` suppresses; keep the order (with
    ``ignore``, the run's ``--ignore-noqa``, drop none)."""
    findings = list(findings)
    if ignore or not findings or "noqa" not in text.lower():
        return findings
    # a finding is suppressed by a directive on its own line or a file-wide one: where no such
    # line can hold one, the (pure Python, slow) tokenizer need not look for the comments
    lines = text.splitlines()
    if _FILE_MENTION.search(text) is None and not any(
        0 < f.line <= len(lines) and "noqa" in lines[f.line - 1].lower() for f in findings
    ):
        return findings
    noqa = parse_noqa(text)
    return [f for f in findings if not noqa.suppresses(f)]


def apply_noqa_where_it_happens(findings: Iterable[Finding], read: Callable[[str], str | None], *,
                                ignore: bool = False) -> list[Finding]:
    """Drop the findings reported at a call that stands for another file's statement (its
    ``related`` location) when a directive at that statement suppresses them: the ``noqa``
    written where the code is silences its copy at each caller too. ``read`` gives a file's
    text (None where it cannot be read: nothing is suppressed); with ``ignore`` (``--ignore-noqa``)
    none is."""
    findings = list(findings)
    if ignore:
        return findings
    maps: dict[str, NoqaMap | None] = {}

    def suppressed(finding: Finding) -> bool:
        for path, line, _ in finding.related:
            if path == finding.path:
                continue
            if path not in maps:
                text = read(path)
                maps[path] = parse_noqa(text) if text is not None and "noqa" in text.lower() else None
            noqa = maps[path]
            if noqa is not None and noqa.suppresses(replace(finding, line=line)):
                return True
        return False

    return [f for f in findings if not f.related or not suppressed(f)]

