"""Each finding's own fix, as text edits of the file it was found in, without writing anything.

What the machine formats (``json``, ``sarif``, ``rdjson``), the ``[*]`` marks of the text
output and the language server's code actions offer. A finding gets a fix when its rule's
codemod applies to it alone and the result passes the test ``--fix`` applies
(:func:`accumlint.fixes.apply.improves`): so applying the safe fixes' edits of a file gives the
bytes ``--fix`` writes, when the fixes do not touch the same lines. A notebook finding's edits
are in the lines of its cell (:func:`accumlint.notebook.check_notebook`), as ruff gives them.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from accumlint.findings import Finding
from accumlint.spec import UNUSED_NOQA_CODE
from accumlint.text_edits import TextEdit, apply_edits, split_lines, text_edits

if TYPE_CHECKING:
    from accumlint.checks.base import Rule

#: the codes with a fixer (kept here, not imported from the fixers, so that a run whose findings
#: have none of them does not load LibCST)
CODEMOD_CODES = frozenset({"ACC001", "ACC006", "ACC101", "ACC201", "ACC304"})
#: the codes whose findings may have a fix: those and ``ACC990`` (its fix, computed with the
#: finding, edits a comment: :func:`accumlint.noqa_report.unused_noqa`)
FIXABLE_CODES = CODEMOD_CODES | {UNUSED_NOQA_CODE}
#: :data:`accumlint.fixes.base.SAFE` and ``UNSAFE``, without importing LibCST
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


def suggest_source(
    path: str, data: bytes, codes: Iterable[str], findings: Iterable[Finding] | None = None,
    current: list[Finding] | None = None,
) -> dict[Finding, SuggestedFix]:
    """The fix of each fixable finding of ``data`` under the ``codes`` enabled (of ``findings``
    only, when given), each located by its position in a new parse. ``current``: every finding
    the check of ``data`` reported, when the caller has them (the file is not checked again).
    Loads LibCST."""
    from accumlint import engine
    from accumlint.fixes.apply import _decode
    from accumlint.fixes.base import Located
    from accumlint.notebook import check_notebook, is_notebook

    codes = frozenset(codes)
    if not FIXABLE_CODES & codes:
        return {}
    if is_notebook(path):  # its cells checked again, their fixes with them
        wanted = None if findings is None else set(findings)
        fixes = check_notebook(path, data, engine.rules_for(codes), suggest=True).fixes or {}
        return {f: fix for f, fix in fixes.items() if wanted is None or f in wanted}
    try:
        text, encoding = _decode(data)
    except (SyntaxError, UnicodeDecodeError, LookupError):
        return {}
    rules = engine.rules_for(codes)
    # what --fix compares against: the run's own findings, else checked once an edit needs them
    if findings is None and current is None:
        current = engine.check_source(path, data, rules).findings
    located: list[Located] = []  # one parse and one resolution for all the file's fixes

    def locate(finding: Finding) -> Located:
        if not located:
            located.append(Located.at_position(engine.parse_module(text), finding))
            return located[0]
        return located[0].again(finding)

    listed = list(current if findings is None else findings)
    fixes = _verified(path, data, text, encoding, listed, locate, current, rules)
    if any(f.code == UNUSED_NOQA_CODE for f in listed):
        fixes.update(_unused_noqa_fixes(path, data, text, codes, listed))
    return fixes


def _unused_noqa_fixes(path: str, data: bytes, text: str, codes: frozenset[str],
                       listed: list[Finding]) -> dict[Finding, SuggestedFix]:
    """The fixes of the ``ACC990`` findings among ``listed`` (a check of ``data`` tells what
    its directives suppress): where the run did not compute them with the findings."""
    from accumlint import config, engine, noqa_report

    fixes: dict[Finding, SuggestedFix] = {}
    suppressed = engine.check_source(path, data, engine.rules_for(codes)).suppressed
    noqa_report.unused_noqa(path, text, suppressed, config.known_codes(), codes, fixes)
    wanted = set(listed)
    return {finding: fix for finding, fix in fixes.items() if finding in wanted}


def suggest_in_check(
    path: str, data: bytes, text: str, module: object, nodes: Mapping[Finding, object],
    findings: list[Finding], rules: Sequence[Rule], original: str | None = None,
) -> dict[Finding, SuggestedFix]:
    """:func:`suggest_source` inside the check of ``data`` (``text``: what LibCST parsed into
    ``module``), where ``nodes`` still maps each finding to the node its rule reported: no
    second parse, and only the statements around those nodes get positions. ``findings``: the
    check's findings (what a fix is compared against); ``rules``: those of the run's codes (the
    fixed text is checked with them). ``original``: the whole text, where ``text`` has blank
    lines for definitions left out (:mod:`accumlint.kept_blocks`): a fixer's edits are carried
    over to it, and a fix whose edits reach a blanked line is not offered. For a notebook, ``data``
    is its cells' checked text (:func:`accumlint.notebook.check_notebook` places the edits in cells)."""
    from accumlint.fixes.apply import _decode
    from accumlint.fixes.base import Located, parent_map

    fixable = [f for f in findings if f.code in CODEMOD_CODES and not f.related and f in nodes]
    if not fixable:
        return {}
    try:
        encoding = _decode(data)[1]
    except (SyntaxError, UnicodeDecodeError, LookupError):
        return {}
    parents: list[dict] = []

    def locate(finding: Finding) -> Located:
        if not parents:
            parents.append(parent_map(module))  # type: ignore[arg-type]
        return Located.at_node(module, nodes[finding], finding, text, parents[0])  # type: ignore[arg-type]

    if original is None:
        return _verified(path, data, text, encoding, fixable, locate, findings, rules)
    return _verified(path, data, original, encoding, fixable, locate, findings, rules,
                     lambda fixed: _carried_over(text, fixed, original))


