"""The worker pool of a run: LibCST stages in worker processes, within a memory and a time budget.

A process pool started once a second file needs LibCST, fed stage by stage from a queue of its
own (LibCST stages first, largest first) within a memory budget, with a time budget per stage
that a loaded machine stretches.

The per-file work the workers do is the caller's (:mod:`accumlint.run.runner` passes its checks
in); each worker gets the run's :class:`~accumlint.pipeline.run_context.RunContext` from its initializer
and hands it to that work. Here too: what a file's result is where its check did not end
(too slow, out of memory, crashed).
"""

from __future__ import annotations

import bisect
import contextlib
import faulthandler
import functools
import gc
import os
import signal
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar

from accumlint import heap
from accumlint.files.reading import is_notebook
from accumlint.heap import MEMORY_LIMIT
from accumlint.lazy import lazy_module
from accumlint.pipeline.run_context import ALONE, RunContext
from accumlint.spec.findings import Finding, Severity
from accumlint.spec.registry import PARSE_ERROR_CODE, PARSE_ERROR_NAME, PARSE_ERROR_URL

engine = lazy_module("accumlint.pipeline.engine")

if TYPE_CHECKING:
    from concurrent.futures import Future, ProcessPoolExecutor
    from multiprocessing.process import BaseProcess

T = TypeVar("T")


class StagedCheck(Protocol):
    """A worker's check of one file in stages (:meth:`_Scheduler._send`): without ``screened``
    the cheap stages, which may return what LibCST still has to read; with it, the rest."""

    def __call__(self, path: str, data: bytes, codes: frozenset[str], screened: engine.Screened | None, *,
                 context: RunContext) -> engine.FileResult | engine.Screened: ...


class WholeCheck(Protocol):
    """A worker's check of one file, start to end (:func:`_check_alone`)."""

    def __call__(self, path: str, data: bytes, codes: frozenset[str], *, context: RunContext) -> engine.FileResult: ...


#: in a worker process only: the context of the run it works for, set once by its initializer
#: (:func:`_worker_start`) and handed to each call (:func:`_in_context`); None in the main process
_worker_context: RunContext | None = None


def _in_context(function: Callable[..., T], *args: object) -> T:
    """In a worker: ``function(*args, context=...)`` with the run's context, on a deep frame
    stack (:func:`_on_deep_stack`)."""
    assert _worker_context is not None, "called outside a worker"
    return _on_deep_stack(function, args, {"context": _worker_context})


def _through(function: Callable[..., T], args: tuple[object, ...], kwargs: dict[str, object]) -> T:
    return function(*args, **kwargs)


#: the value-stack slots (8 bytes each) :func:`_on_deep_stack`'s frame reserves beyond its own needs
DEEP_STACK_SLOTS = 2**16


def _deep_caller() -> Callable[..., object]:
    """:func:`_through` with :data:`DEEP_STACK_SLOTS` more value-stack slots (itself where the
    implementation's code objects cannot be rebuilt so)."""
    code = _through.__code__
    try:
        deep = code.replace(co_stacksize=code.co_stacksize + DEEP_STACK_SLOTS)
    except (AttributeError, TypeError, ValueError):
        return _through
    function = types.FunctionType(deep, _through.__globals__, "_on_deep_stack")
    function.__qualname__ = "_on_deep_stack"  # pickled by this name (run_alone)
    return function


#: ``_on_deep_stack(function, args, kwargs)`` is ``function(*args, **kwargs)`` called from a frame
#: that opens a frame-stack chunk of 1 MiB and fills half of it: the calls below it push their
#: frames into the other half, not into 16 KiB chunks of their own. CPython 3.11 and 3.12 (and
#: 3.13, 3.14 before the fix of python/cpython#142183) map a new chunk each time a call crosses
#: a chunk's end and unmap it when that call returns; the model's recursive interpreter crosses
#: one such end again and again (accelerate's test_sync.py: 0.45 s of the kernel's page faults
#: in a 0.8 s check). The half never used is never touched: it costs no memory.
_on_deep_stack = _deep_caller()


def _worker_start(parent: int, context: RunContext = ALONE) -> None:
    """In each worker: leave Ctrl-C to the main process (which terminates the workers), and
    exit within half a second once the main process is gone, instead of waiting for work forever;
    keep the run's ``context`` for its calls (:func:`_in_context`; given in memory where the
    workers fork, pickled once per worker elsewhere). Its memory is bounded (:func:`limit_memory`)."""
    global _worker_context
    _worker_context = context
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # terminate() must end the worker even if the main process installed its own SIGTERM handler
    # (inherited through fork; Lightning's Trainer installs one, for instance)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    threading.Thread(target=_exit_with_parent, args=(parent,), daemon=True).start()
    from accumlint.source import parsing  # LibCST: loaded in the workers only

    parsing.start_parser()  # its stack's address space is mapped before the memory bound is set
    if limit_memory():
        # LibCST's native parser prints "memory allocation of N bytes failed" as it aborts (and a
        # fault handler inherited from the main process its stack): the file's ACC000 says it; a
        # worker's results and errors travel back through the pool
        faulthandler.disable()
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.close(devnull)


