"""What a rule is: a small class that reads the file's group model and yields hits."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import libcst as cst

from accumlint.findings import Severity

if TYPE_CHECKING:
    from accumlint.model import FileModel

DOCS_URL = "https://github.com/accumlint/accumlint/blob/main/rules/{code}-{name}/README.md"


@dataclass(frozen=True)
class Hit:
    """A rule's verdict on one node: ``message`` says what happens at run time, ``fix`` what to do."""

    node: cst.CSTNode
    message: str
    fix: str


class Rule:
    """Base class of every rule.

    Subclasses set the class attributes and implement :meth:`check`, which must only read
    the :class:`~accumlint.model.FileModel` (never re-derive loop structure) and must stay
    silent where the model answers "unknown".
    """

    code: ClassVar[str]
    name: ClassVar[str]
    severity: ClassVar[Severity]
    principle: ClassVar[str]  # the property of the accumulation guide it protects, e.g. "P2"
    summary: ClassVar[str]  # one line, for the rule table
    default_enabled: ClassVar[bool] = True
    #: Source substrings without which the rule cannot fire (the engine skips the model when a
    #: file holds none of the selected rules' markers; empty: always run). Every loop rule needs a backward.
    markers: ClassVar[tuple[bytes, ...]] = (b"backward", b"manual_backward", b"update_params")

    @classmethod
    def url(cls) -> str:
        """The rule's catalogue page."""
        return DOCS_URL.format(code=cls.code, name=cls.name)

    def check(self, model: FileModel) -> Iterator[Hit]:
        raise NotImplementedError
