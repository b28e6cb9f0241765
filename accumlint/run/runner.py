"""Checking many files: the project pass, the cache and the byte prefilter, in file order.

The main process reads each file once, largest first, looks its hash up in the cache and
runs the byte prefilter (:func:`accumlint.pipeline.engine.may_fire`); only the files a rule may
fire on go on, to :mod:`accumlint.run.pool`, which parses them in worker processes (one with
``jobs=1``), each bounded in memory, within a memory budget. Results are collected in file order, so the
output never depends on the number of workers or on which of them finished first.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from accumlint import heap, project
from accumlint.files.reading import (
    MAX_SOURCE_BYTES,
    NotARegularFile,
    Signature,
    is_notebook,
    read_signed,
    read_source,
    source_limit,
)
from accumlint.lazy import lazy_module
from accumlint.noqa import noqa_report
from accumlint.pipeline import byte_stage
from accumlint.pipeline.run_context import RunContext
from accumlint.run.cache import CachedResult, ResultCache, content_digest
from accumlint.run.pool import (
    _check_alone,
    _Scheduler,
    crashed,
    default_jobs,
    file_error,
    not_checked,
    parse_error_result,
)
from accumlint.run.pool import _out_of_memory as _out_of_memory_result
from accumlint.settings import config
from accumlint.settings.config import Settings
from accumlint.spec.findings import Finding, LoopVerdict
from accumlint.spec.registry import PARSE_ERROR_CODE

# LibCST and the rules load at the first file that is not answered from the cache
engine = lazy_module("accumlint.pipeline.engine")
notebook = lazy_module("accumlint.pipeline.notebook")

if TYPE_CHECKING:
    from accumlint.run.index_cache import Facts, IndexCache
    from accumlint.run.suggested_fixes import SuggestedFix


@dataclass
class RunResult:
    """What a run produced: findings and internal errors in file order, the bytes of the files
    with findings (for the source snippets of the text format), and counts."""

    findings: list[Finding] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    sources: dict[str, bytes] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)  #: not findings: unknown codes in noqa directives
    notes: list[str] = field(default_factory=list)  #: files skipped unread: FIFOs, devices, sockets
    #: each file that was not fully checked (:attr:`accumlint.pipeline.engine.FileResult.fully_checked`), in
    #: file order, and why (its internal errors are in :attr:`errors`): what every output reads so
    #: that such a file is never reported as clean
    incomplete: dict[str, list[str]] = field(default_factory=dict)
    #: the project index each file with findings was checked in (its fixes are checked in it too)
    projects: dict[str, project.ProjectIndex] = field(default_factory=dict)
    #: the files whose checks computed their fixes (``suggest``), and those fixes
    suggested: set[str] = field(default_factory=set)
    fixes: dict[Finding, SuggestedFix] = field(default_factory=dict)
    #: the accumulation loops of the files checked (cached ones included), each with its undecided
    #: reasons: :attr:`accumlint.pipeline.engine.FileResult.loops`, for ``--statistics``
    loops: list[LoopVerdict] = field(default_factory=list)
    cached: int = 0  #: files answered from the cache
    parsed: int = 0  #: files that passed the byte prefilter and were parsed


def _unreadable(path: str, exc: OSError) -> Finding:
    reason = exc.strerror or str(exc) or type(exc).__name__
    return file_error(path, f"file could not be read: {reason}", "make the file readable, or exclude it")


def too_large(path: str, size: int | None, limit: int = MAX_SOURCE_BYTES) -> Finding:
    """The ``ACC000`` of a file (or stdin) of ``size`` bytes (None: unknown, more than ``limit``)
    that was not read past ``limit`` bytes."""
    measured = f"{size / 2**20:.1f} MiB >" if size is not None else "more than"
    reason = f"file too large to parse ({measured} {limit / 2**20:.0f} MiB)"
    return not_checked(path, reason, "split the file, or exclude it")


def _check_safely(path: str, data: bytes, codes: frozenset[str], *, context: RunContext) -> engine.FileResult:
    """:func:`_check` in a worker (:class:`accumlint.run.pool.WholeCheck`): what it raises is the file's result."""
    try:
        return _check(path, data, codes, context)
    except MemoryError:
        return _memory_exhausted(path, codes)
    except Exception as exc:  # noqa: BLE001 - one file must not end the run
        return crashed(path, exc)


