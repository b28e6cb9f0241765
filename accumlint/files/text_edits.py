"""Text edits: a fix as replacements of spans of the original text (ruff's ``edits``).

Positions are 1-based rows and 1-based columns counted in code points, as in the findings;
only ``\\n``, ``\\r\\n`` and ``\\r`` end a line. The end of a file that ends with a newline is
``(lines + 1, 1)``. This module needs no LibCST: editors and the JSON output share it.
"""

from __future__ import annotations

import bisect
import difflib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

_LINE_END = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True, order=True)
class TextEdit:
    """Replace the text from ``location`` up to (not including) ``end_location`` with ``content``.

    Both are ``(row, column)``, 1-based, columns in code points.
    """

    location: tuple[int, int]
    end_location: tuple[int, int]
    content: str

    def to_json(self) -> dict:
        """Ruff's shape: ``{content, location: {row, column}, end_location: {row, column}}``."""
        return {
            "content": self.content,
            "location": {"row": self.location[0], "column": self.location[1]},
            "end_location": {"row": self.end_location[0], "column": self.end_location[1]},
        }


def _line_starts(text: str) -> list[int]:
    return [0, *(match.end() for match in _LINE_END.finditer(text))]


def _position(starts: Sequence[int], offset: int) -> tuple[int, int]:
    row = bisect.bisect_right(starts, offset) - 1
    return row + 1, offset - starts[row] + 1


def _offset(starts: Sequence[int], position: tuple[int, int], size: int) -> int:
    row, column = position
    if not 1 <= row <= len(starts):
        raise ValueError(f"edit position {position} is outside the text ({len(starts)} lines)")
    offset = starts[row - 1] + column - 1
    if offset > size:
        raise ValueError(f"edit position {position} is past the end of the text")
    return offset


def split_lines(text: str) -> list[str]:
    """``text``'s lines, each with its end (``\\n``, ``\\r\\n`` or ``\\r``, as the tokenizer counts
    lines; not ``str.splitlines``, which also ends one at a form feed)."""
    starts = _line_starts(text)
    return [text[a:b] for a, b in zip(starts, [*starts[1:], len(text)], strict=True) if a < b]


def text_edits(before: str, after: str, first_row: int = 1) -> list[TextEdit]:
    """The smallest set of whole-line edits that turns ``before`` into ``after`` (a move is a
    deletion and an insertion), in order. ``first_row``: the row ``before`` starts at, where it
    is a run of whole lines of a larger text (the edits are that text's).

    The lines both texts begin and end with are left out before they are compared: a fix changes
    a few lines of a large file, and the comparison costs about the product of the lengths it
    is given (a 3,000-line file: 0.5 s whole, under a millisecond trimmed)."""
    old, new = split_lines(before), split_lines(after)
    head = 0
    while head < min(len(old), len(new)) and old[head] == new[head]:
        head += 1
    tail = 0
    while tail < min(len(old), len(new)) - head and old[-1 - tail] == new[-1 - tail]:
        tail += 1
    starts = _line_starts(before)
    offsets = [0]
    for line in old:
        offsets.append(offsets[-1] + len(line))
    edits = []
    matcher = difflib.SequenceMatcher(a=old[head:len(old) - tail], b=new[head:len(new) - tail], autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        (row, column), (end_row, end_column) = (_position(starts, offsets[head + i1]),
                                                _position(starts, offsets[head + i2]))
        edits.append(TextEdit((row + first_row - 1, column), (end_row + first_row - 1, end_column),
                              "".join(new[head + j1:head + j2])))
    return edits


def apply_edits(text: str, edits: Iterable[TextEdit]) -> str:
    """``text`` with ``edits`` applied (positions refer to ``text``); an edit that overlaps an
    earlier one (by location) is skipped, as ruff skips a fix that conflicts with one applied.

    Raises ``ValueError`` for a position outside the text.
    """
    starts = _line_starts(text)
    spans = sorted(  # stable: insertions at one point keep the order they were given in
        ((_offset(starts, e.location, len(text)), _offset(starts, e.end_location, len(text)), e.content)
         for e in edits),
        key=lambda span: span[:2],
    )
    out, last = [], 0
    for start, end, content in spans:
        if start < last:
            continue
        out += [text[last:start], content]
        last = end
    out.append(text[last:])
    return "".join(out)


#: :data:`accumlint.fixes.base.SAFE` and ``UNSAFE``, without importing LibCST (here, in a leaf:
#: the noqa report and the engine's in-check fixes make them too)
SAFE, UNSAFE = "safe", "unsafe"


@dataclass(frozen=True)
class SuggestedFix:
    """One finding's fix: ``applicability`` is ``safe`` (applied by ``--fix``) or ``unsafe``
    (only with ``--unsafe-fixes``); ``message`` says what it does; ``edits`` are relative to
    the text that was checked (decoded, without a byte-order mark)."""

    applicability: str
    message: str
    edits: tuple[TextEdit, ...]

    @property
    def safe(self) -> bool:
        """Whether ``--fix`` applies it without ``--unsafe-fixes``."""
        return self.applicability == SAFE

    def to_json(self) -> dict:
        """Ruff's ``fix`` object: ``{applicability, message, edits: [{content, location, end_location}]}``."""
        return {
            "applicability": self.applicability,
            "message": self.message,
            "edits": [edit.to_json() for edit in self.edits],
        }
