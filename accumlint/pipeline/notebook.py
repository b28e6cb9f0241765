"""Jupyter notebooks: the code cells checked as one program, findings placed by cell.

The code cells of a ``.ipynb`` file (read as plain JSON: nbformat 4, whose ``source`` is
a string or a list of lines) are joined in order, each starting on a new line, so that a
loop in one cell sees the optimizer built in an earlier one. IPython syntax is
neutralized without moving any line: in a cell that is not valid Python, a line magic
(``%time``), a shell line (``!pip``), a help line (``obj?``) and an assignment from one
(``files = !ls``) become ``pass`` at the same indentation; a cell magic (``%%bash``)
comments out its whole cell, except the magics whose body is Python (``%%time``,
``%%capture``, …), where only the magic line goes. Findings are reported at
``notebook.ipynb:cell N:line:col``, where N counts every cell from the top (markdown cells
included, as editors number them) and the line counts from the cell's first line.
``# noqa`` comments work in cells; ``# accumlint: noqa`` in any cell covers the notebook.

Each finding also carries its place in the ``.ipynb`` file's own text (``Finding.raw``: the JSON
line that holds the source line, and the column on that line), found by scanning the
JSON with positions (:func:`source_spans`): what GitHub annotations, SARIF and the other CI
formats point at. ``--fix`` and ``--add-noqa`` edit the checked text, and :func:`rebuild` puts
the edit back into its cell: only the edited cells' ``source`` values are rewritten, in the
layout they had (a list of lines or one string, the same indentation); the outputs, the
metadata, the other cells and the rest of the JSON keep their bytes. An edit that crosses a
cell boundary or touches a line that was neutralized (a magic) is refused.
"""

from __future__ import annotations

import ast
import bisect
import dataclasses
import difflib
import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from accumlint.lazy import lazy_module
from accumlint.pipeline.run_context import ALONE, RunContext
from accumlint.spec.findings import Finding, Severity

if TYPE_CHECKING:
    from accumlint.checks.base import Rule
    from accumlint.run.suggested_fixes import SuggestedFix

# LibCST loads with the engine, only when a notebook is checked
engine = lazy_module("accumlint.pipeline.engine")

#: Cell magics whose body is Python that runs in the kernel.
PYTHON_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun", "debug", "memit", "mprun", "snakeviz"})

_MAGIC_LINE = re.compile(r"^(?P<indent>[ \t]*)(?:[%!?]|[\w.\[\]\s,]+=\s*[%!])")
_HELP_LINE = re.compile(r"^(?P<indent>[ \t]*)[\w.]+\?{1,2}\s*$")


class NotebookError(ValueError):
    """The file is not a notebook that can be read (invalid JSON, no cell list)."""


@dataclass(frozen=True)
class CodeCell:
    """One code cell: its 1-based number among all cells, and its source lines (no newlines)."""

    number: int
    lines: tuple[str, ...]


@dataclass(frozen=True)
class NotebookSource:
    """The code cells, and the Python text they are checked as (one line per cell line)."""

    cells: tuple[CodeCell, ...]
    text: str

    def locate(self, line: int) -> tuple[int, int]:
        """``(cell number, line in cell)`` of a 1-based line of :attr:`text` (past the end: the last cell)."""
        start = 1
        for cell in self.cells:
            if line < start + len(cell.lines):
                return cell.number, line - start + 1
            start += len(cell.lines)
        if not self.cells:
            return 1, line
        last = self.cells[-1]
        return last.number, max(len(last.lines), 1)

    def cell_lines(self, number: int) -> list[str] | None:
        """The source lines of code cell ``number`` (as written, magics included)."""
        return next((list(cell.lines) for cell in self.cells if cell.number == number), None)

    def line_of(self, number: int, line: int) -> int | None:
        """The 1-based line of :attr:`text` of line ``line`` of cell ``number`` (None: no such line)."""
        start = 1
        for cell in self.cells:
            if cell.number == number:
                return start + line - 1 if 1 <= line <= len(cell.lines) else None
            start += len(cell.lines)
        return None

    def checked_lines(self) -> list[str]:
        """The lines of :attr:`text` (the neutralized cells), one per cell line."""
        return self.text.split("\n")[:-1] if self.text else []

    def with_cell(self, number: int, lines: Sequence[str]) -> str:
        """:attr:`text` as it would be with code cell ``number``'s lines replaced by ``lines``
        (as written: their IPython syntax is neutralized here, as :func:`notebook_source` does)."""
        text = _checked_text([CodeCell(number, tuple(lines)) if cell.number == number else cell
                              for cell in self.cells])
        return text + "\n" if text else ""