def _memory_exhausted(path: str, codes: frozenset[str]) -> engine.FileResult:
    """The result of a check that ran out of the worker's memory (``ACC000`` where selected);
    the heap it took is given back for the next file."""
    heap.trim()
    return _out_of_memory_result(path, codes)


#: a file at least this large gives its parse's memory back to the system once checked (in its
#: worker: every check runs in one)
TRIM_ABOVE = 64 * 1024
#: the main process gives its freed heap back to the system after the project pass and, in a run
#: with workers, after each this many bytes read: the bytes, the pickles and the screened texts
#: it passes to the workers leave glibc's heap fragmented (speed set, two cores: main process
#: 141 MB PSS at the end without it, 58 MB with it; a trim takes about a millisecond)
TRIM_MAIN_EVERY = 8 * 2**20


def _check(path: str, data: bytes, codes: frozenset[str], context: RunContext) -> engine.FileResult:
    """One file (a notebook cell by cell) with the rules of ``codes`` in ``context``, its findings
    limited to those codes, plus the unused-noqa findings when that code is enabled."""
    rules = engine.rules_for(codes)
    if is_notebook(path):
        result = notebook.check_notebook(path, data, rules, context)
    else:
        result = engine.check_source(path, data, rules, context)
    return _finish(path, data, codes, result, context)


def _check_in_worker(
    path: str, data: bytes, codes: frozenset[str], screened: engine.Screened | None, *, context: RunContext
) -> engine.FileResult | engine.Screened:
    """A worker's part of :func:`_check` (:class:`accumlint.run.pool.StagedCheck`), in two stages:
    without ``screened``, the cheap stages (:func:`accumlint.pipeline.engine.screen`), which return what
    LibCST still has to check (the main process sends it again, within the budget of a LibCST
    parse); with it, the rest. A notebook is checked whole. A stage that runs out of memory
    gives the file ``ACC000``."""
    try:
        if screened is not None:
            return _finish(path, data, codes, engine.check_screened(path, screened, data, context), context)
        if is_notebook(path):
            return _check(path, data, codes, context)
        verdict = engine.screen(path, data, engine.rules_for(codes), context)
    except MemoryError:
        return _memory_exhausted(path, codes)
    return verdict if isinstance(verdict, engine.Screened) else _finish(path, data, codes, verdict, context)


def _finish(path: str, data: bytes, codes: frozenset[str], result: engine.FileResult,
            context: RunContext) -> engine.FileResult:
    if PARSE_ERROR_CODE not in codes:  # an ACC000 that is not selected still means the file was not checked
        result.incomplete += [f.message for f in result.findings if f.code == PARSE_ERROR_CODE]
    result.findings = [f for f in result.findings if f.code in codes]
    if result.fixes:
        result.fixes = {finding: fix for finding, fix in result.fixes.items() if finding.code in codes}
    if _reports_unused_noqa(path, data, codes, context) \
            and not any(f.code == PARSE_ERROR_CODE for f in result.findings):
        text = engine.decode_source(data)  # decodable: the file was parsed
        fixes: dict[Finding, SuggestedFix] | None = {} if context.suggest else None
        result.findings += engine.later_stage(
            result.incomplete, f"{noqa_report.UNUSED_NOQA_CODE} (unused `noqa`)",
            lambda: noqa_report.unused_noqa(path, text, result.suppressed, config.known_codes(), codes, fixes), [])
        if fixes:
            result.fixes = {**(result.fixes or {}), **fixes}
    if len(data) >= TRIM_ABOVE:
        # LibCST's parse peaks at ~400 bytes per source byte, and glibc keeps the freed heap: without
        # this each worker would hold its largest file's peak (torch: ~190 MB) to the end of the run
        heap.trim()
    return result