def _carried_over(read: str, fixed: str, original: str) -> str | None:
    """``original`` with the edits that turned ``read`` (its kept text) into ``fixed``, or None
    where an edit touches a line the kept text blanked."""
    edits = text_edits(read, fixed)
    read_lines, original_lines = split_lines(read), split_lines(original)
    for edit in edits:
        for row in range(edit.location[0], edit.end_location[0] + 1):
            if row <= len(read_lines) and (row > len(original_lines) or read_lines[row - 1] != original_lines[row - 1]):
                return None
    return apply_edits(original, edits)


def _verified(
    path: str, data: bytes, text: str, encoding: str, findings: list[Finding],
    locate: Callable[[Finding], object], current: list[Finding] | None, rules: Sequence[Rule],
    carry: Callable[[str], str | None] | None = None,
) -> dict[Finding, SuggestedFix]:
    """The fix of each of ``findings`` whose fixer applies and passes the test ``--fix`` applies
    against ``current`` (checked here when None and an edit needs it). ``carry``: the file's
    fixed ``text`` from the fixed text the fixer printed (None: no fix), where they differ."""
    from accumlint import engine
    from accumlint.fixes.apply import improves
    from accumlint.fixes.rules import FIXERS

    fixes: dict[Finding, SuggestedFix] = {}
    for finding in findings:
        if finding.code not in FIXERS or finding.related:
            # reported at the call of a helper that performs the event: the statement to change is
            # in the helper, and moving the call would move everything else the helper does with it
            continue
        applicability, fixer = FIXERS[finding.code]
        try:
            edit = fixer(locate(finding))  # type: ignore[arg-type]
        except Exception:  # noqa: BLE001 - a fixer that fails leaves the finding without a fix, as --fix does
            edit = None
        if edit is None:
            continue
        new_text = edit.module.code if carry is None else carry(edit.module.code)
        if new_text is None or new_text == text:
            continue
        if current is None:
            current = engine.check_source(path, data, rules).findings
        if not improves(current, engine.check_source(path, new_text.encode(encoding), rules).findings, finding.code):
            continue
        kind = UNSAFE if UNSAFE in (applicability, edit.applicability) else SAFE
        fixes[finding] = SuggestedFix(kind, finding.fix, tuple(text_edits(text, new_text)))
    return fixes


def suggest_run(
    findings: Iterable[Finding],
    sources: Mapping[str, bytes],
    codes_for: Callable[[str], frozenset[str]],
    projects: Mapping[str, object] | None = None,
    incomplete: dict[str, list[str]] | None = None,
) -> dict[Finding, SuggestedFix]:
    """:func:`suggest_source` for every file of a run that has a finding of a fixable code,
    compared with the run's own findings of the file and, where ``projects`` names the
    project index the file was checked in, checked again in that index (a fix must not look
    better only because the helpers it calls were not followed). A file whose fixes cannot be
    computed gets none, and the reason in ``incomplete`` (path -> reasons), where given."""
    from accumlint import engine, project

    by_path: dict[str, list[Finding]] = defaultdict(list)
    every: dict[str, list[Finding]] = defaultdict(list)
    for finding in findings:
        every[finding.path].append(finding)
        if finding.code in FIXABLE_CODES and finding.path in sources:
            by_path[finding.path].append(finding)
    fixes: dict[Finding, SuggestedFix] = {}
    previous = project.active()
    try:
        for path, listed in by_path.items():
            project.activate((projects or {}).get(path))  # type: ignore[arg-type]
            reasons: list[str] = []
            suggest = functools.partial(suggest_source, path, sources[path], codes_for(path), listed,
                                        current=every[path])
            fixes.update(engine.later_stage(reasons, "the fixes", suggest, {}))
            if reasons and incomplete is not None:
                incomplete.setdefault(path, []).extend(reasons)
    finally:
        project.activate(previous)
    return fixes
