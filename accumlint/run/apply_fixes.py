"""Applying fixes to a file: one fix at a time, each re-checked, then an atomic write.

A fix is kept only if the fixed text still parses and the file then has fewer findings of
the fixed code and no finding of a code (or more of one) it did not have before;
otherwise that occurrence is left as it is. Fixing repeats until nothing changes (at most
:data:`MAX_ROUNDS` fixes per file), so a second ``--fix`` run changes nothing.
A notebook is fixed in the text its code cells are checked as (:mod:`accumlint.pipeline.notebook`), and
each fix kept is put back into its cell (:func:`accumlint.pipeline.notebook.rebuild`): a fix that would
cross a cell boundary or rewrite a magic line is not applied. Only the edited cells' ``source``
change in the ``.ipynb``; outputs, metadata and the JSON's layout stay as they were.

Writing goes through :func:`accumlint.files.writing.rewrite`: atomic, refused for a file that changed
since it was read (compared once the new bytes are on disk, immediately before the rename), for
a symlink out of the named trees, a read-only or hard-linked file; owner, group, mode and extended
attributes are kept. What remains is the window between that last comparison and the rename
(microseconds): an edit saved exactly then is replaced, as with any tool that rewrites files
without locking them (ruff documents the same).
"""

from __future__ import annotations

import codecs
import dataclasses
import difflib
import io
import sys
import tokenize
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from accumlint.checks.base import Rule
from accumlint.files.reading import MAX_SOURCE_BYTES, NotARegularFile, is_notebook, read_signed, source_limit
from accumlint.files.writing import Boundary, rewrite
from accumlint.fixes.base import SAFE, UNSAFE, Located
from accumlint.fixes.rules import FIXERS, REVEALS
from accumlint.pipeline import engine
from accumlint.pipeline.notebook import NotebookError, NotebookSource, fits, notebook_source, rebuild
from accumlint.pipeline.run_context import ALONE, RunContext
from accumlint.run.fix_scope import Baseline
from accumlint.spec import UNUSED_NOQA_CODE
from accumlint.spec.findings import Finding

if TYPE_CHECKING:
    from concurrent.futures import Future, ProcessPoolExecutor

MAX_ROUNDS = 100


@dataclass
class FixResult:
    """What fixing one file did: the new bytes and the count of fixes applied and held back."""

    path: str
    original: bytes
    fixed: bytes
    applied: Counter[str] = field(default_factory=Counter)
    unsafe_pending: int = 0  # fixes available only with --unsafe-fixes
    #: the fixes a report showed that were left out, each a line that says where and why (they
    #: failed the test of the fixed file, :func:`judge`, or it made them unsafe)
    not_applied: list[str] = field(default_factory=list)
    error: str = ""  #: why the fixed bytes were not written (the file changed meanwhile, an OS error)

    @property
    def changed(self) -> bool:
        """Whether any fix changed the file."""
        return self.fixed != self.original

    def diff(self) -> str:
        """A unified diff of the fix (``--diff``); empty when nothing changed."""
        if not self.changed:
            return ""
        before = _decode(self.original)[0].splitlines(keepends=True)
        after = _decode(self.fixed)[0].splitlines(keepends=True)
        lines = difflib.unified_diff(before, after, fromfile=f"a/{self.path}", tofile=f"b/{self.path}")
        return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)


def _decode(data: bytes) -> tuple[str, str]:
    """The text and the encoding to write it back with (a UTF-8 BOM is kept)."""
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    if encoding == "utf-8" and data.startswith(codecs.BOM_UTF8):
        encoding = "utf-8-sig"
    return data.decode(encoding), encoding


def _codes(findings: Iterable[Finding]) -> Counter[str]:
    return Counter(f.code for f in findings)


def judge(before: Iterable[Finding], after: Iterable[Finding], code: str,
          applicability: str = SAFE) -> tuple[str | None, str]:
    """Whether a fix of a ``code`` finding is kept, as ``(applicability, reason)``: kept as
    ``applicability`` (declared by its rule) where the fixed file has fewer findings of ``code``
    and no code with more; kept as unsafe where the codes with more are only those the fix may
    reveal (:data:`~accumlint.fixes.rules.REVEALS`); else not kept (None). ``reason`` says why,
    where the fix is not kept as declared."""
    counts_before, counts_after = _codes(before), _codes(after)
    if counts_after[engine.PARSE_ERROR_CODE] > counts_before[engine.PARSE_ERROR_CODE]:
        return None, "the fixed file could not be checked"
    if counts_after[code] >= counts_before[code]:
        return None, f"the fixed file would not have fewer {code} findings"
    more = sorted(c for c in counts_after if counts_after[c] > counts_before[c])
    if not more:
        return applicability, ""
    if set(more) <= REVEALS.get(code, frozenset()):
        return UNSAFE, f"it reveals {', '.join(more)}, which {code} masked (fix that too)"
    return None, f"the fixed file would have more {', '.join(more)} findings"