def _reports_unused_noqa(path: str, data: bytes, codes: frozenset[str], context: RunContext) -> bool:
    """Whether ``ACC990`` is looked for in this file (never with ``--ignore-noqa``: no directive was applied)."""
    return (noqa_report.UNUSED_NOQA_CODE in codes and not context.ignore_noqa
            and not is_notebook(path) and b"noqa" in data.lower())


#: ``noqa`` and, later on its line, ``acc`` (in the lowered bytes): where a directive may name an ACC code
_MAY_NAME_ACC = re.compile(rb"noqa[^\n]*acc")


def _unknown_noqa_codes(path: str, data: bytes) -> list[tuple[int, str]]:
    """``(line, code)`` for the ``ACC`` codes in this file's noqa directives that name no rule."""
    if is_notebook(path):
        return []
    lowered = data.lower()
    if b"noqa" not in lowered or _MAY_NAME_ACC.search(lowered) is None:
        return []  # decoded only where a directive may name an ACC code
    try:
        text = engine.decode_source(data)
    except (SyntaxError, UnicodeDecodeError):
        return []
    return noqa_report.unknown_codes(text, config.known_codes())


def _unknown_noqa_warnings(path: str, unknown: list[tuple[int, str]]) -> list[str]:
    return [f"{path}:{line}: unknown rule code {code} in a `noqa` directive" for line, code in unknown]


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _largest_first(files: Sequence[str]) -> list[int]:
    """The indexes of ``files``, largest file first: a big file that needs parsing is the
    longest task, so it goes to a worker before the small ones (results keep file order)."""
    return sorted(range(len(files)), key=lambda index: -_size(files[index]))


def check_files(
    files: Sequence[str],
    settings: Settings,
    enabled: frozenset[str],
    *,
    jobs: int | None = None,
    cache: ResultCache | None = None,
    parse_timeout: float | None = None,
    suggest: bool = False,
    ignore_noqa: bool = False,
) -> RunResult:
    """Check ``files`` with the ``enabled`` codes minus each file's per-file ignores.

    ``jobs`` worker processes parse the files (default: one per CPU). ``cache``, if given,
    answers for files whose bytes it has seen and receives the results of the others (except
    files with internal errors), and is saved at the end. ``parse_timeout`` (seconds; default:
    the settings' ``parse-timeout``, 0: none): a file whose check runs longer in a worker (the
    limit stretched by the machine's load: :func:`accumlint.run.pool.load_factor`) gets ``ACC000``
    and its worker is replaced; one that runs out of a worker's memory
    (:data:`accumlint.run.pool.MEMORY_LIMIT`) gets ``ACC000`` too. Only regular files are read
    (FIFOs, devices and sockets are skipped with a note), at most :data:`MAX_SOURCE_BYTES` + 1
    bytes of each (of a notebook's JSON :data:`~accumlint.files.reading.MAX_NOTEBOOK_BYTES` + 1: the
    limit holds for its code).
    ``suggest``: the fixes of the findings of the files checked (not answered from the cache)
    are computed where the check holds their nodes (:attr:`RunResult.fixes`).
    ``ignore_noqa`` (``--ignore-noqa``): no ``noqa`` directive suppresses a finding.
    """
    vocabulary = _run_vocabulary(cache)
    index_of_project = project.ProjectIndex.for_files(files, str(settings.project_root), vocabulary)
    digests, hits, state = _project_pass(files, index_of_project, cache)
    context = RunContext(index_of_project, suggest, ignore_noqa)
    return _check_files(files, settings, enabled, jobs, cache, context, digests, hits, state, parse_timeout,
                        vocabulary or engine.vocabulary())


