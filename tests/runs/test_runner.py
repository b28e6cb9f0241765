"""Many files at once: the findings never depend on ``--jobs`` or on the cache."""

from __future__ import annotations

import ast
import json
import multiprocessing
import os
import platform
import shutil
import signal
import sys
import time
from concurrent.futures import Future
from pathlib import Path

import pytest
from click.testing import CliRunner

from accumlint import heap
from accumlint.cli.app import main
from accumlint.pipeline import engine
from accumlint.pipeline.run_context import RunContext
from accumlint.run import pool as worker_pool
from accumlint.run import runner
from accumlint.run.cache import ResultCache, content_digest
from accumlint.settings.config import Settings, resolve_selection
from tests.shared_data import REPO

BUGGY = (REPO / "examples" / "train_buggy.py").read_text(encoding="utf-8")
KEY, SECRET = "0" * 32, b"s" * 32  # a cache file name and a signing key
FIXED = (REPO / "examples" / "train_fixed.py").read_text(encoding="utf-8")


def make_tree(root: Path, copies: int = 6) -> Path:
    """A small project: buggy and fixed loops, plain modules, and the odd files a tree holds."""
    for i in range(copies):
        package = root / f"pkg{i % 3}" / f"sub{i}"
        package.mkdir(parents=True)
        (package / f"train_{i}.py").write_text(BUGGY, encoding="utf-8")
        (package / f"fixed_{i}.py").write_text(FIXED, encoding="utf-8")
        (package / f"model_{i}.py").write_text(f"import torch\n\nWIDTH = {i}\n", encoding="utf-8")
    (root / "doc.py").write_text('"""Call loss.backward() once per microbatch."""\nx = 1\n', encoding="utf-8")
    (root / "broken.py").write_text("loss.backward()\ndef f(:\n", encoding="utf-8")
    (root / "broken_plain.py").write_text("def f(:\n", encoding="utf-8")
    (root / "latin.py").write_bytes("# -*- coding: latin-1 -*-\ns = 'café'\nloss.backward()\n".encode("latin-1"))
    (root / "binary.py").write_bytes(b"loss.backward()\ns = '\xff'\n")
    return root


def cli_json(*args: str) -> tuple[int, list[dict]]:
    result = CliRunner().invoke(main, ["check", "--output-format", "json", "--exit-zero", *args])
    assert result.exit_code == 0, result.output
    return result.exit_code, json.loads(result.output)


def located(report: list[dict]) -> list[tuple[str, int, str]]:
    return [(Path(f["filename"]).name, f["location"]["row"], f["code"]) for f in report]


def test_same_findings_with_one_job_many_jobs_cold_and_warm_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = make_tree(tmp_path / "tree")
    monkeypatch.chdir(tmp_path)
    cache_dir = tmp_path / "cache"
    _, serial = cli_json("--jobs", "1", "--no-cache", "tree")
    _, parallel = cli_json("--jobs", "3", "--no-cache", "tree")
    _, default = cli_json("--no-cache", "tree")
    _, cold = cli_json("--jobs", "2", "--cache-dir", str(cache_dir), "tree")
    assert (cache_dir / "CACHEDIR.TAG").is_file()
    _, warm = cli_json("--jobs", "2", "--cache-dir", str(cache_dir), "tree")
    _, warm_serial = cli_json("--jobs", "1", "--cache-dir", str(cache_dir), "tree")
    assert serial == parallel == default == cold == warm == warm_serial
    found = located(serial)
    for i in range(6):
        assert [(row, code) for name, row, code in found if name == f"train_{i}.py"] == [
            (54, "ACC001"),
            (57, "ACC201"),
            (61, "ACC304"),
        ]
    assert not [f for f in found if f[0].startswith(("fixed_", "model_", "doc", "latin"))]
    assert ("broken.py", 2, "ACC000") in found
    assert ("binary.py", 2, "ACC000") in found
    assert not [f for f in found if f[0] == "broken_plain.py"]  # no rule can fire there: not parsed
    assert len(found) == 6 * 3 + 2
    assert tree.is_dir()