def _key(finding: Finding) -> tuple[str, str, int]:
    return finding.code, finding.message, finding.column


def _source_text(path: str, data: bytes) -> tuple[str, str, NotebookSource | None] | None:
    """``(text, encoding, notebook)``: the text the fixes edit, the encoding it is written back
    with, and a notebook's cells (None for a ``.py`` file), whose code cells' text is the one
    edited; None where ``data`` cannot be read as such (or a notebook's code is too large to
    parse: its check says so)."""
    try:
        if not is_notebook(path):
            return (*_decode(data), None)
        notebook = notebook_source(data)
    except (SyntaxError, UnicodeDecodeError, LookupError, NotebookError):
        return None
    if len(notebook.text.encode("utf-8")) > MAX_SOURCE_BYTES:
        return None
    return notebook.text, "utf-8", notebook


def fix_source(
    path: str, data: bytes, rules: Sequence[Rule], *, unsafe: bool = False, codes: Iterable[str] | None = None,
    checked: engine.FileResult | None = None, context: RunContext = ALONE,
) -> FixResult:
    """Apply the fixes of the findings that ``rules`` report in ``data`` (only ``codes`` if given);
    where ``codes`` holds ``ACC990``, last, the unused codes of the ``noqa`` directives go.
    ``checked``: the check of ``data`` with ``rules``, where the caller has it; ``context``: the
    run's that check was made in (each fixed text is checked in it). A fix that fails
    :func:`judge`, or that it turns unsafe without ``unsafe``, is left out and said why in
    :attr:`FixResult.not_applied`."""
    result = FixResult(path, data, data)
    fixable = set(FIXERS) if codes is None else set(FIXERS) & set(codes)
    # ACC990 is off by default: fixed only where it is selected (``codes``), and never without directives
    # applied; a notebook's check does not report it (nor does --fix take codes out of its cells)
    unused_noqa = (codes is not None and UNUSED_NOQA_CODE in codes and not context.ignore_noqa
                   and not is_notebook(path))
    if not (fixable or unused_noqa):
        return result
    read = _source_text(path, data)
    if read is None:
        return result
    text, encoding, notebook = read

    def accept(new_text: str) -> bool:
        """Whether an edit can be written: a notebook's must go back into its cells."""
        return notebook is None or fits(notebook, new_text)

    held_back: set[tuple[str, str, int]] = set()
    skipped: set[tuple[str, str, int]] = set()
    refused: dict[tuple[str, str, int], str] = {}  # the fixes that failed the test, and why
    if checked is None:
        checked = engine.check_source(path, data if notebook is None else text.encode(encoding), rules, context)
    findings = checked.findings
    for _ in range(MAX_ROUNDS if fixable else 0):
        if any(f.code == engine.PARSE_ERROR_CODE for f in findings):
            break
        baseline = Baseline(text, findings, context)  # each fixed text re-checked where its edit can matter
        # (a finding at a helper's call has no fix in this file: see suggested_fixes.suggest_source)
        candidates = [f for f in findings
                      if f.code in fixable and not f.related and _key(f) not in skipped | held_back]
        progress = False
        located: list[Located] = []  # one parse and one resolution of ``text`` for the round's fixers
        for finding in candidates:
            applicability, fixer = FIXERS[finding.code]
            try:
                if not located:
                    located.append(Located.at_position(engine.parse_module(text), finding))
                edit = fixer(located[0].again(finding))
            except Exception:  # noqa: BLE001 - a fixer that fails leaves the finding as it is
                edit = None
            if edit is None:
                skipped.add(_key(finding))
                continue
            declared = UNSAFE if UNSAFE in (applicability, edit.applicability) else SAFE
            if declared == UNSAFE and not unsafe:
                held_back.add(_key(finding))
                continue
            new_text = edit.module.code
            if not accept(new_text):
                skipped.add(_key(finding))
                continue
            new_findings = (engine.check_source(path, new_text.encode(encoding), rules, context).findings if notebook
                            else baseline.check(path, new_text, encoding, rules))
            verdict, reason = judge(findings, new_findings, finding.code, declared)
            if verdict is None or (verdict == UNSAFE and not unsafe):
                (skipped if verdict is None else held_back).add(_key(finding))
                refused[_key(finding)] = reason
                continue
            text, findings = new_text, new_findings
            result.applied[finding.code] += 1
            progress = True
            break
        if not progress:
            break
    if unused_noqa and not any(f.code == engine.PARSE_ERROR_CODE for f in findings):
        if result.applied:  # what the directives suppress now, in the fixed text
            checked = engine.check_source(path, text.encode(encoding), rules, context)
        text = _without_unused_noqa(path, text, encoding, checked, rules, frozenset(codes or ()), result, context)
    result.unsafe_pending = len(held_back)
    result.not_applied = [_not_applied(f, refused[_key(f)], _key(f) in held_back, notebook)
                          for f in findings if _key(f) in refused]
    if result.applied:
        result.fixed = text.encode(encoding) if notebook is None else rebuild(data, notebook, text) or data
    return result