def _run_vocabulary(cache: ResultCache | None) -> byte_stage.Vocabulary | None:
    """The byte stage's vocabulary for a run: the one the cache keeps, so that LibCST loads only
    for a file the stage passes; else the engine's, kept for the next run (None without a cache:
    the engine's, loaded where it is needed)."""
    if cache is None:
        return None
    stored = cache.stored_vocabulary()
    if stored is None:
        stored = engine.vocabulary()
        cache.keep_vocabulary(stored)
    return stored


def _project_pass(files: Sequence[str], index: project.ProjectIndex, cache: ResultCache | None,
                  ) -> tuple[dict[int, str], dict[int, CachedResult], str]:
    """One read of every file before the checks: its digest, its cache entry, and the names it
    defines that perform a backward (from the entry, else from its bytes); these names make
    the project's prefilter state, which a cached result must share to be used."""
    digests: dict[int, str] = {}
    hits: dict[int, CachedResult] = {}
    names: dict[str, tuple[str, ...]] = {}
    imported: list[str] = []
    neighbours = len(files) <= NEIGHBOUR_RUN_FILES  # a small run reads each file for its imports
    # the project index kept between runs serves the small runs, which read the imported modules;
    # a larger one takes the names of its unchanged files from their results (and reads no import)
    store = cache.project_index() if cache is not None and neighbours else None
    for position, path in enumerate(files):
        if cache is not None and not neighbours and (known := cache.unchanged(path)) is not None:
            hit = cache.get(path, known)  # its signature is the stored one: the same bytes, unread
            if hit is not None:
                digests[position] = known
                hits[position] = hit
                names[path] = hit.names
                continue
        try:
            # regular files only, bounded: a FIFO must not hang this pass
            data, size, signature = read_signed(path, source_limit(path))
        except (OSError, NotARegularFile):  # the checks report it
            continue
        if size > source_limit(path):
            continue
        hit = None
        if cache is not None:
            digest = digests[position] = content_digest(data)
            lines = data.count(b"\n") + 1 if not is_notebook(path) else None
            hit = cache.get(path, digest, lines)
            if hit is not None:
                cache.keep_signature(path, digest, signature)
        if hit is not None:
            hits[position] = hit
            names[path] = hit.names
            if neighbours:
                imported.extend(index.imported_modules(path, data))
        elif neighbours:
            names[path], imports = _facts(store, path, data, digests.get(position), signature, index.vocabulary)
            imported.extend(index.resolve_imports(path, imports))
        else:  # a larger run reads no import: its names are all it needs (the imports cost as much again)
            names[path] = index.names_of(data, index.vocabulary)
    _neighbour_names(index, imported, names, store)
    index.set_names(names)
    heap.trim()
    return digests, hits, index.state()


#: a run of at most this many files (a pre-commit hook's or an editor's) also learns the names of
#: the project modules those files import, which the run does not check: a call into a helper of
#: an unchecked module must pass the prefilter too. A larger run is taken to be the project.
NEIGHBOUR_RUN_FILES = 256
#: how many unchecked modules such a run reads at most, and how many imports deep it goes
MAX_NEIGHBOURS = 128
NEIGHBOUR_DEPTH = 3


def _compute_facts(data: bytes, vocabulary: byte_stage.Vocabulary | None) -> Facts:
    return project.ProjectIndex.names_of(data, vocabulary), project.ProjectIndex.import_names(data)


def _facts(store: IndexCache | None, path: str, data: bytes, digest: str | None,
           signature: Signature | None, vocabulary: byte_stage.Vocabulary | None) -> Facts:
    """The names the file at ``path`` defines that perform a backward (by ``vocabulary``; None: the
    engine's) and the names its imports bind, from its bytes ``data`` (SHA-256 ``digest``, if
    known; read with ``signature``): from ``store`` where it holds them for these bytes, else
    computed (and stored)."""
    if store is None:
        return _compute_facts(data, vocabulary)
    return store.facts(os.path.abspath(path), data, digest or content_digest(data), signature,
                       lambda read: _compute_facts(read, vocabulary))


