"""Where the project's shared real input lives: ``../shared`` beside the checkout (CI lays it
there), or ``$ACCUMLINT_SHARED``. Tests that need it skip with a clear reason when absent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("ACCUMLINT_SHARED", REPO.parent / "shared"))


def require_shared(*parts: str) -> Path:
    """The path under shared/, or skip the test when it is not there (a user's clone)."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} is absent: the shared real-code input comes with the project's workspace, not the repo")
    return path