def _not_applied(finding: Finding, reason: str, held_back: bool, notebook: NotebookSource | None) -> str:
    """The line that says why ``--fix`` left the fix of ``finding`` (of the fixed text) out; in a
    notebook (``notebook``: its cells), placed in its cell as a report places it."""
    if notebook is not None:
        cell, line = notebook.locate(finding.line)
        finding = dataclasses.replace(finding, cell=cell, line=line)
    what = "held back (applied with `--unsafe-fixes`)" if held_back else "not applied"
    return f"{finding.where}: {finding.code} fix {what}: {reason}"


def _without_unused_noqa(path: str, text: str, encoding: str, checked: engine.FileResult, rules: Sequence[Rule],
                         codes: frozenset[str], result: FixResult, context: RunContext) -> str:
    """``text`` (checked: ``checked``) with the ``ACC990`` codes taken out of its directives, last,
    once the other fixes are in: kept only where the findings stay exactly the same."""
    from accumlint.noqa import noqa_report
    from accumlint.settings import config

    new_text, changed = noqa_report.remove_unused(text, checked.suppressed, config.known_codes(), codes)
    if not changed:
        return text
    after = engine.check_source(path, new_text.encode(encoding), rules, context)
    if _codes(after.findings) != _codes(checked.findings):
        return text
    result.applied[UNUSED_NOQA_CODE] += changed
    return new_text


def _check_one(path: str, data: bytes, codes: frozenset[str], *, context: RunContext = ALONE) -> engine.FileResult:
    """The check :func:`fix_source` starts from (its ``checked``), in ``context``: a notebook's is
    of its code cells' text, where the fixes' findings are placed."""
    if is_notebook(path):
        read = _source_text(path, data)
        if read is None:  # fix_source fixes nothing in it
            return engine.FileResult(path)
        data = read[0].encode(read[1])
    return engine.check_source(path, data, engine.rules_for(codes), context)


def _fix_one(path: str, data: bytes, codes: frozenset[str], unsafe: bool,
             checked: engine.FileResult | None = None, *, context: RunContext = ALONE) -> FixResult:
    return fix_source(path, data, engine.rules_for(codes), unsafe=unsafe, codes=codes, checked=checked,
                      context=context)


def fixing_budget(timeout: float, findings: Iterable[Finding]) -> float:
    """Seconds the fixes of a file with ``findings`` may take, for a check's ``timeout``: the fix
    of each finding is verified by a check of the fixed file, and a finding may be tried again
    once after another fix, so each gets two checks' time (and two more: the file's own check,
    the unused-``noqa`` pass); never only the time of a single check (the parse timeout)."""
    fixable = sum(f.code in FIXERS for f in findings)
    return timeout * (2 * fixable + 2)


class _Fixer:
    """Runs :func:`fix_source` in one worker process, bounded in memory as a check's
    (:func:`accumlint.run.pool.limit_memory`), replaced when its work runs past its time (LibCST
    holds the GIL: only ending its process stops it) or kills it. The file is checked first,
    within ``timeout`` seconds (a check's limit; None: none); its fixes, each verified by a
    check of the fixed file, then get :func:`fixing_budget`: verification never counts against
    the check's own limit. ``context``: the run's switches the check and the fixes are made with
    (``--ignore-noqa``)."""

    def __init__(self, timeout: float | None, context: RunContext = ALONE) -> None:
        self.timeout = timeout
        self.context = context
        self.pool: ProcessPoolExecutor | None = None

    def fix(self, path: str, data: bytes, codes: frozenset[str], unsafe: bool) -> FixResult:
        from concurrent.futures import TimeoutError as Late
        from concurrent.futures.process import BrokenProcessPool

        from accumlint.run import pool

        workers = []
        stage, budget = "took too long to parse", self.timeout
        try:
            checking = self._submit(_check_one, path, data, codes)
            workers = pool.workers_of(self.pool)  # type: ignore[arg-type]
            checked = checking.result(timeout=budget)
            stage = "verifying its fixes took too long"
            budget = None if self.timeout is None else fixing_budget(self.timeout, checked.findings)
            return self._submit(_fix_one, path, data, codes, unsafe, checked).result(timeout=budget)
        except Late:
            self.close()
            return FixResult(path, data, data, error=f"{path}: not fixed: {stage} (more than {budget:g} s)")
        except (BrokenProcessPool, MemoryError) as exc:
            self.close()
            if isinstance(exc, MemoryError) or any(pool._ran_out_of_memory(worker) for worker in workers):
                return FixResult(path, data, data, error=f"{path}: not fixed: too large to fix (it needed more "
                                 f"than {pool.MEMORY_LIMIT / 2**30:g} GiB of memory)")
            return FixResult(path, data, data, error=f"{path}: not fixed: the process fixing it died")

    def _submit(self, function: Callable[..., object], *args: object) -> Future:
        """``function(*args)`` submitted to the worker (started where there is none)."""
        from accumlint.run import pool

        if self.pool is None:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            context = multiprocessing.get_context("fork") if sys.platform.startswith("linux") else None
            self.pool = ProcessPoolExecutor(max_workers=1, mp_context=context, initializer=pool._worker_start,
                                            initargs=pool.initargs(self.context))
        return self.pool.submit(pool._in_context, function, *args)

    def close(self) -> None:
        from accumlint.run.pool import workers_of

        if self.pool is not None:
            processes = workers_of(self.pool)
            self.pool.shutdown(wait=False, cancel_futures=True)
            for process in processes:
                process.kill()
                process.join()
            self.pool = None


