"""Checking many files: the cache, the byte prefilter and a process pool for the parsing.

The main process reads each file once, largest first, looks its hash up in the cache and
runs the byte prefilter (:func:`accumlint.engine.may_fire`); only the files a rule may
fire on are parsed, by a pool of ``jobs`` worker processes (``jobs=1``: in this process)
that gets each file as soon as it is found and the memory budget allows (a LibCST tree takes
~2,600 bytes per node of the interpreter's tree: two of a repository's largest files parsed at
once would double the run's peak). Results are collected in file order, so the output never depends on the
number of workers or on which of them finished first.
"""

from __future__ import annotations

import bisect
import functools
import gc
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from accumlint import config, noqa_report, project
from accumlint.cache import CachedResult, ResultCache, content_digest
from accumlint.config import Settings
from accumlint.findings import Finding, Severity
from accumlint.lazy import lazy_module
from accumlint.reading import MAX_SOURCE_BYTES, NotARegularFile, read_source
from accumlint.registry import PARSE_ERROR_CODE, PARSE_ERROR_NAME, PARSE_ERROR_URL

# LibCST and the rules load at the first file that is not answered from the cache
engine = lazy_module("accumlint.engine")
notebook = lazy_module("accumlint.notebook")

if TYPE_CHECKING:
    from concurrent.futures import Future, ProcessPoolExecutor


@dataclass
class RunResult:
    """What a run produced: findings and internal errors in file order, the bytes of the files
    with findings (for the source snippets of the text format), and counts."""

    findings: list[Finding] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    sources: dict[str, bytes] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)  #: not findings: unknown codes in noqa directives
    notes: list[str] = field(default_factory=list)  #: files skipped unread: FIFOs, devices, sockets
    cached: int = 0  #: files answered from the cache
    parsed: int = 0  #: files that passed the byte prefilter and were parsed


def default_jobs() -> int:
    """The number of CPUs this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def _unreadable(path: str, exc: OSError) -> Finding:
    reason = exc.strerror or str(exc) or type(exc).__name__
    return _parse_error(path, f"file could not be read: {reason}", "make the file readable, or exclude it")


def _not_checked(path: str, reason: str, fix: str) -> Finding:
    return _parse_error(path, f"file could not be checked: {reason}", fix)


def _parse_error(path: str, message: str, fix: str) -> Finding:
    """The file's ``ACC000`` at its first line."""
    return Finding(path=path, line=1, column=1, code=PARSE_ERROR_CODE, name=PARSE_ERROR_NAME,
                   severity=Severity.ERROR, message=message, fix=fix, url=PARSE_ERROR_URL)


def _too_large(path: str, size: int) -> Finding:
    reason = f"file too large to parse ({size / 2**20:.1f} MiB > {MAX_SOURCE_BYTES / 2**20:.0f} MiB)"
    return _not_checked(path, reason, "split the file, or exclude it")


def _too_slow(path: str, seconds: float) -> Finding:
    reason = f"took too long to parse (more than {seconds:g} s)"
    return _not_checked(path, reason, "simplify the deepest expression, raise `parse-timeout`, or exclude the file")


def _crashed(path: str, exc: BaseException) -> engine.FileResult:
    """A file whose check raised where nothing should: an internal error for that file, the run goes on."""
    error = f"{path}: internal error: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}; please report it"
    return engine.FileResult(path, internal_errors=[error])


def _check_safely(path: str, data: bytes, codes: frozenset[str]) -> engine.FileResult:
    try:
        return _check(path, data, codes)
    except Exception as exc:  # noqa: BLE001 - one file must not end the run
        return _crashed(path, exc)


#: in a worker, a file at least this large gives its parse's memory back to the system once
#: checked. Not in a run with one job: the next file would fault the pages in again (~6 % of
#: the run), and one process holds one file's peak whether it trims or not
TRIM_ABOVE = 64 * 1024
_in_worker = False  #: set by the pool's initializer


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None on other C libraries and systems."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        return ctypes.CDLL(None).malloc_trim  # the C library this process runs on
    except (OSError, AttributeError):
        return None