def _cell_text(source: object) -> str:
    if isinstance(source, list):
        return "".join(str(part) for part in source)
    return source if isinstance(source, str) else ""


def read_cells(data: bytes) -> tuple[CodeCell, ...]:
    """The code cells of a notebook's bytes; raises :class:`NotebookError` if it is no notebook."""
    try:
        document = json.loads(data.decode("utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise NotebookError(f"not a notebook: invalid JSON ({exc})") from None
    except RecursionError:
        raise NotebookError("not a notebook: JSON nested too deep") from None
    except ValueError as exc:  # an integer of more digits than int() converts
        raise NotebookError(f"not a notebook: {str(exc).split(';')[0]}") from None
    cells = document.get("cells") if isinstance(document, dict) else None
    if not isinstance(cells, list):
        raise NotebookError("not a notebook: no `cells` list (only nbformat 4 notebooks are read)")
    code = []
    for number, cell in enumerate(cells, start=1):
        if isinstance(cell, dict) and cell.get("cell_type") == "code":
            text = _cell_text(cell.get("source", "")).replace("\r\n", "\n").replace("\r", "\n")
            code.append(CodeCell(number, tuple(text.split("\n")) if text else ()))
    return tuple(code)


def _parses(text: str) -> bool:
    try:
        ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def neutralize(lines: Sequence[str]) -> list[str]:
    """A cell's lines with IPython syntax replaced by Python of the same line count."""
    if _parses("\n".join(lines)):
        return list(lines)  # plain Python: a "%" at the start of a line is inside a string
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is not None and lines[first].lstrip().startswith("%%"):
        magic = lines[first].lstrip()[2:].split(maxsplit=1)
        out = list(lines)
        if magic and magic[0] in PYTHON_CELL_MAGICS:
            # the body is IPython too: `%%capture` over `!pip install ...` lines
            return [*out[:first], "pass", *neutralize(out[first + 1:])]
        return [f"# {line}" if line else line for line in lines]
    out = []
    continued = False
    for line in lines:
        match = _MAGIC_LINE.match(line) or _HELP_LINE.match(line)
        if continued:
            out.append("")
        elif match:
            out.append(f"{match.group('indent')}pass")
        else:
            out.append(line)
        continued = (continued or bool(match)) and line.endswith("\\")
    return out


def _checked_text(cells: Sequence[CodeCell]) -> str:
    """The Python text code ``cells`` are checked as: their neutralized lines, joined (no final newline)."""
    return "\n".join(line for cell in cells for line in neutralize(cell.lines))


def notebook_source(data: bytes) -> NotebookSource:
    """Read a notebook's code cells and the Python text they are checked as; raises
    :class:`NotebookError` where a cell is not text (a lone surrogate such as ``\\ud800``)."""
    cells = read_cells(data)
    text = _checked_text(cells)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        cell, line = NotebookSource(cells, text).locate(text.count("\n", 0, exc.start) + 1)
        raise NotebookError(f"cell {cell}, line {line}: {exc.object[exc.start]!a} is not a character") from None
    return NotebookSource(cells, text + "\n" if text else "")


_SPACE = re.compile(r"[ \t\n\r]*")
_ESCAPES = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}  # and \" \\ \/: the character itself
_DECODER = json.JSONDecoder()


@dataclass(frozen=True)
class SourceSpan:
    """Where one cell's ``source`` value lies in the notebook's text (offsets into the text the
    bytes decode to): ``start``/``end`` of the whole value, and each JSON string token in it
    (quotes included), in order; ``listed``: a list of strings (as Jupyter writes), else one string."""

    start: int
    end: int
    strings: tuple[tuple[int, int], ...]
    listed: bool


def _space(text: str, at: int) -> int:
    """The offset of the first character from ``at`` on that is not JSON whitespace."""
    match = _SPACE.match(text, at)
    return match.end() if match else at


def _object(text: str, at: int, visit: Callable[[str, int], int]) -> int:
    """Walk the object at ``text[at] == "{"``: ``visit(key, value_start)`` returns where each value
    ends; returns where the object ends. The text is known to be valid JSON (it was loaded)."""
    at = _space(text, at + 1)
    while text[at] != "}":
        key, at = json.decoder.scanstring(text, at + 1)
        at = _space(text, _space(text, at) + 1)
        at = _space(text, visit(key, at))
        if text[at] == ",":
            at = _space(text, at + 1)
    return at + 1


def _array(text: str, at: int, visit: Callable[[int, int], int]) -> int:
    """Walk the array at ``text[at] == "["``: ``visit(index, value_start)`` returns where each element ends."""
    at = _space(text, at + 1)
    index = 0
    while text[at] != "]":
        at = _space(text, visit(index, at))
        index += 1
        if text[at] == ",":
            at = _space(text, at + 1)
    return at + 1


def _skip(text: str, at: int) -> int:
    return _DECODER.raw_decode(text, at)[1]


def source_spans(text: str) -> dict[int, SourceSpan]:
    """Each cell's :class:`SourceSpan`, by its 1-based number among all cells, in a notebook's text
    (``bytes.decode("utf-8-sig")``, already known to load as a notebook). A repeated key counts
    as :func:`json.loads` counts it: the last one."""
    spans: dict[int, SourceSpan] = {}

    def source(start: int) -> int:
        strings: list[tuple[int, int]] = []

        def string(_: int, at: int) -> int:
            end = _skip(text, at)
            if text[at] == '"':
                strings.append((at, end))
            return end

        listed = text[start] == "["
        end = _array(text, start, string) if listed else string(0, start)
        spans[number] = SourceSpan(start, end, tuple(strings), listed)
        return end

    def cell_member(key: str, at: int) -> int:
        return source(at) if key == "source" and text[at] in '["' else _skip(text, at)

    def cell(index: int, at: int) -> int:
        nonlocal number
        number = index + 1
        return _object(text, at, cell_member) if text[at] == "{" else _skip(text, at)

    def top(key: str, at: int) -> int:
        if key == "cells" and text[at] == "[":
            spans.clear()
            return _array(text, at, cell)
        return _skip(text, at)

    number = 0
    _object(text, _space(text, 0), top)
    return spans


def _characters(text: str, start: int, end: int) -> Iterator[tuple[str, int]]:
    """The characters of the JSON string token ``text[start:end]``, each with its offset in ``text``."""
    at, stop = start + 1, end - 1
    while at < stop:
        char = text[at]
        if char != "\\":
            yield char, at
            at += 1
            continue
        kind = text[at + 1]
        if kind != "u":
            yield _ESCAPES.get(kind, kind), at
            at += 2
            continue
        code, size = int(text[at + 2:at + 6], 16), 6
        if 0xD800 <= code < 0xDC00 and text.startswith("\\u", at + 6):  # a surrogate pair: one character
            low = int(text[at + 8:at + 12], 16)
            if 0xDC00 <= low < 0xE000:
                code, size = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00), 12
        yield chr(code), at
        at += size


