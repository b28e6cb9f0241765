"""Each finding's own fix, as text edits of the file it was found in, without writing anything.

What the machine formats (``json``, ``sarif``, ``rdjson``), the ``[*]`` marks of the text
output and the language server's code actions offer. A report shows the fix a finding's rule
declares (its codemod applies to the finding alone: the edit, safe or unsafe as the rule
declares it), without checking the fixed file again: that check costs a whole check of the
file per fix. Verification (:func:`verify`: the fixed text must pass the test ``--fix``
applies, :func:`accumlint.run.apply_fixes.judge`) runs only where a fix is about to be shown as a
change or applied: ``--show-fixes``, a code action, and ``--fix``/``--diff`` themselves, which
leave a fix that fails it unapplied and say why. A notebook finding's edits are in the lines of
its cell (:func:`accumlint.pipeline.notebook.check_notebook`), as ruff gives them; a notebook's fixes are
verified in the text of its code cells, as ``--fix`` applies them.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from accumlint.files.text_edits import SAFE, UNSAFE, SuggestedFix, apply_edits
from accumlint.pipeline.run_context import ALONE, RunContext
from accumlint.spec import UNUSED_NOQA_CODE
from accumlint.spec.findings import Finding

__all__ = ["CODEMOD_CODES", "FIXABLE_CODES", "SAFE", "UNSAFE", "SuggestedFix", "suggest_run", "suggest_source",
           "verify", "verify_run"]

if TYPE_CHECKING:
    from accumlint.checks.base import Rule
    from accumlint.project import ProjectIndex

#: the codes with a fixer (kept here, not imported from the fixers, so that a run whose findings
#: have none of them does not load LibCST)
CODEMOD_CODES = frozenset({"ACC001", "ACC006", "ACC101", "ACC201", "ACC304"})
#: the codes whose findings may have a fix: those and ``ACC990`` (its fix, computed with the
#: finding, edits a comment: :func:`accumlint.noqa.noqa_report.unused_noqa`)
FIXABLE_CODES = CODEMOD_CODES | {UNUSED_NOQA_CODE}
def suggest_source(
    path: str, data: bytes, codes: Iterable[str], findings: Iterable[Finding] | None = None,
    current: list[Finding] | None = None, context: RunContext = ALONE,
) -> dict[Finding, SuggestedFix]:
    """The fix of each fixable finding of ``data`` under the ``codes`` enabled (of ``findings``
    only, when given), each located by its position in a new parse. ``current``: every finding
    the check of ``data`` reported, when the caller has them (the file is not checked again to
    list them); ``context``: the run's that check was made in. As the rules propose them:
    :func:`verify` checks them. Loads LibCST."""
    from accumlint.files.reading import is_notebook
    from accumlint.fixes.base import Located
    from accumlint.fixes.propose import proposed
    from accumlint.pipeline import engine
    from accumlint.pipeline.notebook import check_notebook
    from accumlint.run.apply_fixes import _decode

    codes = frozenset(codes)
    if not FIXABLE_CODES & codes:
        return {}
    if is_notebook(path):  # its cells checked again, their fixes with them
        wanted = None if findings is None else set(findings)
        fixes = check_notebook(path, data, engine.rules_for(codes), context, suggest=True).fixes or {}
        return {f: fix for f, fix in fixes.items() if wanted is None or f in wanted}
    try:
        text, _ = _decode(data)
    except (SyntaxError, UnicodeDecodeError, LookupError):
        return {}
    if findings is None and current is None:
        current = engine.check_source(path, data, engine.rules_for(codes), context).findings
    located: list[Located] = []  # one parse and one resolution for all the file's fixes

    def locate(finding: Finding) -> Located:
        if not located:
            located.append(Located.at_position(engine.parse_module(text), finding))
            return located[0]
        return located[0].again(finding)

    listed = list(current if findings is None else findings)  # type: ignore[arg-type]
    fixes = proposed(text, listed, locate)
    if any(f.code == UNUSED_NOQA_CODE for f in listed):
        fixes.update(_unused_noqa_fixes(path, data, text, codes, listed, context))
    return fixes


def _unused_noqa_fixes(path: str, data: bytes, text: str, codes: frozenset[str],
                       listed: list[Finding], context: RunContext) -> dict[Finding, SuggestedFix]:
    """The fixes of the ``ACC990`` findings among ``listed`` (a check of ``data`` tells what
    its directives suppress): where the run did not compute them with the findings."""
    from accumlint.noqa import noqa_report
    from accumlint.pipeline import engine
    from accumlint.settings import config

    fixes: dict[Finding, SuggestedFix] = {}
    suppressed = engine.check_source(path, data, engine.rules_for(codes), context).suppressed
    noqa_report.unused_noqa(path, text, suppressed, config.known_codes(), codes, fixes)
    wanted = set(listed)
    return {finding: fix for finding, fix in fixes.items() if finding in wanted}


def verify(
    path: str, data: bytes, fixes: Mapping[Finding, SuggestedFix], current: Sequence[Finding],
    rules: Sequence[Rule], *, context: RunContext = ALONE,
) -> dict[Finding, SuggestedFix]:
    """The ``fixes`` of ``data``'s findings that pass the test ``--fix`` applies
    (:func:`accumlint.run.apply_fixes.judge`): each fixed text is checked again with ``rules`` (in
    ``context``, the run's ``data`` was checked in) and compared with ``current`` (the findings
    of ``data``). A fix that reveals what its code masked
    comes back unsafe; one that fails, or whose check raises, is left out. The ``ACC990`` fixes
    (a directive's comment, computed from the check itself) are kept as they are. A notebook's
    fixes (edits of their findings' cells) are checked in the text of its code cells, as
    ``--fix`` checks them. Loads LibCST; costs one check per fix of the definitions its edit
    can affect (:mod:`accumlint.run.fix_scope`; a notebook's: of its whole text)."""
    from accumlint.pipeline import engine
    from accumlint.run.apply_fixes import _source_text, judge
    from accumlint.run.fix_scope import Baseline

    read = _source_text(path, data)
    if read is None:
        return {}
    text, encoding, notebook = read

    def fixed_text(finding: Finding, fix: SuggestedFix) -> str:
        if notebook is None:
            return apply_edits(text, fix.edits)
        cell = "\n".join(notebook.cell_lines(finding.cell) or ())
        return notebook.with_cell(finding.cell, apply_edits(cell, fix.edits).split("\n"))

    baseline = Baseline(text, current, context)
    kept: dict[Finding, SuggestedFix] = {}
    for finding, fix in fixes.items():
        if finding.code == UNUSED_NOQA_CODE:
            kept[finding] = fix
            continue
        try:
            fixed = fixed_text(finding, fix)
            after = (engine.check_source(path, fixed.encode(encoding), rules, context).findings if notebook
                     else baseline.check(path, fixed, encoding, rules))
        except Exception:  # noqa: BLE001 - a fix whose text cannot be checked is not applied by --fix either
            continue
        applicability, _ = judge(current, after, finding.code, fix.applicability)
        if applicability is not None:
            kept[finding] = replace(fix, applicability=applicability)
    return kept


def suggest_run(
    findings: Iterable[Finding],
    sources: Mapping[str, bytes],
    codes_for: Callable[[str], frozenset[str]],
    projects: Mapping[str, ProjectIndex] | None = None,
    incomplete: dict[str, list[str]] | None = None,
    *,
    ignore_noqa: bool = False,
) -> dict[Finding, SuggestedFix]:
    """:func:`suggest_source` (not verified) for every file of a run that has a finding of a
    fixable code. A file whose fixes cannot be computed gets none, and the reason in
    ``incomplete`` (path -> reasons), where given. ``ignore_noqa``: the run's ``--ignore-noqa``."""
    from accumlint.pipeline import engine

    fixes: dict[Finding, SuggestedFix] = {}
    for path, listed, every, context in _by_file(findings, sources, projects,
                                                 lambda f: f.code in FIXABLE_CODES, ignore_noqa):
        reasons: list[str] = []
        suggest = functools.partial(suggest_source, path, sources[path], codes_for(path), listed, current=every,
                                    context=context)
        fixes.update(engine.later_stage(reasons, "the fixes", suggest, {}))
        if reasons and incomplete is not None:
            incomplete.setdefault(path, []).extend(reasons)
    return fixes


def verify_run(
    fixes: Mapping[Finding, SuggestedFix],
    findings: Iterable[Finding],
    sources: Mapping[str, bytes],
    codes_for: Callable[[str], frozenset[str]],
    projects: Mapping[str, ProjectIndex] | None = None,
    *,
    ignore_noqa: bool = False,
) -> dict[Finding, SuggestedFix]:
    """:func:`verify` of a run's ``fixes``, each file compared with the run's own findings of it
    and, where ``projects`` names the project index the file was checked in, checked again in
    that index (a fix must not look better only because the helpers it calls were not
    followed). In this process, outside any check's time limit: a fix that cannot be verified is
    left out, never reported as the file's ``ACC000``. ``ignore_noqa``: the run's ``--ignore-noqa``."""
    from accumlint.pipeline import engine

    kept: dict[Finding, SuggestedFix] = {}
    for path, listed, every, context in _by_file(findings, sources, projects, lambda f: f in fixes,
                                                 ignore_noqa):
        rules = engine.rules_for(codes_for(path))
        kept.update(verify(path, sources[path], {f: fixes[f] for f in listed}, every, rules, context=context))
    return kept


def _by_file(
    findings: Iterable[Finding], sources: Mapping[str, bytes], projects: Mapping[str, ProjectIndex] | None,
    wanted: Callable[[Finding], bool], ignore_noqa: bool,
) -> Iterator[tuple[str, list[Finding], list[Finding], RunContext]]:
    """``(path, its wanted findings, all its findings, the context of its check: the project index
    ``projects`` names for it and ``ignore_noqa``)`` for each file of ``sources`` with a wanted finding, in order."""
    by_path: dict[str, list[Finding]] = defaultdict(list)
    every: dict[str, list[Finding]] = defaultdict(list)
    for finding in findings:
        every[finding.path].append(finding)
        if finding.path in sources and wanted(finding):
            by_path[finding.path].append(finding)
    for path, listed in by_path.items():
        yield path, listed, every[path], RunContext((projects or {}).get(path), ignore_noqa=ignore_noqa)