def test_same_findings_on_the_rule_catalogue(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every rules/ and examples/ file, serial vs parallel vs cached (read from disk: new rules count)."""
    for folder in ("rules", "examples"):
        shutil.copytree(REPO / folder, tmp_path / folder)
    monkeypatch.chdir(tmp_path)
    _, serial = cli_json("--select", "ALL", "--jobs", "1", "--no-cache", "rules", "examples")
    _, parallel = cli_json("--select", "ALL", "--jobs", "2", "--no-cache", "rules", "examples")
    _, cold = cli_json("--select", "ALL", "--jobs", "2", "rules", "examples")
    _, warm = cli_json("--select", "ALL", "--jobs", "2", "rules", "examples")
    assert serial == parallel == cold == warm
    expected = {
        (str(path.relative_to(tmp_path)), line, code)
        for path in sorted(tmp_path.glob("*/**/*.py"))
        for line, text in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if "# expect:" in text
        for code in (c.strip() for c in text.split("# expect:")[1].split(","))
        if code in {rule.code for rule in engine.ALL_RULES_INSTANCES}
    }
    assert expected and expected <= {(f["filename"], f["location"]["row"], f["code"]) for f in serial}


def test_a_warm_run_only_hashes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tree = make_tree(tmp_path / "tree", copies=2)
    files = sorted(str(p) for p in tree.rglob("*.py"))
    settings = Settings(project_root=tmp_path)
    enabled = resolve_selection([])
    cache = ResultCache.load(tmp_path / "cache", KEY, SECRET)
    cold = runner.check_files(files, settings, enabled, jobs=2, cache=cache)
    # the byte prefilter decides model_*, broken_plain.py and doc.py (its backward is prose)
    assert (cold.cached, cold.parsed) == (0, len(files) - 4)

    def refuse(*args: object) -> object:
        raise AssertionError("a warm run parsed a file")

    monkeypatch.setattr(engine, "check_source", refuse)
    monkeypatch.setattr(engine, "may_fire", refuse)
    warm = runner.check_files(files, settings, enabled, jobs=1, cache=ResultCache.load(tmp_path / "cache", KEY, SECRET))
    assert (warm.cached, warm.parsed) == (len(files), 0)
    assert warm.findings == cold.findings and warm.sources == cold.sources
    assert len(warm.findings) == 2 * 3 + 2


def test_results_come_in_file_order_whatever_finishes_first(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "tree", copies=4)
    files = sorted(str(p) for p in tree.rglob("*.py"))
    run = runner.check_files(files, Settings(project_root=tmp_path), resolve_selection([]), jobs=4)
    order = [files.index(f.path) for f in run.findings]
    assert order == sorted(order)


def test_internal_errors_from_workers_are_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_rules: object
) -> None:
    from tests.conftest import FakeCrash, install_rules

    install_rules(monkeypatch, [*fake_rules, FakeCrash])  # type: ignore[misc]
    for name in ("a.py", "b.py", "c.py"):
        (tmp_path / name).write_text("opt.zero_grad()\n", encoding="utf-8")
    files = sorted(str(p) for p in tmp_path.glob("*.py"))
    enabled = frozenset({"ACC000", "ACC001", "ACC002"})
    cache = ResultCache.load(tmp_path / "cache", KEY, SECRET)
    run = runner.check_files(files, Settings(project_root=tmp_path), enabled, jobs=2, cache=cache)
    assert [e.split(":")[0] for e in run.errors] == files
    assert [(Path(f.path).name, f.code) for f in run.findings] == [
        ("a.py", "ACC001"),
        ("b.py", "ACC001"),
        ("c.py", "ACC001"),
    ]
    # files with internal errors are not cached (the cache file may exist: it also keeps the
    # byte stage's table and the project index)
    reloaded = ResultCache.load(tmp_path / "cache", KEY, SECRET)
    assert [reloaded.get(f, content_digest(Path(f).read_bytes())) for f in files] == [None, None, None]


def _slow_check(path: str, data: bytes, codes: frozenset[str], screened: object, *,
                context: RunContext) -> engine.FileResult:
    time.sleep(60)
    return engine.FileResult(path)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _scheduler(jobs: int, timeout: float | None = None) -> worker_pool._Scheduler:
    """A scheduler of the runner's checks (looked up now: a test may have replaced one)."""
    return worker_pool._Scheduler(jobs, runner._check_in_worker, runner._check_safely, timeout)


def _interrupt_a_run_of_two_slow_files() -> list[bool]:
    """Whether each worker is gone within 30 s of the interrupt (its file takes 60 s: gone means
    killed). The pool's own thread may reap a worker first, so its exit code can read None."""
    with pytest.raises(KeyboardInterrupt), _scheduler(2) as scheduler:
        scheduler.submit(0, "a.py", b"", frozenset())
        scheduler.submit(1, "b.py", b"", frozenset())
        processes = list(scheduler.pool._processes.values())  # type: ignore[union-attr]
        assert len(processes) == 2
        raise KeyboardInterrupt
    deadline = time.monotonic() + 30
    for process in processes:
        process.join(timeout=max(0.0, deadline - time.monotonic()))
        while not _gone(process.pid) and process.exitcode is None and time.monotonic() < deadline:
            time.sleep(0.05)
    return [process.exitcode == -signal.SIGKILL or _gone(process.pid) for process in processes]


def test_an_interrupted_run_terminates_its_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "_check_in_worker", _slow_check)
    # killed by the signal, not ended after finishing its file (that would be exit code 0)
    assert _interrupt_a_run_of_two_slow_files() == [True, True]