def _offset(text: str, span: SourceSpan, line: int, column: int) -> int:
    """The offset in ``text`` of line ``line``, column ``column`` (1-based, code points) of the
    cell whose ``source`` is ``span``, lines ending as :func:`read_cells` ends them; past a
    line's end: where its newline is written (past the cell's end: its closing quote)."""
    row, col = 1, 1
    pending_cr = -1  # a "\r" not yet known to start a "\r\n"
    for start, end in span.strings:
        for char, at in _characters(text, start, end):
            if pending_cr >= 0 and char == "\n":  # "\r\n" is one line end, at the "\r"
                pending_cr = -1
                continue
            pending_cr = -1
            if row == line and (col == column or char in "\r\n"):
                return at
            if char in "\r\n":
                row, col = row + 1, 1
                pending_cr = at if char == "\r" else -1
            else:
                col += 1
    return span.strings[-1][1] - 1 if span.strings else span.start


class RawPlaces:
    """Maps a cell's ``(line, column)`` to the notebook text's own ``(line, column)``, 1-based;
    the text is scanned once, when first asked."""

    def __init__(self, data: bytes) -> None:
        self.text = data.decode("utf-8-sig")
        self._spans: dict[int, SourceSpan] | None = None
        self._line_starts: list[int] = []

    @property
    def spans(self) -> dict[int, SourceSpan]:
        """The cells' :class:`SourceSpan` (see :func:`source_spans`)."""
        if self._spans is None:
            self._spans = source_spans(self.text)
            self._line_starts = [0, *(m.end() for m in re.finditer("\n", self.text))]
        return self._spans

    def place(self, cell: int, line: int, column: int) -> tuple[int, int]:
        """Where line ``line``, column ``column`` of cell ``cell`` is written in the file (the
        cell's first line where the cell has no ``source`` that was found)."""
        span = self.spans.get(cell)
        offset = _offset(self.text, span, line, column) if span is not None else 0
        row = bisect.bisect_right(self._line_starts, offset)
        return row, offset - self._line_starts[row - 1] + 1