def _check(path: str, data: bytes, codes: frozenset[str]) -> engine.FileResult:
    """One file (a notebook cell by cell) with the rules of ``codes``, its findings limited to
    those codes, plus the unused-noqa findings when that code is enabled."""
    rules = engine.rules_for(codes)
    if notebook.is_notebook(path):
        result = notebook.check_notebook(path, data, rules)
    else:
        result = engine.check_source(path, data, rules)
    return _finish(path, data, codes, result)


def _check_in_worker(
    path: str, data: bytes, codes: frozenset[str], screened: engine.Screened | None
) -> engine.FileResult | engine.Screened:
    """A worker's part of :func:`_check`, in two stages: without ``screened``, the cheap
    stages (:func:`accumlint.engine.screen`), which return what LibCST still has to check
    (the main process sends it again, within the budget of a LibCST parse); with it, the rest.
    A notebook is checked whole."""
    if screened is not None:
        return _finish(path, data, codes, engine.check_screened(path, screened))
    if notebook.is_notebook(path):
        return _check(path, data, codes)
    verdict = engine.screen(path, data, engine.rules_for(codes))
    return verdict if isinstance(verdict, engine.Screened) else _finish(path, data, codes, verdict)


def _finish(path: str, data: bytes, codes: frozenset[str], result: engine.FileResult) -> engine.FileResult:
    result.findings = [f for f in result.findings if f.code in codes]
    if _reports_unused_noqa(path, data, codes) and not any(f.code == PARSE_ERROR_CODE for f in result.findings):
        text = engine.decode_source(data)  # decodable: the file was parsed
        result.findings += noqa_report.unused_noqa(path, text, result.suppressed, config.known_codes(), codes)
    if _in_worker and len(data) >= TRIM_ABOVE and (trim := _malloc_trim()) is not None:
        # a LibCST tree takes ~400 bytes per source byte, and glibc keeps the freed heap: without
        # this each worker would hold its largest file's peak (torch: ~190 MB) to the end of the run
        trim(0)
    return result


def _reports_unused_noqa(path: str, data: bytes, codes: frozenset[str]) -> bool:
    return noqa_report.UNUSED_NOQA_CODE in codes and not notebook.is_notebook(path) and b"noqa" in data.lower()


#: ``noqa`` and, later on its line, ``acc`` (in the lowered bytes): where a directive may name an ACC code
_MAY_NAME_ACC = re.compile(rb"noqa[^\n]*acc")


def _unknown_noqa_codes(path: str, data: bytes) -> list[tuple[int, str]]:
    """``(line, code)`` for the ``ACC`` codes in this file's noqa directives that name no rule."""
    if notebook.is_notebook(path):
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


def _worker_start(parent: int, index: project.ProjectIndex | None = None) -> None:
    """In each worker: leave Ctrl-C to the main process (which terminates the workers), and
    exit within half a second once the main process is gone, instead of waiting for work forever;
    check with the run's project (``index``: sent along where the workers are not forked)."""
    global _in_worker
    _in_worker = True
    if index is not None:
        project.activate(index)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # terminate() must end the worker even if the main process installed its own SIGTERM handler
    # (inherited through fork; Lightning's Trainer installs one, for instance)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    threading.Thread(target=_exit_with_parent, args=(parent,), daemon=True).start()


def _exit_with_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(1)


