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

A notebook is never written to: ``--fix`` leaves notebooks alone.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from accumlint.findings import Finding, Severity
from accumlint.lazy import lazy_module

if TYPE_CHECKING:
    from accumlint.checks.base import Rule

# LibCST loads with the engine, only when a notebook is checked (is_notebook is asked of every cached file)
engine = lazy_module("accumlint.engine")

NOTEBOOK_SUFFIX = ".ipynb"
#: Cell magics whose body is Python that runs in the kernel.
PYTHON_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun", "debug", "memit", "mprun", "snakeviz"})

_MAGIC_LINE = re.compile(r"^(?P<indent>[ \t]*)(?:[%!?]|[\w.\[\]\s,]+=\s*[%!])")
_HELP_LINE = re.compile(r"^(?P<indent>[ \t]*)[\w.]+\?{1,2}\s*$")


def is_notebook(path: str) -> bool:
    """Whether ``path`` names a Jupyter notebook."""
    return path.lower().endswith(NOTEBOOK_SUFFIX)


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


def notebook_source(data: bytes) -> NotebookSource:
    """Read a notebook's code cells and the Python text they are checked as; raises
    :class:`NotebookError` where a cell is not text (a lone surrogate such as ``\\ud800``)."""
    cells = read_cells(data)
    text = "\n".join(line for cell in cells for line in neutralize(cell.lines))
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        cell, line = NotebookSource(cells, text).locate(text.count("\n", 0, exc.start) + 1)
        raise NotebookError(f"cell {cell}, line {line}: {exc.object[exc.start]!a} is not a character") from None
    return NotebookSource(cells, text + "\n" if text else "")


def _placed(finding: Finding, source: NotebookSource) -> Finding:
    cell, line = source.locate(finding.line)
    end_line = 0
    end_column = finding.end_column
    if finding.end_line:
        end_cell, end_line = source.locate(finding.end_line)
        if end_cell != cell:  # cannot span cells: end at the cell's last line
            end_line = len(source.cell_lines(cell) or ()) or line
            end_column = len((source.cell_lines(cell) or [""])[end_line - 1]) + 1
    return dataclasses.replace(finding, cell=cell, line=line, end_line=end_line, end_column=end_column)


def check_notebook(path: str, data: bytes, rules: Sequence[Rule] | None = None) -> engine.FileResult:
    """Check a notebook's code cells with ``rules`` (default: every rule); findings carry their cell."""
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
    result = engine.check_source(path, source.text.encode("utf-8"), rules)
    result.findings = [_placed(f, source) for f in result.findings]
    return result


def cell_lines(data: bytes, number: int) -> list[str] | None:
    """The lines of cell ``number`` of a notebook's bytes (``None`` if unreadable or no such cell)."""
    try:
        return notebook_source(data).cell_lines(number)
    except NotebookError:
        return None
