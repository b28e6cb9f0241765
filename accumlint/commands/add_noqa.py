"""``--add-noqa``: a ``# noqa: CODE`` directive on the first line of every current finding.

An existing repository can so adopt accumlint, and only new findings fail from then on.

``noqa-style`` chooses the form written: ``# noqa: CODE`` (``"noqa"``, the default) or
``# accumlint: noqa: CODE`` (``"accumlint"``), which other tools never read (ruff's ``RUF100``
fixes leave it alone). A directive of that form that already names codes gets the new ones
added (``# noqa: ACC201, ACC001``); the other form's directive is left as it is (in
``"accumlint"`` style, ``# noqa: E501`` gets a separate ``# accumlint: noqa: ACC001`` after
it). A code that a directive of either form already suppresses (a prefix, a bare ``noqa``)
is not added. A line that cannot take a comment (a line that
continues with ``\\``, or one inside a multi-line string) is left alone, and so is a notebook
line that is not Python (a magic, a shell line). In a notebook the directive goes on the
finding's line in its cell (:func:`accumlint.pipeline.notebook.rebuild`: only that cell's ``source``
changes in the ``.ipynb``). Files that do not tokenize are never touched; ``ACC000`` cannot be
suppressed. Files are written as ``--fix`` writes them (:mod:`accumlint.files.writing`), and a second
run adds nothing.
"""

from __future__ import annotations

import io
import re
import tokenize
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from accumlint.files.reading import NotARegularFile, is_notebook, read_signed, source_limit
from accumlint.files.writing import Boundary, rewrite
from accumlint.noqa.suppression import DIRECTIVE_START, NOQA_FORM, UNSUPPRESSIBLE, comment_directives
from accumlint.pipeline.notebook import NotebookError, notebook_source, rebuild
from accumlint.spec.findings import Finding

#: why a file that changed after its check gets no directive (its findings' lines may have moved)
_CHANGED = "the file changed since it was checked"
_LINE_END = re.compile(r"(\r\n|\r|\n)$")
#: a physical line as the tokenizer counts them (only \n, \r\n and \r end one)
_PHYSICAL_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")


@dataclass(frozen=True)
class _Line:
    comment_at: int  #: column of the line's comment (-1: none)
    can_end_with_comment: bool


def _lines_info(text: str) -> dict[int, _Line]:
    """For each physical line that ends outside a string: where its comment starts, if any."""
    info: dict[int, _Line] = {}
    comments: dict[int, int] = {}
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            comments[token.start[0]] = token.start[1]
        elif token.type in (tokenize.NEWLINE, tokenize.NL) or (
            token.type == tokenize.ENDMARKER and token.start[1] > 0
        ):
            row = token.start[0]
            info[row] = _Line(comments.get(row, -1), True)
    return info


def directive_text(style: str, codes: Iterable[str]) -> str:
    """The directive of form ``style`` (``noqa`` or ``accumlint``) naming ``codes``, sorted."""
    return f"{DIRECTIVE_START[style]}: {', '.join(sorted(codes))}"


def add_noqa_text(
    text: str, codes_by_line: dict[int, set[str]], style: str = NOQA_FORM, reason: str = ""
) -> tuple[str, int]:
    """``text`` with the codes added to each line's directive of form ``style`` (see the module),
    and how many directives changed; ``reason`` (``--add-noqa=REASON``) follows the codes of each
    directive written or extended.

    Raises ``tokenize.TokenError`` / ``SyntaxError`` when ``text`` does not tokenize.
    """
    said = f" {reason}" if reason else ""
    info = _lines_info(text)
    lines = _PHYSICAL_LINE.findall(text)
    changed = 0
    for row, codes in sorted(codes_by_line.items()):
        line_info = info.get(row)
        if line_info is None or not 1 <= row <= len(lines):
            continue
        raw = lines[row - 1]
        ending = _LINE_END.search(raw)
        body, end = (raw[: ending.start()], ending.group()) if ending else (raw, "")
        comment = body[line_info.comment_at :] if line_info.comment_at >= 0 else ""
        written = comment_directives(comment, own_line=False)
        missing = {code for code in codes if not any(w.directive.suppresses(code) for w in written)}
        if not missing:
            continue
        target = next((w for w in written if w.form == style), None)
        if target is None:
            lines[row - 1] = f"{body.rstrip()}  {directive_text(style, missing)}{said}{end}"
        else:
            merged = directive_text(style, {*(target.codes or ()), *missing})
            rest = comment[target.end :]
            said_here = "" if rest.lstrip().startswith(reason) else said  # a rerun: the reason is there
            new_comment = comment[: target.start] + merged + said_here + rest
            lines[row - 1] = body[: line_info.comment_at] + new_comment + end
        changed += 1
    return "".join(lines), changed