def _neighbour_names(index: project.ProjectIndex, imported: list[str], names: dict[str, tuple[str, ...]],
                     store: IndexCache | None = None, looked_at: dict[str, Facts | None] | None = None) -> None:
    """Add to ``names`` (path -> :meth:`ProjectIndex.names_of`) the modules in ``imported`` that
    are not checked, and the modules they import, breadth first within the bounds above; a
    module ``store`` holds unchanged (by its ``stat``) is not read. ``looked_at`` (if given) gets the
    facts of every module looked at (None: unreadable or too large), what the names depend on."""
    seen = {os.path.abspath(path) for path in names}
    frontier = [path for path in dict.fromkeys(imported) if path not in seen]
    read = 0
    for _ in range(NEIGHBOUR_DEPTH):
        following: list[str] = []
        for path in frontier:
            if path in seen or read >= MAX_NEIGHBOURS:
                continue
            seen.add(path)
            read += 1
            facts = _module_facts(store, path, index.vocabulary)
            if looked_at is not None:
                looked_at[path] = facts
            if facts is None:
                continue
            names[path], imports = facts
            following.extend(index.resolve_imports(path, imports))
        frontier = following


def _module_facts(store: IndexCache | None, path: str, vocabulary: byte_stage.Vocabulary | None) -> Facts | None:
    """The facts of the project module at ``path``: from ``store`` where its ``stat`` says it is
    unchanged, else read (bounded) and computed or found by its bytes; None where it cannot be
    read or is over :data:`MAX_SOURCE_BYTES`."""
    facts = store.unchanged(path) if store is not None else None
    if facts is not None:
        return facts
    try:
        data, size, signature = read_signed(path)
    except (OSError, NotARegularFile):
        return None
    if size > MAX_SOURCE_BYTES:
        return None
    return _facts(store, path, data, None, signature, vocabulary)


def _current(hit: CachedResult, state: str, digests: dict[str, str]) -> bool:
    """Whether a cached result still holds: same project names, same bytes of every project
    file its model followed."""
    if hit.state != state:
        return False
    for path, digest in hit.dependencies.items():
        now = digests.get(path)
        if now is None:
            try:
                data, size = read_source(path)
            except (OSError, NotARegularFile):
                return False
            if size > MAX_SOURCE_BYTES:
                return False
            now = digests[path] = content_digest(data)
        if now != digest:
            return False
    return True


