"""Automatic fixes (``accumlint check --fix``): LibCST codemods, one per rule that has one.

Each fix is marked like ruff's: *safe* fixes only remove the bug (applied by ``--fix``);
*unsafe* fixes may also change something a reader relies on, such as a logged value
(applied only with ``--unsafe-fixes``). See :mod:`accumlint.fixes.rules` for what each
codemod does and :mod:`accumlint.run.apply_fixes` for how fixes are applied and checked.
"""

from __future__ import annotations

from accumlint.fixes.base import SAFE, UNSAFE
from accumlint.fixes.rules import FIXERS
from accumlint.spec import UNUSED_NOQA_CODE

__all__ = ["APPLICABILITY", "SAFE", "UNSAFE", "fix_applicability"]

#: code -> applicability of its fix (a fixer may mark one occurrence unsafe); ``ACC990``'s fix
#: edits the directive's comment, not the syntax tree (:func:`accumlint.noqa.noqa_report.remove_codes`)
APPLICABILITY: dict[str, str] = {
    **{code: applicability for code, (applicability, _) in FIXERS.items()},
    UNUSED_NOQA_CODE: SAFE,
}


def fix_applicability(code: str) -> str | None:
    """``"safe"``, ``"unsafe"`` or ``None`` when the rule has no automatic fix."""
    return APPLICABILITY.get(code.upper())