def add_noqa_files(
    findings: Iterable[Finding],
    checked: Mapping[str, bytes] | None = None,
    *,
    boundary: Boundary | None = None,
    style_for: Callable[[str], str] | None = None,
    reason: str = "",
) -> tuple[int, list[str]]:
    """Add the directives for ``findings`` to their files (``reason`` after their codes);
    ``(directives added, errors)``.

    ``style_for`` gives each path's ``noqa-style`` (its configuration's; by default ``noqa``).

    ``checked`` holds the bytes each file had when it was checked: a file that changed since is
    left alone (its findings' lines may have moved). Files are read by the bounded reader and
    written by the one safe writer (:func:`accumlint.files.writing.rewrite`), as ``--fix`` writes: a
    symlink out of ``boundary`` (the paths the user named; by default none), a read-only or
    hard-linked file is not written."""
    by_path: dict[str, list[Finding]] = defaultdict(list)
    for finding in findings:
        if finding.code not in UNSUPPRESSIBLE and (finding.cell or not is_notebook(finding.path)):
            by_path[finding.path].append(finding)
    added, errors = 0, []
    for path, found in by_path.items():
        limit = source_limit(path)
        try:
            data, size, signature = read_signed(path, limit)
            if size > limit:
                errors.append(f"{path}: noqa not added: larger than {limit} bytes")
                continue
            if checked is not None and path in checked and checked[path] != data:
                errors.append(f"{path}: noqa not added: {_CHANGED}")
                continue
            style = style_for(path) if style_for else NOQA_FORM
            new_data, changed = _with_directives(path, data, found, style, reason)
        except NotARegularFile as exc:
            errors.append(f"{path}: noqa not added: {exc.kind}, not a regular file")
            continue
        except (OSError, SyntaxError, UnicodeDecodeError, LookupError, tokenize.TokenError, NotebookError) as exc:
            errors.append(f"{path}: noqa not added: {getattr(exc, 'strerror', None) or exc}")
            continue
        if not changed:
            continue
        refused = rewrite(path, new_data, expect=(signature, data), boundary=boundary or Boundary(()),
                          changed=_CHANGED)
        if refused:
            errors.append(f"{path}: noqa not added: {refused}")
            continue
        added += changed
    return added, errors


def _with_directives(path: str, data: bytes, findings: list[Finding], style: str, reason: str) -> tuple[bytes, int]:
    """``data`` (the bytes of ``path``) with the directives of ``findings`` added, and how many
    changed. A notebook's are added to the text its cells are checked as, and put back into the
    cells; a finding on a line that is not Python there (a magic) gets none. Raises what
    :func:`add_noqa_text` raises, ``UnicodeDecodeError``/``LookupError`` for a file that does not
    decode, :class:`~accumlint.pipeline.notebook.NotebookError` for a notebook that does not load."""
    from accumlint.run.apply_fixes import _decode

    codes_by_line: dict[int, set[str]] = defaultdict(set)
    if not is_notebook(path):
        for finding in findings:
            codes_by_line[finding.line].add(finding.code)
        text, encoding = _decode(data)
        new_text, changed = add_noqa_text(text, codes_by_line, style, reason)
        return new_text.encode(encoding), changed
    source = notebook_source(data)
    checked_lines, written = source.checked_lines(), [line for cell in source.cells for line in cell.lines]
    for finding in findings:
        row = source.line_of(finding.cell, finding.line)
        if row is not None and checked_lines[row - 1] == written[row - 1]:
            codes_by_line[row].add(finding.code)
    new_text, changed = add_noqa_text(source.text, codes_by_line, style, reason)
    new_data = rebuild(data, source, new_text) if changed else data
    if new_data is None:
        raise NotebookError("a directive would not go back into its cell")
    return new_data, changed