def _check_files(files: Sequence[str], settings: Settings, enabled: frozenset[str], jobs: int | None,
                 cache: ResultCache | None, context: RunContext, digests: dict[int, str],
                 hits: dict[int, CachedResult], state: str, parse_timeout: float | None,
                 vocabulary: byte_stage.Vocabulary) -> RunResult:
    index_of_project = context.project
    assert index_of_project is not None
    run = RunResult()
    by_path = {os.path.abspath(files[i]): digest for i, digest in digests.items()}
    findings: dict[int, list[Finding]] = {}
    loops: dict[int, list[tuple[str, ...]]] = {}
    errors: dict[int, list[str]] = {}
    warnings: dict[int, list[str]] = {}
    # index -> (path, bytes, digest, unknown noqa codes)
    parsed: dict[int, tuple[str, bytes, str, list[tuple[int, str]]]] = {}
    codes_for: dict[tuple[str, ...], frozenset[str]] = {}
    rules_for: dict[frozenset[str], list[byte_stage.GatedRule]] = {}
    extra: dict[int, tuple[str, ...]] = {}  # index -> the names it defines that perform a backward
    signatures: dict[int, Signature] = {}  # index -> the file's signature at this pass's read
    incomplete: dict[int, list[str]] = {}  # index -> why the file was not fully checked

    def look_up_or_submit(index: int, path: str, data: bytes, codes: frozenset[str]) -> None:
        """The cache, the prefilter, then the scheduler, for one file read."""
        digest = ""
        if cache is not None:
            digest = content_digest(data)
            lines = data.count(b"\n") + 1 if not is_notebook(path) else None  # a cell's line: unbounded
            hit = hits.get(index) if digests.get(index) == digest else cache.get(path, digest, lines)
            if hit is not None and _current(hit, state, by_path):
                run.cached += 1
                findings[index] = hit.findings
                loops[index] = hit.loops
                warnings[index] = _unknown_noqa_warnings(path, hit.unknown_noqa)
                if hit.findings:
                    run.sources[path] = data
                if hit.fixes is not None:
                    run.suggested.add(path)
                    run.fixes.update(hit.fixes)
                return
        # a warning's stage: where it fails the file is still checked, and reported as not fully checked
        reasons: list[str] = []
        unknown = byte_stage.later_stage(reasons, "the `noqa` directives' codes",
                                         lambda: _unknown_noqa_codes(path, data), [])
        if reasons:
            incomplete[index] = reasons
        warnings[index] = _unknown_noqa_warnings(path, unknown)
        if codes not in rules_for:
            rules_for[codes] = vocabulary.rules_for(codes)
        rules = rules_for[codes]
        notebook_json = is_notebook(path)  # its code is in JSON strings: checked cell by cell
        names = index_of_project.names_for(path)
        if (
            rules
            and not byte_stage.may_fire(data, rules, vocabulary, in_strings=notebook_json, path=path,
                                        project=index_of_project)
            and not _reports_unused_noqa(path, data, codes, context)
        ):
            if cache is not None and index not in incomplete:
                cache.put(path, digest, [], unknown, names=names, state=state, signature=signatures.get(index))
            return
        extra[index] = names
        run.parsed += 1
        parsed[index] = (path, data, digest, unknown)
        scheduler.submit(index, path, data, codes)

    timeout = settings.parse_timeout if parse_timeout is None else parse_timeout
    workers = default_jobs() if jobs is None else max(1, jobs)
    unreleased = 0  # bytes read since the main process last gave its freed heap back
    with _Scheduler(workers, _check_in_worker, _check_safely, timeout or None, context) as scheduler:
        for index in _largest_first(files):
            scheduler.poll()  # a worker that finished a stage gets the next at once
            path = files[index]
            ignored = tuple(config.per_file_ignored(path, settings))
            if ignored not in codes_for:
                codes_for[ignored] = enabled - config.ignored_codes(ignored, enabled)
            codes = codes_for[ignored]
            early = hits.get(index)
            if cache is not None and early is not None and _current(early, state, by_path) and not early.findings:
                # the first pass read and hashed it: a silent cached result needs no second read
                run.cached += 1
                findings[index] = early.findings
                loops[index] = early.loops
                warnings[index] = _unknown_noqa_warnings(path, early.unknown_noqa)
                continue
            limit = source_limit(path)  # a notebook's JSON: its code is held to MAX_SOURCE_BYTES once parsed
            try:
                data, size, signatures[index] = read_signed(path, limit)
            except NotARegularFile as exc:
                run.notes.append(str(exc))
                continue
            except OSError as exc:  # unreadable, a directory, vanished since discovery
                unread: Finding | None = _unreadable(path, exc)
            else:  # not read to the end: whether a rule may fire is unknown
                unread = too_large(path, size, limit) if size > limit else None
            if unread is not None:
                alone = parse_error_result(path, unread, codes)
                findings[index] = alone.findings
                if alone.incomplete:
                    incomplete[index] = alone.incomplete
                continue
            unreleased += size
            if workers > 1 and unreleased >= TRIM_MAIN_EVERY:
                unreleased = 0
                heap.trim()
            try:
                look_up_or_submit(index, path, data, codes)
            except Exception as exc:  # noqa: BLE001 - one file must not end the run
                errors[index] = crashed(path, exc).internal_errors
        results = scheduler.collect()
    for index, result in results.items():
        path, data, digest, unknown = parsed[index]
        findings[index] = result.findings
        loops[index] = result.loops
        errors[index] = result.internal_errors
        if not result.fully_checked or index in incomplete:
            incomplete[index] = [*incomplete.get(index, ()), *result.incomplete]
        if result.findings:
            run.sources[path] = data
        if result.fixes is not None:
            run.suggested.add(path)
            run.fixes.update(result.fixes)
        if cache is not None and index not in incomplete and index not in scheduler.late:
            cache.put(path, digest, result.findings, unknown, dependencies=result.dependencies,
                      names=extra.get(index, ()), state=state, fixes=result.fixes, signature=signatures.get(index),
                      loops=result.loops)
    run.projects = dict.fromkeys(run.sources, index_of_project)
    for index in sorted(findings.keys() | errors.keys() | incomplete.keys()):
        run.findings.extend(findings.get(index, ()))
        run.loops.extend(loops.get(index, ()))
        run.errors.extend(errors.get(index, ()))
        if index in incomplete or errors.get(index):
            run.incomplete[files[index]] = incomplete.get(index, [])
    run.warnings = [warning for index in sorted(warnings) for warning in warnings[index]]
    if cache is not None:
        cache.save()
    return run


