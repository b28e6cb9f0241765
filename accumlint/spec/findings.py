"""The unit of output: one finding of one rule at one place in one file."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import NamedTuple


class LoopVerdict(NamedTuple):
    """One accumulation loop a file's check simulated, for ``--statistics``: ``sites``, where the
    loop makes its passes over the data (else where its backwards and optimizer updates are), as
    (absolute path, 1-based line), sorted — one loop that several entry points run (three scripts
    starting one trainer) shows the same sites from each; empty where the check could not name a
    file, then it counts on its own — and its undecided ``reasons`` (empty: decided)."""

    sites: tuple[tuple[str, int], ...]
    reasons: tuple[str, ...]


class Severity(str, Enum):
    """How sure and how bad: error = the run computes something other than intended;
    warning = very likely wrong; info = a fact worth recording."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


@dataclass(frozen=True, order=True)
class Finding:
    """One finding.

    Positions are 1-based lines and 1-based columns (as ruff reports them); ``end_*`` is
    the end of the flagged node. ``message`` says what happens at run time, ``fix`` how to
    repair it (a sentence, not an edit), ``url`` the rule's page. In a notebook, ``cell``
    is the 1-based index of the code cell and ``line`` counts from that cell's first line
    (``0``: not a notebook), and ``raw`` is the same place in the ``.ipynb`` file's own text:
    ``(line, column, end_line, end_column)``, 1-based, columns in code points of the JSON's
    lines (``end_line`` 0 where the finding has no end), as GitHub annotations and SARIF
    regions read a file. ``raw`` and ``flow`` take no part in comparing findings (the same
    finding found again is equal).
    """

    path: str
    line: int
    column: int
    code: str
    name: str
    severity: Severity
    message: str
    fix: str = ""
    end_line: int = 0
    end_column: int = 0
    url: str = ""
    cell: int = 0
    #: where the reported call leads: (path, line, column) of the helper's statement that
    #: performs the event (another module's file, or this one)
    related: tuple[tuple[str, int, int], ...] = ()
    raw: tuple[int, int, int, int] | tuple[()] = field(default=(), compare=False)
    #: the steps of the simulated run that shows it, for a finding read off the traces: (path,
    #: line, column, what happens there) of the entry's loop, each call that leads on, the event
    flow: tuple[tuple[str, int, int, str], ...] = field(default=(), compare=False)

    @property
    def in_file(self) -> tuple[int, int, int, int]:
        """``(line, column, end_line, end_column)`` in the file's own text: :attr:`raw` in a
        notebook, else the finding's position (``end_line`` 0: no end)."""
        return self.raw or (self.line, self.column, self.end_line, self.end_column)

    @property
    def where(self) -> str:
        """``path:line:col`` (``path:cell N:line:col`` in a notebook), as the text formats print it."""
        cell = f"cell {self.cell}:" if self.cell else ""
        return f"{self.path}:{cell}{self.line}:{self.column}"

    @property
    def via(self) -> str:
        """``via utils.py:41`` for each related location (paths relative to this file's folder)."""
        return ", ".join(f"via {_relative(path, self.path)}:{line}" for path, line, _ in self.related)

    def to_json(self) -> dict:
        """The finding as a ruff-shaped JSON object (``--output-format json``)."""
        data = {
            "code": self.code,
            "name": self.name,
            "message": self.message,
            "severity": self.severity.value,
            "filename": self.path,
            "location": {"row": self.line, "column": self.column},
            "end_location": {"row": self.end_line or self.line, "column": self.end_column or self.column},
            "fix": {"message": self.fix, "applicability": "display-only", "edits": []} if self.fix else None,
            "url": self.url,
        }
        if self.cell:
            data["cell"] = self.cell
        if self.related:
            data["related"] = [{"filename": path, "location": {"row": line, "column": column}}
                               for path, line, column in self.related]
        return data


def _relative(path: str, to: str) -> str:
    """``path`` relative to the folder of the file ``to`` (itself when that fails)."""
    import os

    try:
        return os.path.relpath(path, os.path.dirname(os.path.abspath(to)))
    except ValueError:  # another drive
        return path
