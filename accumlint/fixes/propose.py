"""The fixes the fixers propose for a check's findings, as text edits, not verified.

They are proposed inside the check that parsed the file (:func:`suggest_in_check`, called by
:mod:`accumlint.pipeline.engine` with the nodes its rules reported) or from a new parse
(:func:`accumlint.run.suggested_fixes.suggest_source`).

Below the engine: nothing here imports it (the engine asks for the fixes; the run-level
suggestion and verification in :mod:`accumlint.run.suggested_fixes` check files through it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from accumlint.files.text_edits import SAFE, UNSAFE, SuggestedFix, TextEdit, split_lines
from accumlint.fixes.base import Located, module_edits, parent_map
from accumlint.fixes.rules import FIXERS
from accumlint.model.positions import Shared
from accumlint.spec.findings import Finding


def suggest_in_check(
    text: str, module: object, nodes: Mapping[Finding, object], findings: list[Finding],
    original: str | None = None,
) -> dict[Finding, SuggestedFix]:
    """The fixes the fixers propose (:func:`proposed`, not verified) inside the check that
    parsed ``text`` into ``module``, where ``nodes`` still maps each finding to the node its rule
    reported: no second parse, and only the statements around those nodes get positions.
    ``findings``: the check's findings. ``original``: the whole text, where ``text`` has blank
    lines for definitions left out (:mod:`accumlint.pipeline.kept_blocks`): the edits are its own (the same
    rows), and a fix whose edits reach a blanked line is not offered. For a notebook, ``text`` is
    its code cells' checked text (:func:`accumlint.pipeline.notebook.check_notebook` places the edits in cells)."""
    fixable = [f for f in findings if f.code in FIXERS and not f.related and f in nodes]
    if not fixable:
        return {}
    parents = parent_map(module)  # type: ignore[arg-type]
    shared = Shared(text, parents)  # one parse of the text and one map of parents for all the fixes

    def locate(finding: Finding) -> Located:
        return Located.at_node(module, nodes[finding], finding, text, parents, shared)  # type: ignore[arg-type]

    return proposed(text, fixable, locate, original)


def _on_kept_rows(read: str, original: str, edits: Iterable[TextEdit]) -> bool:
    """Whether ``edits`` of ``read`` (the kept text of ``original``: the same rows, some blanked)
    touch only rows that ``read`` kept as they are in ``original`` (then they are ``original``'s too)."""
    read_lines, original_lines = split_lines(read), split_lines(original)
    for edit in edits:
        for row in range(edit.location[0], edit.end_location[0] + 1):
            if row <= len(read_lines) and (row > len(original_lines) or read_lines[row - 1] != original_lines[row - 1]):
                return False
    return True


def proposed(
    text: str, findings: list[Finding], locate: Callable[[Finding], object], original: str | None = None,
) -> dict[Finding, SuggestedFix]:
    """The fix each of ``findings``' fixers proposes in ``text`` (what was parsed), as its rule
    declares it (safe or unsafe), without checking the fixed text again
    (:func:`accumlint.run.suggested_fixes.verify` does, on demand). ``original``: the whole text,
    where ``text`` has blank lines for definitions left out (:mod:`accumlint.pipeline.kept_blocks`): a fix
    whose edits reach a blanked line is not offered."""
    fixes: dict[Finding, SuggestedFix] = {}
    for finding in findings:
        if finding.code not in FIXERS or finding.related:
            # reported at the call of a helper that performs the event: the statement to change is
            # in the helper, and moving the call would move everything else the helper does with it
            continue
        applicability, fixer = FIXERS[finding.code]
        try:
            located = locate(finding)
            edit = fixer(located)  # type: ignore[arg-type]
            edits = [] if edit is None else module_edits(located.module, edit.module, text, finding.line)  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 - a fixer that fails leaves the finding without a fix, as --fix does
            continue
        if not edits or original is not None and not _on_kept_rows(text, original, edits):
            continue
        kind = UNSAFE if UNSAFE in (applicability, edit.applicability) else SAFE  # type: ignore[union-attr]
        fixes[finding] = SuggestedFix(kind, finding.fix, tuple(edits))
    return fixes