#: the least a worker may allocate past what it holds at its start, whatever that is: what a
#: forked worker holds at first is its parent's, shared (a test process that imported torch)
MIN_MEMORY_BUDGET = 512 * 2**20
#: what the stacks of a worker's threads may use (resident, not in the data limit): LibCST's
#: parser recurses once per nesting level on its thread's stack
STACK_ALLOWANCE = 96 * 2**20


def limit_memory(limit: int = MEMORY_LIMIT) -> bool:
    """Bound this process (a worker, its parser thread started) to about ``limit`` bytes
    resident: its data segment (``RLIMIT_DATA``: the heap and the private writable mappings,
    where LibCST's and Python's allocations go) may grow by ``limit`` minus what it holds now
    and :data:`STACK_ALLOWANCE` (at least :data:`MIN_MEMORY_BUDGET`).

    Past it Python raises ``MemoryError`` and LibCST's native parser aborts the process
    (``SIGABRT``): both read as "too large to check" (:data:`OUT_OF_MEMORY_SIGNALS`). Linux
    only (elsewhere ``RLIMIT_DATA`` may not cover ``mmap``): returns whether a limit was set.
    """
    if not sys.platform.startswith("linux"):
        return False
    import resource

    data = _data_segment()
    if data is None:
        return False
    allowed = data + max(limit - heap.resident() - STACK_ALLOWANCE, MIN_MEMORY_BUDGET)
    _, hard = resource.getrlimit(resource.RLIMIT_DATA)
    if hard != resource.RLIM_INFINITY:
        allowed = min(allowed, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (allowed, hard))
    return True