#: What the files being parsed at once may take together, estimated by
#: :data:`~accumlint.engine.PARSE_MEMORY_PER_NODE` (or, where no ``ast`` tree was built,
#: :data:`~accumlint.engine.PARSE_MEMORY_PER_BYTE`): at least this much, or
#: :data:`PARSE_BUDGET_PER_JOB` per worker on a machine with more than two. A file larger than
#: the budget runs alone. On two cores (torch 2.13.0, transformers, diffusers, NeMo, fairseq:
#: 7,848 files) this keeps the run near 260 MB (PSS, cheap stages beside it included) and costs no time; a
#: budget of 64 MiB cost 30 %.
PARSE_BUDGET = 96 * 2**20
PARSE_BUDGET_PER_JOB = 48 * 2**20


@dataclass
class _Job:
    index: int
    path: str
    data: bytes
    codes: frozenset[str]
    screened: engine.Screened | None = None  #: set for the second stage (LibCST)

    @functools.cached_property
    def parses(self) -> bool:
        """Whether this stage runs LibCST (a second stage, or a notebook checked whole)."""
        return self.screened is not None or notebook.is_notebook(self.path)

    @functools.cached_property
    def memory(self) -> int:
        """The estimated peak memory (bytes) of this stage of checking the file: the cheap
        stages' own estimate of the LibCST stage where they made one, else from the size."""
        if self.screened is not None and self.screened.memory is not None:
            return self.screened.memory
        return len(self.data) * (engine.PARSE_MEMORY_PER_BYTE if self.parses else engine.SCREEN_MEMORY_PER_BYTE)

    @functools.cached_property
    def rank(self) -> tuple[bool, int, int]:
        """The order of the queue: LibCST stages first (the long tasks), each kind largest first."""
        return (not self.parses, -len(self.data), self.index)