def file_index(path: str, data: bytes, project_root: str, store: IndexCache | None = None,
               looked_at: dict[str, Facts | None] | None = None) -> project.ProjectIndex:
    """The project index one file's model follows (the modules it imports and their names),
    as a run of that one path builds it; ``data`` is the file's own bytes. ``store``: the facts
    of the imported modules kept so far (:class:`FileIndexes`); ``looked_at`` gets the facts of each
    module looked at (see :func:`_neighbour_names`)."""
    index = project.ProjectIndex.for_files([path], project_root)
    names = {path: index.names_of(data, index.vocabulary)}
    _neighbour_names(index, index.imported_modules(path, data), names, store, looked_at)
    index.set_names(names)
    return index


@dataclass
class _KeptIndex:
    """A :func:`file_index` kept: the facts of the checked bytes and of every module it read."""

    own: Facts
    read: dict[str, Facts | None]
    index: project.ProjectIndex


class FileIndexes:
    """The project indexes of single-file checks kept between checks (a language server's): one
    per checked path and project root, with the facts of every project module read (an
    in-memory :class:`~accumlint.run.index_cache.IndexCache`: a module unchanged by its ``stat``,
    or by the SHA-256 of its bytes, is not computed again).

    :meth:`index` answers the kept index while the checked bytes' own facts (the names they
    define that perform a backward, the names their imports bind) and those of every module
    it read are unchanged: an edit that adds an import, or a saved module that gains a
    backward, rebuilds it. Module *resolution* is not re-read for a kept index: a module
    created since is seen after :meth:`saved` names it (an editor's save), or :meth:`forget`
    (a language server's file watchers report a file created or deleted).
    Threads may call it at once (two builds of one key: the last is kept).

    ``built`` counts the indexes built rather than kept (a hook for tests and benchmarks)."""

    def __init__(self) -> None:
        from accumlint.run.index_cache import IndexCache  # it imports the cache

        self.store = IndexCache.in_memory()
        self._kept: dict[tuple[str, str], _KeptIndex] = {}
        self._lock = threading.Lock()
        self.built = 0

    def index(self, path: str, data: bytes, project_root: str) -> project.ProjectIndex:
        """The index of a check of ``data`` as the file at ``path`` in ``project_root``
        (:func:`file_index`): the kept one where nothing it was built from changed."""
        key = (os.path.abspath(path), os.path.abspath(project_root))
        own = _compute_facts(data, None)
        with self._lock:
            kept = self._kept.get(key)
        if kept is not None and kept.own == own and all(
                _module_facts(self.store, module, None) == facts for module, facts in kept.read.items()):
            return kept.index
        read: dict[str, Facts | None] = {}
        index = file_index(path, data, project_root, self.store, read)
        with self._lock:
            self._kept[key] = _KeptIndex(own, read, index)
            self.built += 1
        return index

    def saved(self, path: str) -> None:
        """The file at ``path`` was written (an editor's save): a module no kept index checked
        or read may be a new one, which an import could now resolve to: every index is built
        again (from the facts kept). A known module's new bytes are seen by :meth:`index`."""
        path = os.path.abspath(path)
        with self._lock:
            if not any(path == checked or path in kept.read for (checked, _), kept in self._kept.items()):
                self._kept.clear()

    def forget(self, path: str | None = None) -> None:
        """Drop the kept indexes of ``path``'s checks (a closed document), or all (None)."""
        with self._lock:
            if path is None:
                self._kept.clear()
                return
            path = os.path.abspath(path)
            for key in [key for key in self._kept if key[0] == path]:
                del self._kept[key]