def _data_segment() -> int | None:
    """This process's data segment in bytes (``VmData`` of ``/proc/self/status``), None where unknown."""
    try:
        with open("/proc/self/status", "rb") as status:
            for line in status:
                if line.startswith(b"VmData:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


#: how a worker that ran out of :data:`MEMORY_LIMIT` ends: LibCST's native parser aborts
#: when an allocation fails (SIGKILL is the pool's own, past the time budget)
OUT_OF_MEMORY_SIGNALS = frozenset({signal.SIGABRT})


def initargs(context: RunContext) -> tuple[int, RunContext]:
    """What a pool's ``initializer``, :func:`_worker_start`, gets in a worker of the run of ``context``."""
    return (os.getpid(), context)


def default_jobs() -> int:
    """The number of CPUs this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


# --- a file's result where its check did not end --------------------------------------------
def file_error(path: str, message: str, fix: str) -> Finding:
    """The file's ``ACC000`` at its first line."""
    return Finding(path=path, line=1, column=1, code=PARSE_ERROR_CODE, name=PARSE_ERROR_NAME,
                   severity=Severity.ERROR, message=message, fix=fix, url=PARSE_ERROR_URL)


def not_checked(path: str, reason: str, fix: str) -> Finding:
    """The ``ACC000`` of a file the run did not check, at its first line: ``reason`` says why, ``fix`` what to do."""
    return file_error(path, f"file could not be checked: {reason}", fix)


def parse_error_result(path: str, finding: Finding, codes: frozenset[str]) -> engine.FileResult:
    """The result of a file whose check ended in its ``ACC000`` ``finding``: that finding where
    ``ACC000`` is among ``codes``, else no finding and the file not fully checked (the finding's
    message as the reason): a run never calls a file it could not check clean."""
    if PARSE_ERROR_CODE in codes:
        return engine.FileResult(path, findings=[finding])
    return engine.FileResult(path, incomplete=[finding.message])


def too_slow(path: str, seconds: float) -> Finding:
    """The ``ACC000`` of a file whose check ran past ``seconds``."""
    reason = f"took too long to parse (more than {seconds:g} s)"
    return not_checked(path, reason, "simplify the deepest expression, raise `parse-timeout`, or exclude the file")


def out_of_memory(path: str) -> Finding:
    """The ``ACC000`` of a file whose check ran out of a worker's :data:`MEMORY_LIMIT`."""
    reason = f"too large to check (its check needed more than {MEMORY_LIMIT / 2**30:g} GiB of memory)"
    return not_checked(path, reason, "simplify the deepest expression, split the file, or exclude it")


def crashed(path: str, exc: BaseException) -> engine.FileResult:
    """A file whose check raised where nothing should: an internal error for that file, the run goes on."""
    error = f"{path}: internal error: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}; please report it"
    return engine.FileResult(path, internal_errors=[error])


def _exit_with_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(1)


#: What the files being parsed at once may take together, estimated by
#: :data:`~accumlint.pipeline.engine.PARSE_MEMORY_PER_NODE` (or, where no ``ast`` tree was built,
#: :data:`~accumlint.pipeline.engine.PARSE_MEMORY_PER_BYTE`): at least this much, or
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
        return self.screened is not None or is_notebook(self.path)

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
    """Checks files in a pool of worker processes (bounded in memory: :func:`limit_memory`),
    started once a second file needs parsing, or at the end for one.

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

    def __init__(self, jobs: int, staged: StagedCheck, whole: WholeCheck, timeout: float | None = None,
                 context: RunContext = ALONE) -> None:
        self.jobs = jobs
        self.staged, self.whole = staged, whole  # the worker's checks: in stages, and alone (_take)
        self.context = context
        self.timeout = timeout  # seconds a stage may run in a worker (None: no limit)
        self.budget = max(PARSE_BUDGET, jobs * PARSE_BUDGET_PER_JOB)
        self.pool: ProcessPoolExecutor | None = None
        self.pending: list[_Job] = []  # not sent yet, by rank
        self.in_flight: dict[int, tuple[_Job, Future[engine.FileResult | engine.Screened]]] = {}
        self.deadlines: dict[int, float] = {}  # index -> monotonic time its stage must be done by
        self.sent_at: dict[int, float] = {}  # index -> monotonic time its stage was sent
        self.late: set[int] = set()  # files that ran past the time budget (their result is not cached)
        self.memory = 0  # estimated, of the LibCST stages in flight
        self.frozen = False  # gc.freeze() until the workers have forked
        self.results: dict[int, engine.FileResult] = {}
        self.workers: list[BaseProcess] = []  # the pool's processes (known once they fork)

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
            processes = workers_of(self.pool)
            self.pool.shutdown(wait=False, cancel_futures=True)
            for process in processes:
                # SIGKILL: a worker holds nothing to clean up, and a SIGTERM can arrive before its
                # initializer resets a handler the main process installed (inherited through fork)
                process.kill()
        self.pool = None

    def submit(self, index: int, path: str, data: bytes, codes: frozenset[str]) -> None:
        """Queue one file."""
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
        heap.one_arena()  # the pool's threads here, and the workers' parser threads, share the main arena
        if context is not None:
            # LibCST and the rules load here, once, for every worker to inherit (a run whose byte
            # stage read the cache's vocabulary has not loaded them yet)
            engine.vocabulary()
            # the collector of a forked worker would write to every object it inherited and so
            # copy the pages it shares with this process; frozen objects are never scanned. The
            # workers fork at the first submit, after which this process unfreezes (_send)
            gc.freeze()
            self.frozen = True
        self.pool = ProcessPoolExecutor(
            max_workers=workers or self.jobs, mp_context=context, initializer=_worker_start,
            initargs=initargs(self.context)
        )
        self.workers = []

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
        task = (_in_context, self.staged, job.path, job.data, job.codes, job.screened)
        try:
            future = self.pool.submit(*task)
        except BrokenProcessPool:  # a worker died: the files it had are rechecked alone (_take)
            self.pool.shutdown(wait=False)
            self._start()
            future = self.pool.submit(*task)
        if not self.workers:
            self.workers = workers_of(self.pool)
        if self.frozen:
            gc.unfreeze()  # the workers exist now (they fork at the first submit)
            self.frozen = False
        self.in_flight[job.index] = (job, future)
        if self.timeout is not None:
            self.sent_at[job.index] = time.monotonic()
            self.deadlines[job.index] = self.sent_at[job.index] + self.timeout
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
            late = self._stretched(late, now)
        if late:
            self._replace_workers(late)

    def _leave(self, index: int) -> None:
        job, _ = self.in_flight.pop(index)
        self.deadlines.pop(index, None)
        self.sent_at.pop(index, None)
        if job.parses:
            self.memory -= job.memory

    def _stretched(self, late: list[int], now: float) -> list[int]:
        """Of the stages past their deadline, those still late once the time budget is scaled by
        the machine's load (:func:`load_factor`): on a machine shared with other work a stage
        gets the CPU share it would have had alone, so a good file is not reported as too slow."""
        assert self.timeout is not None
        factor = load_factor()
        still: list[int] = []
        for index in late:
            allowed = self.sent_at[index] + self.timeout * factor
            if allowed > now:
                self.deadlines[index] = allowed
            else:
                still.append(index)
        return still

    def _replace_workers(self, late: list[int]) -> None:
        """The stages of ``late`` ran past the time budget: their files get ``ACC000``; the pool
        is killed (a worker stuck in native code cannot be interrupted) and the stages it was
        running besides go back to the queue, for a fresh pool."""
        assert self.timeout is not None
        for index in late:
            job, _ = self.in_flight[index]
            self._leave(index)
            self.results[index] = parse_error_result(job.path, too_slow(job.path, self.timeout), job.codes)
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
            if len(self.workers) == 1 and _ran_out_of_memory(self.workers[0]):
                self.results[job.index] = _out_of_memory(job.path, job.codes)  # its only file: the culprit
                return
            # the whole pool is gone: each of its files again, alone, so that only the culprit is lost
            self.results[job.index] = _check_alone(self.whole, job.path, job.data, job.codes, self.timeout,
                                                   self.context)
            return
        except MemoryError:  # past the worker's memory limit
            self.results[job.index] = _out_of_memory(job.path, job.codes)
            return
        except Exception as exc:  # noqa: BLE001 - raised in the worker by this file: the run goes on
            self.results[job.index] = crashed(job.path, exc)
            return
        if isinstance(outcome, engine.Screened):
            self._queue(_Job(job.index, job.path, job.data, job.codes, outcome))
        else:
            self.results[job.index] = outcome

    def collect(self) -> dict[int, engine.FileResult]:
        """Every queued file's result, by index."""
        if self.pool is None and self.pending:
            # one file (or one job), in a worker: bounded in memory, replaced past the time budget
            self._start(1)
            self._dispatch()
        while self.pending or self.in_flight:
            self._finished(wait=True)
            self._dispatch()
        return self.results


#: the most a loaded machine stretches a stage's time budget (a stuck file still ends)
MAX_STRETCH = 8.0


def load_factor() -> float:
    """How many times longer a stage takes on this machine now than alone: the runnable
    processes (1-minute load average) per CPU this process may use, at least 1, at most
    :data:`MAX_STRETCH` (1 where the system does not say)."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return 1.0
    return min(MAX_STRETCH, max(1.0, load / default_jobs()))


class TooSlow(Exception):
    """A call in a worker ran past its time budget (:func:`run_alone`)."""


class OutOfMemory(Exception):
    """A call in a worker ran out of :data:`MEMORY_LIMIT` (:func:`run_alone`)."""


class Cancelled(Exception):
    """A call in a worker was cancelled (:meth:`Cancel.cancel`): its worker was killed."""


_alone_lock = threading.Lock()
_alone: set[ProcessPoolExecutor] = set()  # the pools of run_alone calls in progress
_ended = False  # set by end_alone: no run_alone call starts a worker any more
_current = threading.local()  # .cancel: the Cancel of this thread's run_alone calls


class Cancel:
    """A handle on the :func:`run_alone` calls a thread makes under :meth:`applies` (a
    language server's check of one version of a document): :meth:`cancel`, from any thread,
    kills their workers, and their callers get :class:`Cancelled`; a later call under it
    raises :class:`Cancelled` at once."""

    def __init__(self) -> None:
        self.cancelled = False
        self._pools: set[ProcessPoolExecutor] = set()

    def cancel(self) -> None:
        """Kill the workers of the calls in progress under this handle and refuse any later call."""
        with _alone_lock:
            self.cancelled = True
            pools = list(self._pools)
        for pool in pools:
            for process in workers_of(pool):
                process.kill()

    @contextlib.contextmanager
    def applies(self) -> Iterator[Cancel]:
        """Make this handle the one of the calling thread's :func:`run_alone` calls while the block runs."""
        previous = getattr(_current, "cancel", None)
        _current.cancel = self
        try:
            yield self
        finally:
            _current.cancel = previous


def run_alone(function: Callable[..., T], *args: object, timeout: float | None = None,
              context: RunContext | None = None) -> T:
    """``function(*args)`` in a fresh worker process (:func:`_worker_start`: bounded to
    :data:`MEMORY_LIMIT`) and its result. With a ``context``, ``function(*args, context=context)``:
    the context reaches the worker through its initializer (in memory where it forks, so a
    project index is not pickled); without one, the worker checks each file alone, its
    directives applied (:data:`~accumlint.pipeline.run_context.ALONE`). ``timeout``: seconds,
    stretched by :func:`load_factor` (None: no limit). Calls on several threads each run in their own worker.

    Raises what the call raises, :class:`TooSlow` past the time budget (the worker is killed),
    :class:`OutOfMemory` where it ran out of memory (``MemoryError``, or its native code
    aborted), :class:`Cancelled` where the calling thread's :class:`Cancel` was cancelled,
    ``BrokenProcessPool`` where the worker died otherwise or :func:`end_alone` ended it (or had
    been called).
    """
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures import TimeoutError as Late
    from concurrent.futures.process import BrokenProcessPool

    mp_context = multiprocessing.get_context("fork") if sys.platform.startswith("linux") else None
    cancel: Cancel | None = getattr(_current, "cancel", None)
    processes = []
    pool = ProcessPoolExecutor(
        max_workers=1, mp_context=mp_context, initializer=_worker_start,
        initargs=initargs(context or ALONE)
    )
    with _alone_lock:
        if _ended or (cancel is not None and cancel.cancelled):
            pool.shutdown(wait=False)
            if _ended:
                raise BrokenProcessPool("the process is shutting down")
            raise Cancelled()
        _alone.add(pool)
        if cancel is not None:
            cancel._pools.add(pool)
    try:
        future = pool.submit(_on_deep_stack, function, args, {}) if context is None \
            else pool.submit(_in_context, function, *args)
        processes = workers_of(pool)
        if cancel is not None and cancel.cancelled:  # cancelled while it forked: not killed yet
            for process in processes:
                process.kill()
    except BaseException:
        _release(pool, cancel, processes)
        raise
    try:
        try:
            return future.result(timeout=None if timeout is None else timeout * load_factor())
        except Late:
            raise TooSlow(timeout) from None
        except MemoryError:
            raise OutOfMemory() from None
        except BrokenProcessPool:
            if cancel is not None and cancel.cancelled:
                raise Cancelled() from None
            if any(_ran_out_of_memory(process) for process in processes):
                raise OutOfMemory() from None
            raise
    finally:
        _release(pool, cancel, processes)


def _release(pool: ProcessPoolExecutor, cancel: Cancel | None, processes: list[BaseProcess]) -> None:
    """End a :func:`run_alone` call's worker and forget its pool."""
    with _alone_lock:
        _alone.discard(pool)
        if cancel is not None:
            cancel._pools.discard(pool)
    processes = processes or workers_of(pool)
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.kill()
        process.join()


def end_alone() -> None:
    """Kill the workers of the :func:`run_alone` calls in progress (their callers get
    ``BrokenProcessPool`` at once), and refuse any later call: a server that shuts down does
    not wait for them."""
    global _ended
    with _alone_lock:
        _ended = True
        pools = list(_alone)
    for pool in pools:
        for process in workers_of(pool):
            process.kill()


def _check_alone(check: WholeCheck, path: str, data: bytes, codes: frozenset[str], timeout: float | None = None,
                 context: RunContext = ALONE) -> engine.FileResult:
    """``check`` in a fresh worker (:func:`run_alone`, in ``context``): a file whose check kills
    the process gets an internal error, one that runs out of memory or past ``timeout`` seconds
    ``ACC000``, and the run goes on. :class:`Cancelled` passes through."""
    from concurrent.futures.process import BrokenProcessPool

    try:
        return run_alone(check, path, data, codes, timeout=timeout, context=context)
    except BrokenProcessPool as exc:
        error = f"{path}: internal error: the process checking this file died ({exc}); please report it"
        return engine.FileResult(path, internal_errors=[error])
    except TooSlow:
        assert timeout is not None
        return parse_error_result(path, too_slow(path, timeout), codes)
    except OutOfMemory:
        return _out_of_memory(path, codes)


def workers_of(pool: ProcessPoolExecutor) -> list[BaseProcess]:
    """The worker processes of ``pool`` (started at its first submit)."""
    return list((getattr(pool, "_processes", None) or {}).values())


def _ran_out_of_memory(process: BaseProcess) -> bool:
    """Whether a worker that died ended as one that ran out of memory does (:data:`OUT_OF_MEMORY_SIGNALS`).

    The pool's own thread reaps its dead workers: a ``join`` here would race it for the exit
    status (the loser reads ``None``), so wait (5 s at most) for the code the reaper records."""
    deadline = time.monotonic() + 5
    while process.exitcode is None and time.monotonic() < deadline:
        time.sleep(0.01)
    return process.exitcode is not None and -process.exitcode in OUT_OF_MEMORY_SIGNALS


def _out_of_memory(path: str, codes: frozenset[str]) -> engine.FileResult:
    """The result of a file whose check ran out of a worker's memory."""
    return parse_error_result(path, out_of_memory(path), codes)