def fix_bounded(path: str, data: bytes, codes: frozenset[str], *, unsafe: bool = False,
                timeout: float | None = None, ignore_noqa: bool = False) -> FixResult:
    """:func:`fix_source` of one file's bytes (stdin) in a worker bounded as a check's: past
    ``timeout`` seconds or the memory limit the bytes come back unchanged, ``error`` saying why.
    ``ignore_noqa``: ``--ignore-noqa``."""
    fixer = _Fixer(timeout, RunContext(ignore_noqa=ignore_noqa))
    try:
        return fixer.fix(path, data, codes, unsafe)
    finally:
        fixer.close()


def fix_files(
    files: Iterable[str],
    codes_for: Callable[[str], frozenset[str]],
    *,
    unsafe: bool = False,
    write: bool = True,
    boundary: Boundary | None = None,
    timeout: float | None = None,
    ignore_noqa: bool = False,
) -> list[FixResult]:
    """Fix each file with its enabled codes (``codes_for(path)``); write the changed ones if ``write``.

    A file the writer refuses (reached through a symlink that leads out of ``boundary``, the
    paths the user named, by default none; read-only, hard-linked, changed meanwhile) is not
    written (``error`` says why). ``timeout``: seconds one file's fixing may take, in a
    bounded worker process that is replaced past it (None: no time limit). Unreadable files,
    files that are not regular or too large are skipped (the check that follows reports them).
    ``ignore_noqa``: ``--ignore-noqa``.
    """
    fixer = _Fixer(timeout, RunContext(ignore_noqa=ignore_noqa))
    try:
        return _fix_all(files, codes_for, unsafe, write, boundary or Boundary(()), fixer)
    finally:
        fixer.close()


def _fix_all(
    files: Iterable[str],
    codes_for: Callable[[str], frozenset[str]],
    unsafe: bool,
    write: bool,
    boundary: Boundary,
    fixer: _Fixer,
) -> list[FixResult]:
    results = []
    for path in files:
        limit = source_limit(path)  # a notebook's JSON: its outputs may be large
        try:
            data, size, signature = read_signed(path, limit)
        except (OSError, NotARegularFile):
            continue
        if size > limit:
            continue
        result = fixer.fix(path, data, codes_for(path), unsafe)
        if write and result.changed and not result.error:
            reason = rewrite(path, result.fixed, expect=(signature, data), boundary=boundary,
                             changed="the file changed while it was being fixed")
            result.error = f"{path}: not fixed: {reason}" if reason else ""
        results.append(result)
    return results


def fix_summary(results: Sequence[FixResult], *, diff: bool) -> list[str]:
    """The lines that say what ``--fix`` did (or ``--diff`` would do) and what ``--unsafe-fixes`` would add."""
    fixed = sum(sum(r.applied.values()) for r in results if not r.error)
    pending = sum(r.unsafe_pending for r in results)
    lines = [f"error: {r.error}" for r in results if r.error]
    lines += [f"note: {line}" for r in results if not r.error for line in r.not_applied]
    if diff:
        lines.append(f"Would fix {fixed} finding{'s' if fixed != 1 else ''}." if fixed else "No fixes to apply.")
    if pending:
        lines.append(
            f"{pending} unsafe fix{'es' if pending != 1 else ''} can be applied with the `--unsafe-fixes` option."
        )
    return lines