def _line_changes(old: list[str], new: list[str]) -> list[tuple[str, int, int, int, int]]:
    """:meth:`difflib.SequenceMatcher.get_opcodes` of ``old`` to ``new``, the unchanged lines at
    both ends matched first: a diff is free to match a repeated line (``pass``, a blank line) in
    another cell, so the lines around an edit are held where they are."""
    most = min(len(old), len(new))
    head = next((i for i in range(most) if old[i] != new[i]), most)
    tail = next((i for i in range(most - head) if old[-1 - i] != new[-1 - i]), most - head)
    middle = difflib.SequenceMatcher(None, old[head:len(old) - tail], new[head:len(new) - tail], autojunk=False)
    return [
        ("equal", 0, head, 0, head),
        *((tag, i1 + head, i2 + head, j1 + head, j2 + head) for tag, i1, i2, j1, j2 in middle.get_opcodes()),
        ("equal", len(old) - tail, len(old), len(new) - tail, len(new)),
    ]


def _edited_cells(source: NotebookSource, new_text: str) -> dict[int, list[str]] | None:
    """The new lines of each code cell that ``new_text`` (an edit of ``source.text``) changes, by
    cell number; None when an edit cannot be put back into the cells: it spans two cells, or
    replaces a line that was neutralized (a magic, a shell line, a ``%%bash`` cell's body).
    Lines added between two cells go to the cell above when indented (its block goes on),
    else to the cell below (a statement before its first line)."""
    old = source.checked_lines()
    new = new_text.split("\n") if new_text else []
    if new_text.endswith("\n"):
        new.pop()
    if new == old:
        return {}
    if not old:  # no code: nowhere to put a line
        return None
    owners = [cell.number for cell in source.cells for _ in cell.lines]
    written = [line for cell in source.cells for line in cell.lines]
    lines: dict[int, list[str]] = {cell.number: [] for cell in source.cells}
    for tag, i1, i2, j1, j2 in _line_changes(old, new):
        if tag == "equal":
            for i in range(i1, i2):
                lines[owners[i]].append(written[i])
            continue
        if any(old[i] != written[i] for i in range(i1, i2)) or len(set(owners[i1:i2])) > 1:
            return None
        if i1 < i2:
            owner = owners[i1]
        elif i1 == len(old) or (i1 > 0 and (owners[i1 - 1] == owners[i1] or new[j1][:1] in (" ", "\t"))):
            owner = owners[i1 - 1]
        else:
            owner = owners[i1]
        lines[owner].extend(new[j1:j2])
    return {cell.number: lines[cell.number] for cell in source.cells if tuple(lines[cell.number]) != cell.lines}


def fits(source: NotebookSource, new_text: str) -> bool:
    """Whether ``new_text``, an edit of ``source.text``, can be put back into the cells (:func:`rebuild`)."""
    return _edited_cells(source, new_text) is not None


def _source_value(text: str, span: SourceSpan, lines: list[str], ensure_ascii: bool) -> str:
    """The JSON of a cell's new ``source`` (its ``lines``) in the layout of the old one (``span``
    in ``text``): a list of lines, each but the last ending in a newline, indented as before; or one string."""
    code = "\n".join(lines)
    if not span.listed:
        return json.dumps(code, ensure_ascii=ensure_ascii)
    parts = re.findall(r"[^\n]*\n|[^\n]+", code)
    if not parts:
        return "[]"
    if span.strings:  # the whitespace before the first line and before "]", as written
        before, after = text[span.start + 1:span.strings[0][0]], text[span.strings[-1][1]:span.end - 1]
    else:
        before = after = ""
    return "[" + before + ("," + before).join(json.dumps(p, ensure_ascii=ensure_ascii) for p in parts) + after + "]"


def rebuild(data: bytes, source: NotebookSource, new_text: str) -> bytes | None:
    """The notebook's bytes with ``new_text`` (an edit of ``source.text``, the checked text of
    ``data``) put back into its cells (see the module); ``data`` itself when nothing changed in
    a cell, None when the edit cannot be placed (:func:`_edited_cells`). Magics are written back
    as they were; a UTF-8 BOM and the file's line ends stay; strings are ASCII-escaped only
    where the file is all ASCII."""
    edited = _edited_cells(source, new_text)
    if edited is None:
        return None
    if not edited:
        return data
    text = data.decode("utf-8-sig")
    spans = source_spans(text)
    if any(number not in spans for number in edited):
        return None
    ensure_ascii = text.isascii()
    out, at = [], 0
    for number in sorted(edited, key=lambda n: spans[n].start):
        span = spans[number]
        out += [text[at:span.start], _source_value(text, span, edited[number], ensure_ascii)]
        at = span.end
    out.append(text[at:])
    bom = b"\xef\xbb\xbf" if data.startswith(b"\xef\xbb\xbf") else b""
    return bom + "".join(out).encode("utf-8")


