"""Where the project's shared real input lives: ``../shared`` beside the checkout (CI lays it
there), or ``$ACCUMLINT_SHARED``. Tests that need it are in the slow tier (:data:`needs_shared`)
and skip with a clear reason when it is absent; the fast tier reads only ``tests/data``, so it
collects the same tests in a user's clone."""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("ACCUMLINT_SHARED", REPO.parent / "shared"))


#: the mark of a test that reads ``../shared``: the slow tier (the fast one must not depend on it)
needs_shared = pytest.mark.slow
#: ``tests/data``: the inputs the fast tier needs, small files of our own
DATA = REPO / "tests" / "data"


def absent_reason(path: Path) -> str:
    """Why a test on ``path`` (under shared/) is skipped where it is not there."""
    return f"{path} is absent: the shared real-code input comes with the project's workspace, not the repo"


def require_shared(*parts: str) -> Path:
    """The path under shared/, or skip the test when it is not there (a user's clone)."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(absent_reason(path))
    return path


def shared_params(rows: list[Any], *parts: str) -> list[Any]:
    """``rows`` read from ``shared/<parts>`` as a parametrization; where that file is absent, one
    parameter that skips with the reason (not pytest's bare "got empty parameter set")."""
    path = SHARED.joinpath(*parts)
    if rows or path.exists():
        return rows
    return [pytest.param(None, id="shared-absent", marks=pytest.mark.skip(reason=absent_reason(path)))]


def pattern_rows(families: tuple[str, ...]) -> list[dict[str, str]]:
    """The rows of ``shared/patterns/expected.tsv`` whose file name starts with one of ``families``
    (``("flow_", "sync_")``); none where the shared input is absent."""
    table = SHARED / "patterns" / "expected.tsv"
    if not table.exists():
        return []
    with table.open(newline="") as handle:
        return [row for row in csv.DictReader(handle, delimiter="\t") if row["file"].startswith(families)]
