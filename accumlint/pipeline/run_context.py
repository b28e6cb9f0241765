"""The run context: what one run of checks is (its project, fixes or not, ``--ignore-noqa``).

It is passed explicitly from the CLI, the runner, the language server and a worker's initializer
down to :func:`accumlint.pipeline.engine.check_source`, instead of process state.

A leaf module (nothing of accumlint at run time), so that every stage may take one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from accumlint.project import ProjectIndex


@dataclass(frozen=True)
class RunContext:
    """What the checks of one run share: ``project``, the index of the project its files belong
    to (None: each file alone, no call followed into another module); ``suggest``, whether a
    check computes its findings' fixes (:attr:`accumlint.pipeline.engine.FileResult.fixes`);
    ``ignore_noqa``, whether no ``noqa`` directive applies (``--ignore-noqa``: the check keeps
    every finding, and the unused-noqa report and its fix do not run)."""

    project: ProjectIndex | None = None
    suggest: bool = False
    ignore_noqa: bool = False


#: a check of one file alone: no project, no fixes, the directives applied
ALONE = RunContext()