def _one_file_index(path: str, data: bytes, project_root: str | None) -> project.ProjectIndex | None:
    """The project index a check of one file's bytes reads (:func:`check_one`, :func:`verify_one`):
    :func:`file_index`, None without a root or for stdin without a name."""
    return None if project_root is None or path == "-" else file_index(path, data, project_root)


def check_one(path: str, data: bytes, codes: frozenset[str], project_root: str | None = None, *,
              suggest: bool = False, timeout: float | None = None,
              index: project.ProjectIndex | None = None, ignore_noqa: bool = False) -> engine.FileResult:
    """One file's bytes (stdin, an editor's buffer) checked with ``codes``: the findings a run
    of that one path reports for the same bytes (notebooks by the path's suffix). With
    ``project_root`` (the settings' root) the model follows the project modules the file
    imports, as a run's does (:data:`NEIGHBOUR_RUN_FILES`); the bytes of those modules are read
    from disk, the file's own are ``data``. ``index``: that project's index, already built
    (:func:`file_index`), else built here. ``suggest``: with the fixes the findings' rules
    propose (not verified: :func:`verify_one`). ``ignore_noqa``: ``--ignore-noqa``.

    The check runs in a worker process bounded as a run's are (:func:`accumlint.run.pool.run_alone`):
    past :data:`~accumlint.run.pool.MEMORY_LIMIT` or ``timeout`` seconds (None: no time limit) the
    file gets ``ACC000``. Threads may call it at once (each worker forks with its own project);
    a cancelled :class:`accumlint.run.pool.Cancel` raises :class:`accumlint.run.pool.Cancelled`."""
    index = index or _one_file_index(path, data, project_root)
    context = RunContext(index, suggest, ignore_noqa)
    return _check_alone(_check_safely, path, data, codes, timeout, context)


def verify_one(path: str, data: bytes, codes: frozenset[str], fixes: Mapping[Finding, SuggestedFix],
               findings: list[Finding], project_root: str | None = None, *,
               timeout: float | None = None, index: project.ProjectIndex | None = None) -> dict[Finding, SuggestedFix]:
    """The ``fixes`` of one file's bytes (checked as :func:`check_one` checks them, with
    ``findings``) that pass :func:`accumlint.run.suggested_fixes.verify`, in a bounded worker.
    ``timeout``: seconds for all of them (None: no limit; give it the fixes' own budget,
    :func:`accumlint.run.apply_fixes.fixing_budget`, not one check's). Past it, or past the memory
    limit, none is verified: the result is empty, never the file's ``ACC000``. ``index``: as
    :func:`check_one`'s (the project index the check read, shared)."""
    from concurrent.futures.process import BrokenProcessPool

    from accumlint.run.pool import OutOfMemory, TooSlow, run_alone
    from accumlint.run.suggested_fixes import verify

    index = index or _one_file_index(path, data, project_root)
    try:
        return run_alone(verify, path, data, fixes, findings, engine.rules_for(codes), timeout=timeout,
                         context=RunContext(index))
    except (TooSlow, OutOfMemory, BrokenProcessPool):
        return {}