def test_workers_end_even_if_the_main_process_handles_sigterm(monkeypatch: pytest.MonkeyPatch) -> None:
    """A SIGTERM handler of the main process (Lightning's Trainer installs one) is inherited
    through fork; a worker stopped with SIGTERM could sleep on, one stopped with SIGKILL cannot."""
    monkeypatch.setattr(runner, "_check_in_worker", _slow_check)
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: None)
    try:
        assert _interrupt_a_run_of_two_slow_files() == [True, True]
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_worker_exits_when_the_main_process_is_gone() -> None:
    """A worker whose parent is not the main process it was started by exits (status 1)."""
    orphan = multiprocessing.Process(target=worker_pool._exit_with_parent, args=(-1,))  # -1: never a parent's id
    orphan.start()
    orphan.join(timeout=30)
    assert orphan.exitcode == 1


def test_a_large_file_gives_its_memory_back(monkeypatch: pytest.MonkeyPatch) -> None:
    trims: list[int] = []
    monkeypatch.setattr(heap, "trim", lambda: trims.append(0) or 0)
    small = b"loss.backward()\n"
    large = small * (runner.TRIM_ABOVE // len(small) + 1)
    codes = frozenset({"ACC001"})
    assert runner._check("small.py", small, codes, RunContext()).findings == []
    assert trims == []
    assert runner._check("large.py", large, codes, RunContext()).findings == []
    assert trims == [0]


def test_the_main_process_gives_its_heap_back_as_it_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After the project pass, and with workers after each :data:`runner.TRIM_MAIN_EVERY` bytes read."""
    for number in range(6):
        (tmp_path / f"m{number}.py").write_text("x = 1\n" * 200)
    files = sorted(str(path) for path in tmp_path.glob("*.py"))
    size = (tmp_path / "m0.py").stat().st_size
    trims: list[int] = []
    monkeypatch.setattr(heap, "trim", lambda: trims.append(0) or 0)
    monkeypatch.setattr(runner, "TRIM_MAIN_EVERY", 2 * size)
    settings = Settings(project_root=tmp_path)
    runner.check_files(files, settings, frozenset({"ACC001"}), jobs=1)
    assert len(trims) == 1  # one job: only after the project pass
    trims.clear()
    runner.check_files(files, settings, frozenset({"ACC001"}), jobs=2)
    assert len(trims) == 1 + 3  # six files read, a trim after every second


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc", reason="glibc only"
)
def test_the_heap_is_managed_with_glibc() -> None:
    assert heap.trim() in (0, 1)
    assert heap.one_arena() == 1
    assert heap.resident() > 2**20


class _ManualPool:
    """Stands in for the process pool: records what is sent, finishes nothing by itself."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, Future[engine.FileResult]]] = []
        self.second: list[bool] = []  # whether each sent stage is a file's second (LibCST)

    def submit(self, *task: object) -> Future[engine.FileResult]:
        path, _, _, screened = task[-4:]  # (the call in the worker's context, the check) path, data, codes, screened
        assert isinstance(path, str)
        future: Future[engine.FileResult] = Future()
        self.sent.append((path, future))
        self.second.append(screened is not None)
        return future

    @property
    def stages(self) -> list[tuple[str, bool]]:
        return [(path, second) for (path, _), second in zip(self.sent, self.second, strict=True)]

    def libcst(self) -> list[tuple[str, Future[engine.FileResult]]]:
        """The second stages sent so far."""
        return [sent for sent, second in zip(self.sent, self.second, strict=True) if second]

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        pass


def _stage_history(scheduler: worker_pool._Scheduler, pool: _ManualPool) -> list[list[str]]:
    """Run the queue to its end: every cheap stage hands its file on to LibCST, and the LibCST
    stages in flight finish one at a time, the first sent first. Returns what was parsing
    after each step."""
    history: list[list[str]] = []
    while True:
        for (_, future), second in zip(pool.sent, pool.second, strict=True):
            if not second and not future.done():
                future.set_result(engine.Screened("", ()))  # type: ignore[arg-type]
        scheduler.poll()
        running = [path for path, future in pool.libcst() if not future.done()]
        if not running:
            assert scheduler.pending == [] and scheduler.in_flight == {}
            return history
        history.append(running)
        assert len(scheduler.in_flight) <= scheduler.jobs
        next(future for path, future in pool.libcst() if path == running[0]).set_result(engine.FileResult(running[0]))


def test_libcst_stages_in_flight_stay_within_the_parse_budget() -> None:
    """Largest first, a smaller file overtakes one that does not fit, and a file larger than
    the whole budget is parsed alone, before the others."""
    scheduler = _scheduler(4)
    scheduler.budget = 1000 * engine.PARSE_MEMORY_PER_BYTE  # room to parse 1,000 bytes of source
    pool = _ManualPool()
    scheduler._start = lambda: setattr(scheduler, "pool", pool)  # type: ignore[method-assign]
    sizes = {"huge.py": 3000, "a.py": 900, "b.py": 600, "c.py": 300, "d.py": 200, "e.py": 100}
    for index, (name, size) in enumerate(sizes.items()):
        scheduler.submit(index, name, b"#" * size, frozenset())
    history = _stage_history(scheduler, pool)
    for running in history:
        assert len(running) == 1 or sum(sizes[path] for path in running) <= 1000, running
    assert history[0] == ["huge.py"]  # alone, and first
    assert history[1] == ["a.py", "e.py"]  # 900 fits, then only 100 of the remaining room
    assert history[2] == ["e.py", "b.py", "c.py"]
    assert sorted(path for path, second in pool.stages if second) == sorted(sizes)
    assert scheduler.memory == 0


def test_a_file_libcst_must_read_comes_back_before_the_cheap_stages() -> None:
    """A stage is sent only when a worker is free; a file handed on to LibCST goes before the
    files still waiting for their cheap stages, within LibCST's budget."""
    scheduler = _scheduler(2)
    scheduler.budget = 1000 * engine.PARSE_MEMORY_PER_BYTE
    pool = _ManualPool()
    scheduler._start = lambda: setattr(scheduler, "pool", pool)  # type: ignore[method-assign]
    sizes = {"train.py": 800, "loop.py": 700, "util.py": 100}
    for index, (name, size) in enumerate(sizes.items()):
        scheduler.submit(index, name, b"#" * size, frozenset())
    assert pool.stages == [("train.py", False), ("loop.py", False)]  # two workers
    for _, future in pool.sent:
        future.set_result(engine.Screened("", ()))  # type: ignore[arg-type]
    scheduler.poll()
    # train.py's LibCST stage first; loop.py's does not fit beside it, util.py's cheap stage does
    assert pool.stages[2:] == [("train.py", True), ("util.py", False)]
    assert scheduler.memory == 800 * engine.PARSE_MEMORY_PER_BYTE
    pool.sent[3][1].set_result(engine.FileResult("util.py"))
    pool.sent[2][1].set_result(engine.FileResult("train.py"))
    scheduler.poll()
    assert pool.stages[4:] == [("loop.py", True)]
    pool.sent[4][1].set_result(engine.FileResult("loop.py"))
    assert sorted(scheduler.collect()) == [0, 1, 2]


def test_a_libcst_stage_is_budgeted_by_the_estimate_of_the_cheap_stages() -> None:
    """Per node of the interpreter's tree where the cheap stages built one, else per source byte."""
    line = b"x = 1  # a comment: bytes, no nodes" + b"." * 100 + b"\n"
    data = b"for batch in loader:\n    loss.backward()\n" + line * 600
    assert len(data) >= engine.INTERPRETER_FIRST_ABOVE
    screened = engine.screen("train.py", data)
    assert isinstance(screened, engine.Screened)
    nodes = sum(1 for _ in ast.walk(ast.parse(data)))
    assert screened.memory == nodes * engine.PARSE_MEMORY_PER_NODE
    assert worker_pool._Job(0, "train.py", data, frozenset(), screened).memory == screened.memory
    assert screened.memory < len(data) * engine.PARSE_MEMORY_PER_BYTE / 2  # comments cost no nodes
    loop = b"for batch in loader:\n    loss.backward()\n"
    small = engine.screen("loop.py", loop)
    assert isinstance(small, engine.Screened)
    assert small.memory == sum(1 for _ in ast.walk(ast.parse(loop))) * engine.PARSE_MEMORY_PER_NODE
    small = engine.Screened(small.text, small.rules)  # no ast stage (a file calling out): by the size
    assert worker_pool._Job(0, "loop.py", b"x" * 50, frozenset(), small).memory == 50 * engine.PARSE_MEMORY_PER_BYTE


def test_a_loaded_machine_stretches_a_stages_time_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """Other work on the machine slows a stage down: its budget is scaled by the load per CPU
    (a good file must not turn into ACC000), up to a bound (a stuck file still ends)."""
    monkeypatch.setattr(worker_pool, "default_jobs", lambda: 2)
    scheduler = _scheduler(2, timeout=1.0)
    now = 100.0
    scheduler.sent_at = {0: now - 2.5, 1: now - 9.0}
    scheduler.deadlines = {0: now - 1.5, 1: now - 8.0}
    monkeypatch.setattr(os, "getloadavg", lambda: (6.0, 6.0, 6.0))  # 3 runnable processes per CPU
    assert worker_pool.load_factor() == 3.0
    assert scheduler._stretched([0, 1], now) == [1]  # 9 s > 3 x 1 s: still late
    assert scheduler.deadlines[0] == now - 2.5 + 3.0
    monkeypatch.setattr(os, "getloadavg", lambda: (1.0, 1.0, 1.0))  # a quiet machine: the budget as set
    assert worker_pool.load_factor() == 1.0
    assert scheduler._stretched([0], now) == [0]
    monkeypatch.setattr(os, "getloadavg", lambda: (500.0, 500.0, 500.0))
    assert worker_pool.load_factor() == worker_pool.MAX_STRETCH