class _Scheduler:
    """Checks files in this process, or in a pool started once a second file needs parsing
    (a run that parses one file does not pay for starting workers).

    Each file goes to the pool twice: first for the cheap stages, which take little memory and
    decide most files, then, if LibCST must read it, for the rest. A stage is sent only when a
    worker is free (so this queue, not the pool's, decides the order): LibCST stages first,
    largest first, as long as the estimated memory of the LibCST stages in flight stays within
    the parse budget; a smaller one may overtake one that does not fit yet, and the cheap
    stages run beside them, so the workers stay busy.

    Used as a context manager: leaving it normally waits for the workers; leaving it on an
    exception (Ctrl-C, a bug) cancels what is queued and terminates them. A worker also exits
    by itself once the main process is gone (killed, or ended by SIGTERM).
    """

    def __init__(self, jobs: int, timeout: float | None = None) -> None:
        self.jobs = jobs
        self.timeout = timeout  # seconds a stage may run in a worker (None: no limit)
        self.budget = max(PARSE_BUDGET, jobs * PARSE_BUDGET_PER_JOB)
        self.pool: ProcessPoolExecutor | None = None
        self.pending: list[_Job] = []  # not sent yet, by rank
        self.in_flight: dict[int, tuple[_Job, Future[engine.FileResult | engine.Screened]]] = {}
        self.deadlines: dict[int, float] = {}  # index -> monotonic time its stage must be done by
        self.late: set[int] = set()  # files that ran past the time budget (their result is not cached)
        self.memory = 0  # estimated, of the LibCST stages in flight
        self.frozen = False  # gc.freeze() until the workers have forked
        self.results: dict[int, engine.FileResult] = {}

    def __enter__(self) -> _Scheduler:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: object) -> None:
        if self.pool is None:
            return
        if kind is None:
            self.pool.shutdown(wait=True)
        else:
            self._kill()

    def _kill(self) -> None:
        """End the pool's workers now (a worker may be in the middle of a long parse: do not wait for it)."""
        assert self.pool is not None
        if hasattr(self.pool, "kill_workers"):  # Python 3.14+
            self.pool.kill_workers()
        else:
            processes = list((self.pool._processes or {}).values())  # type: ignore[attr-defined]
            self.pool.shutdown(wait=False, cancel_futures=True)
            for process in processes:
                # SIGKILL: a worker holds nothing to clean up, and a SIGTERM can arrive before its
                # initializer resets a handler the main process installed (inherited through fork)
                process.kill()
        self.pool = None

    def submit(self, index: int, path: str, data: bytes, codes: frozenset[str]) -> None:
        """Queue one file (with one job it is checked at once)."""
        if self.jobs == 1:
            self.results[index] = _check_safely(path, data, codes)
            return
        self._queue(_Job(index, path, data, codes))
        if self.pool is None:
            if len(self.pending) < 2:
                return  # perhaps the only file to parse: checked here at the end, no pool needed
            self._start()
        self.poll()

    def poll(self) -> None:
        """Collect the stages that finished and send what a free worker may take (cheap: the
        main process calls it for every file it reads, so a worker never waits long)."""
        if self.pool is not None:
            self._finished()
            self._dispatch()

    def _start(self, workers: int | None = None) -> None:
        import multiprocessing  # here: a run that parses at most one file never needs them
        from concurrent.futures import ProcessPoolExecutor

        # fork where it is safe and cheap (Linux): the workers start with what this process
        # imported and with its rule registry; elsewhere the platform's default method
        context = multiprocessing.get_context("fork") if sys.platform.startswith("linux") else None
        if context is not None:
            # the collector of a forked worker would write to every object it inherited and so
            # copy the pages it shares with this process; frozen objects are never scanned. The
            # workers fork at the first submit, after which this process unfreezes (_send)
            gc.freeze()
            self.frozen = True
        self.pool = ProcessPoolExecutor(
            max_workers=workers or self.jobs, mp_context=context, initializer=_worker_start,
            initargs=(os.getpid(), project.active() if context is None else None)
        )

    def _queue(self, job: _Job) -> None:
        """Add a stage to ``pending``, which stays ordered by :attr:`_Job.rank`."""
        self.pending.insert(bisect.bisect_right(self.pending, job.rank, key=lambda queued: queued.rank), job)

    def _dispatch(self) -> None:
        """While a worker is free, send the first pending stage that may run. A LibCST stage
        larger than the whole budget goes when no other LibCST stage is in flight, before any
        smaller one: it is the longest task, and it is parsed with the least memory besides."""
        while self.pending and len(self.in_flight) < self.jobs:
            position = next((i for i, job in enumerate(self.pending) if self._may_run(job)), None)
            if position is None:
                return
            self._send(self.pending.pop(position))

    def _may_run(self, job: _Job) -> bool:
        if not job.parses:
            return True  # the cheap stages: an ast tree, a fifth of LibCST's estimate at most
        if self.memory == 0:
            return True
        head = self.pending[0]
        if head.parses and head.memory > self.budget:
            return False  # the oversize file waits for the LibCST stages in flight, then runs alone
        return self.memory + job.memory <= self.budget

    def _send(self, job: _Job) -> None:
        from concurrent.futures.process import BrokenProcessPool

        if self.pool is None:  # replaced: its worker ran past the time budget
            self._start()
        assert self.pool is not None
        try:
            future = self.pool.submit(_check_in_worker, job.path, job.data, job.codes, job.screened)
        except BrokenProcessPool:  # a worker died: the files it had are rechecked alone (_take)
            self.pool.shutdown(wait=False)
            self._start()
            future = self.pool.submit(_check_in_worker, job.path, job.data, job.codes, job.screened)
        if self.frozen:
            gc.unfreeze()  # the workers exist now (they fork at the first submit)
            self.frozen = False
        self.in_flight[job.index] = (job, future)
        if self.timeout is not None:
            self.deadlines[job.index] = time.monotonic() + self.timeout
        if job.parses:
            self.memory += job.memory

    def _finished(self, wait: bool = False) -> None:
        """Take the finished stages out of the budget (with ``wait``: after one more finishes):
        a file's result is kept, a file that LibCST must read is queued for its second stage."""
        if wait and self.in_flight:
            from concurrent.futures import FIRST_COMPLETED
            from concurrent.futures import wait as wait_for

            left = None
            if self.deadlines:
                left = max(0.0, min(self.deadlines.values()) - time.monotonic())
            wait_for([future for _, future in self.in_flight.values()], timeout=left, return_when=FIRST_COMPLETED)
        for index, (job, future) in list(self.in_flight.items()):
            if future.done():
                self._leave(index)
                self._take(job, future)
        now = time.monotonic()
        late = [index for index, deadline in self.deadlines.items() if deadline <= now]
        if late:
            self._replace_workers(late)

    def _leave(self, index: int) -> None:
        job, _ = self.in_flight.pop(index)
        self.deadlines.pop(index, None)
        if job.parses:
            self.memory -= job.memory

    def _replace_workers(self, late: list[int]) -> None:
        """The stages of ``late`` ran past the time budget: their files get ``ACC000``; the pool
        is killed (a worker stuck in native code cannot be interrupted) and the stages it was
        running besides go back to the queue, for a fresh pool."""
        assert self.timeout is not None
        for index in late:
            job, _ = self.in_flight[index]
            self._leave(index)
            findings = [_too_slow(job.path, self.timeout)] if PARSE_ERROR_CODE in job.codes else []
            self.results[index] = engine.FileResult(job.path, findings=findings)
            self.late.add(index)
        self._kill()
        for index, (job, _) in list(self.in_flight.items()):
            self._leave(index)
            self._queue(job)

    def _take(self, job: _Job, future: Future[engine.FileResult | engine.Screened]) -> None:
        from concurrent.futures.process import BrokenProcessPool

        try:
            outcome = future.result()
        except BrokenProcessPool:  # a worker was killed (memory) or crashed in native code
            # the whole pool is gone: each of its files again, alone, so that only the culprit is lost
            self.results[job.index] = _check_alone(job.path, job.data, job.codes, self.timeout)
            return
        except Exception as exc:  # noqa: BLE001 - raised in the worker by this file: the run goes on
            self.results[job.index] = _crashed(job.path, exc)
            return
        if isinstance(outcome, engine.Screened):
            self._queue(_Job(job.index, job.path, job.data, job.codes, outcome))
        else:
            self.results[job.index] = outcome

    def collect(self) -> dict[int, engine.FileResult]:
        """Every queued file's result, by index."""
        if self.pool is None and self.timeout is None:
            for job in self.pending:  # at most one
                self.results[job.index] = _check_safely(job.path, job.data, job.codes)
            self.pending.clear()
        elif self.pool is None and self.pending:
            self._start(1)  # one file, in a worker that can be replaced if it runs past the time budget
            self._dispatch()
        while self.pending or self.in_flight:
            self._finished(wait=True)
            self._dispatch()
        return self.results