def _placed(finding: Finding, source: NotebookSource, raw: RawPlaces) -> Finding:
    """``finding`` (placed in :attr:`NotebookSource.text`) with its cell, line in the cell and its
    place in the notebook's own text; a related location in the notebook itself (a helper in an
    earlier cell) is given as its place in the notebook's text too, as one in a ``.py`` file is."""
    related = tuple(
        (path, *raw.place(*source.locate(line), column)) if path == finding.path else (path, line, column)
        for path, line, column in finding.related
    )
    finding = _in_cell(finding, source)
    line, column = raw.place(finding.cell, finding.line, finding.column)
    end_line = end_column = 0
    if finding.end_line:
        end_line, end_column = raw.place(finding.cell, finding.end_line, finding.end_column or finding.column)
    return dataclasses.replace(finding, raw=(line, column, end_line, end_column), related=related)


def _in_cell(finding: Finding, source: NotebookSource) -> Finding:
    cell, line = source.locate(finding.line)
    end_line = 0
    end_column = finding.end_column
    if finding.end_line:
        end_cell, end_line = source.locate(finding.end_line)
        if end_cell != cell:  # cannot span cells: end at the cell's last line
            end_line = len(source.cell_lines(cell) or ()) or line
            end_column = len((source.cell_lines(cell) or [""])[end_line - 1]) + 1
    return dataclasses.replace(finding, cell=cell, line=line, end_line=end_line, end_column=end_column)


def _fix_in_cell(fix: SuggestedFix, source: NotebookSource, cell: int) -> SuggestedFix | None:
    """``fix`` (edits of :attr:`NotebookSource.text`) as edits of the text of ``cell``, as written
    (magics included); None when it changes another cell too or does not go back into the cells
    (:func:`_edited_cells`): a fix ``--fix`` would not apply is not offered."""
    from accumlint.files.text_edits import apply_edits, text_edits

    edited = _edited_cells(source, apply_edits(source.text, fix.edits))
    if edited is None or set(edited) != {cell}:
        return None
    before = "\n".join(source.cell_lines(cell) or ())
    return dataclasses.replace(fix, edits=tuple(text_edits(before, "\n".join(edited[cell]))))


def check_notebook(path: str, data: bytes, rules: Sequence[Rule] | None = None, context: RunContext = ALONE, *,
                   suggest: bool = False) -> engine.FileResult:
    """Check a notebook's code cells with ``rules`` (default: every rule); findings carry their
    cell; ``context``: the run's (:func:`accumlint.pipeline.engine.check_source`). ``suggest`` (or the
    context's): the findings' fixes too (:attr:`~accumlint.pipeline.engine.FileResult.fixes`), each
    edit in the lines of the finding's cell, as ruff gives a notebook's."""
    try:
        source = notebook_source(data)
    except NotebookError as exc:
        finding = Finding(
            path=path,
            line=1,
            column=1,
            code=engine.PARSE_ERROR_CODE,
            name=engine.PARSE_ERROR_NAME,
            severity=Severity.ERROR,
            message=f"file could not be checked: {exc}",
            fix="save the notebook again from Jupyter (nbformat 4), or exclude it",
            url=engine.PARSE_ERROR_URL,
        )
        return engine.FileResult(path, findings=[finding])
    result = engine.check_source(path, source.text.encode("utf-8"), rules, context, suggest=suggest)
    raw = RawPlaces(data)
    placed = {f: _placed(f, source, raw) for f in result.findings}
    result.findings = list(placed.values())
    if result.fixes:
        fixes = {placed[f]: _fix_in_cell(fix, source, placed[f].cell) for f, fix in result.fixes.items() if f in placed}
        result.fixes = {finding: fix for finding, fix in fixes.items() if fix is not None}
    return result


def cell_lines(data: bytes, number: int) -> list[str] | None:
    """The lines of cell ``number`` of a notebook's bytes (``None`` if unreadable or no such cell)."""
    try:
        return notebook_source(data).cell_lines(number)
    except NotebookError:
        return None
