"""Automatic fixes (``accumlint check --fix``): LibCST codemods, one per rule that has one.

Each fix is marked like ruff's: *safe* fixes keep what the code computes except for the bug
(applied by ``--fix``); *unsafe* fixes may change behaviour a reader relies on (applied only
with ``--unsafe-fixes``).
"""

from __future__ import annotations

SAFE = "safe"
UNSAFE = "unsafe"

#: code -> applicability of its fix
APPLICABILITY: dict[str, str] = {}


def fix_applicability(code: str) -> str | None:
    """``"safe"``, ``"unsafe"`` or ``None`` when the rule has no automatic fix."""
    return APPLICABILITY.get(code.upper())