def _check_alone(path: str, data: bytes, codes: frozenset[str], timeout: float | None = None) -> engine.FileResult:
    """:func:`_check` in a fresh one-worker pool: a file whose check kills the process gets an
    internal error (one that runs past ``timeout`` seconds, ``ACC000``), and the run goes on."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures import TimeoutError as Late
    from concurrent.futures.process import BrokenProcessPool

    context = multiprocessing.get_context("fork") if sys.platform.startswith("linux") else None
    pool = ProcessPoolExecutor(max_workers=1, mp_context=context)
    try:
        return pool.submit(_check_safely, path, data, codes).result(timeout=timeout)
    except BrokenProcessPool as exc:
        error = f"{path}: internal error: the process checking this file died ({exc}); please report it"
        return engine.FileResult(path, internal_errors=[error])
    except Late:
        assert timeout is not None
        return engine.FileResult(path, findings=[_too_slow(path, timeout)] if PARSE_ERROR_CODE in codes else [])
    finally:
        processes = list((pool._processes or {}).values())  # type: ignore[attr-defined]
        pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.kill()
            process.join()


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
) -> RunResult:
    """Check ``files`` with the ``enabled`` codes minus each file's per-file ignores.

    ``jobs`` worker processes parse the files (default: one per CPU; 1: all in this
    process). ``cache``, if given, answers for files whose bytes it has seen and receives
    the results of the others (except files with internal errors), and is saved at the end.
    ``parse_timeout`` (seconds; default: the settings' ``parse-timeout``, 0: none): a file
    whose check runs longer in a worker gets ``ACC000`` and its worker is replaced (with
    ``jobs=1`` there is no worker, and no limit). Only regular files are read (FIFOs, devices
    and sockets are skipped with a note), at most :data:`MAX_SOURCE_BYTES` + 1 bytes of each.
    """
    previous = project.active()
    index_of_project = project.ProjectIndex.for_files(files, str(settings.project_root))
    digests, hits, state = _project_pass(files, index_of_project, cache)
    project.activate(index_of_project)
    try:
        return _check_files(files, settings, enabled, jobs, cache, index_of_project, digests, hits, state,
                            parse_timeout)
    finally:
        project.activate(previous)


def _project_pass(files: Sequence[str], index: project.ProjectIndex, cache: ResultCache | None,
                  ) -> tuple[dict[int, str], dict[int, CachedResult], str]:
    """One read of every file before the checks: its digest, its cache entry, and the names it
    defines that perform a backward (from the entry, else from its bytes); these names make
    the project's prefilter state, which a cached result must share to be used."""
    digests: dict[int, str] = {}
    hits: dict[int, CachedResult] = {}
    names: dict[str, tuple[str, ...]] = {}
    imported: list[str] = []
    for position, path in enumerate(files):
        try:
            data, size = read_source(path)  # regular files only, bounded: a FIFO must not hang this pass
        except (OSError, NotARegularFile):  # the checks report it
            continue
        if size > MAX_SOURCE_BYTES:
            continue
        hit = None
        if cache is not None:
            digest = digests[position] = content_digest(data)
            lines = data.count(b"\n") + 1 if not notebook.is_notebook(path) else None
            hit = cache.get(path, digest, lines)
        if hit is not None:
            hits[position] = hit
            names[path] = hit.names
        else:
            names[path] = index.names_of(data)
        if len(files) <= NEIGHBOUR_RUN_FILES:
            imported.extend(index.imported_modules(path, data))
    _neighbour_names(index, imported, names)
    index.set_names(names)
    return digests, hits, index.state()


#: a run of at most this many files (a pre-commit hook's or an editor's) also learns the names of
#: the project modules those files import, which the run does not check: a call into a helper of
#: an unchecked module must pass the prefilter too. A larger run is taken to be the project.
NEIGHBOUR_RUN_FILES = 256
#: how many unchecked modules such a run reads at most, and how many imports deep it goes
MAX_NEIGHBOURS = 128
NEIGHBOUR_DEPTH = 3


def _neighbour_names(index: project.ProjectIndex, imported: list[str], names: dict[str, tuple[str, ...]]) -> None:
    """Add to ``names`` (path -> :meth:`ProjectIndex.names_of`) the modules in ``imported`` that
    are not checked, and the modules they import, breadth first within the bounds above."""
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
            try:
                data, size = read_source(path)
            except (OSError, NotARegularFile):
                continue
            if size > MAX_SOURCE_BYTES:
                continue
            names[path] = index.names_of(data)
            following.extend(index.imported_modules(path, data))
        frontier = following


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
                 cache: ResultCache | None, index_of_project: project.ProjectIndex, digests: dict[int, str],
                 hits: dict[int, CachedResult], state: str, parse_timeout: float | None) -> RunResult:
    run = RunResult()
    by_path = {os.path.abspath(files[i]): digest for i, digest in digests.items()}
    findings: dict[int, list[Finding]] = {}
    errors: dict[int, list[str]] = {}
    warnings: dict[int, list[str]] = {}
    # index -> (path, bytes, digest, unknown noqa codes)
    parsed: dict[int, tuple[str, bytes, str, list[tuple[int, str]]]] = {}
    codes_for: dict[tuple[str, ...], frozenset[str]] = {}
    rules_for: dict[frozenset[str], list[engine.Rule]] = {}
    extra: dict[int, tuple[str, ...]] = {}  # index -> the names it defines that perform a backward

    def look_up_or_submit(index: int, path: str, data: bytes, codes: frozenset[str]) -> None:
        """The cache, the prefilter, then the scheduler, for one file read."""
        digest = ""
        if cache is not None:
            digest = content_digest(data)
            lines = data.count(b"\n") + 1 if not notebook.is_notebook(path) else None  # a cell's line: unbounded
            hit = hits.get(index) if digests.get(index) == digest else cache.get(path, digest, lines)
            if hit is not None and _current(hit, state, by_path):
                run.cached += 1
                findings[index] = hit.findings
                warnings[index] = _unknown_noqa_warnings(path, hit.unknown_noqa)
                if hit.findings:
                    run.sources[path] = data
                return
        unknown = _unknown_noqa_codes(path, data)
        warnings[index] = _unknown_noqa_warnings(path, unknown)
        if codes not in rules_for:
            rules_for[codes] = engine.rules_for(codes)
        rules = rules_for[codes]
        notebook_json = notebook.is_notebook(path)  # its code is in JSON strings: checked cell by cell
        names = index_of_project.names_for(path)
        if (
            rules
            and not engine.may_fire(data, rules, in_strings=notebook_json, path=path)
            and not _reports_unused_noqa(path, data, codes)
        ):
            if cache is not None:
                cache.put(path, digest, [], unknown, names=names, state=state)
            return
        extra[index] = names
        run.parsed += 1
        parsed[index] = (path, data, digest, unknown)
        scheduler.submit(index, path, data, codes)

    timeout = settings.parse_timeout if parse_timeout is None else parse_timeout
    with _Scheduler(default_jobs() if jobs is None else max(1, jobs), timeout or None) as scheduler:
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
                warnings[index] = _unknown_noqa_warnings(path, early.unknown_noqa)
                continue
            try:
                data, size = read_source(path)
            except NotARegularFile as exc:
                run.notes.append(str(exc))
                continue
            except OSError as exc:  # unreadable, a directory, vanished since discovery
                if PARSE_ERROR_CODE in codes:
                    findings[index] = [_unreadable(path, exc)]
                continue
            if size > MAX_SOURCE_BYTES:  # not read to the end: whether a rule may fire is unknown
                if PARSE_ERROR_CODE in codes:
                    findings[index] = [_too_large(path, size)]
                continue
            try:
                look_up_or_submit(index, path, data, codes)
            except Exception as exc:  # noqa: BLE001 - one file must not end the run
                errors[index] = _crashed(path, exc).internal_errors
        results = scheduler.collect()
    for index, result in results.items():
        path, data, digest, unknown = parsed[index]
        findings[index] = result.findings
        errors[index] = result.internal_errors
        if result.findings:
            run.sources[path] = data
        if cache is not None and not result.internal_errors and index not in scheduler.late:
            cache.put(path, digest, result.findings, unknown, dependencies=result.dependencies,
                      names=extra.get(index, ()), state=state)
    for index in sorted(findings.keys() | errors.keys()):
        run.findings.extend(findings.get(index, ()))
        run.errors.extend(errors.get(index, ()))
    run.warnings = [warning for index in sorted(warnings) for warning in warnings[index]]
    if cache is not None:
        cache.save()
    return run


def check_one(path: str, data: bytes, codes: frozenset[str]) -> engine.FileResult:
    """One file's bytes (stdin, an editor's buffer) checked in this process with ``codes``: the
    findings a run reports for the same bytes at that path (notebooks by the path's suffix)."""
    return _check(path, data, codes)
