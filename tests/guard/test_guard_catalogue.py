"""Same examples, both engines: every runnable ``rules/*/bad_*.py`` is run under the runtime
guard and must produce each expected code the guard can observe in that run (and nothing that
is not marked); every ``good_*.py`` must produce none.

Examples are discovered from the folder, so rule folders added later are picked up. Which
marked codes a run must reproduce comes from the guard itself: ``RUNTIME_CHECKS`` for codes
observable in any loop, and the card's per-code status (e.g. ACC101 only when the
normalization was inferred, ACC401 only with a DDP wrapper) for the conditional ones.

Only the selected tests' examples run (``-k ACC301``: that folder's), in two runner processes (one
torch import each) that start when the first test asks. Each example has its own time limit
(``ACCUMLINT_GUARD_SCRIPT_LIMIT_S``, 180 s): one that runs past it fails alone, its runner and
everything the runner started are killed, and a new runner goes on with the examples after it.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("torch")

from runtime_guard.checks import RUNTIME_CHECKS, STATIC_ONLY  # noqa: E402
from tests.catalogue.test_catalogue import EXAMPLES, _id, _marks, _runnable  # noqa: E402

RUNNER = Path(__file__).with_name("guard_catalogue_runner.py")
#: one example's time under the guard (the imports of its frameworks included)
SCRIPT_LIMIT_S = float(os.environ.get("ACCUMLINT_GUARD_SCRIPT_LIMIT_S", "180"))
#: a runner's start (its torch import) and the gap between two examples
START_LIMIT_S = 300.0
WORKERS = 2

#: Codes whose runtime evidence is the same as another marked code's (rules-spec "runtime counterpart"):
#: a loss divided only after its backward (ACC104) or left undivided where a framework expects the user
#: to divide (ACC105) gives gradients A times the group mean, which the guard reports as ACC103 where no
#: framework contract it knows says otherwise.
SAME_EVIDENCE = {"ACC104": {"ACC103"}, "ACC105": {"ACC103"}}


class _Runner:
    """One runner process over a list of examples, restarted past an example that failed it.

    The runner leads a process group of its own, so stopping it kills whatever its examples started."""

    def __init__(self, paths: list[str], log: Path, script_limit_s: float, start_limit_s: float) -> None:
        self.pending = list(paths)  # not started yet, in order
        self.current: str | None = None  # started, no result yet
        self.log = log
        self.script_limit_s, self.start_limit_s = script_limit_s, start_limit_s
        self.proc: subprocess.Popen[str] | None = None
        self.reader: threading.Thread | None = None
        self.events: queue.Queue[tuple[float, str | None]] = queue.Queue()
        self.since = 0.0  # when the runner started, or its last event came

    def start(self) -> None:
        """A runner process over the examples left."""
        with open(self.log, "a", encoding="utf-8") as err:
            self.proc = subprocess.Popen([sys.executable, str(RUNNER), *self.pending], stdin=subprocess.DEVNULL,
                                         stdout=subprocess.PIPE, stderr=err, text=True, start_new_session=True)
        self.since, self.current = time.monotonic(), None
        self.events = queue.Queue()
        self.reader = threading.Thread(target=self._read, args=(self.proc, self.events), daemon=True)
        self.reader.start()

    @staticmethod
    def _read(proc: subprocess.Popen[str], events: queue.Queue[tuple[float, str | None]]) -> None:
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                events.put((time.monotonic(), line))
        except (OSError, ValueError):  # closed by stop() while a process outside the group held the pipe
            pass
        events.put((time.monotonic(), None))

    def advance(self, results: dict[str, dict]) -> None:
        """Wait for the runner's next event and record it: an example started, or its result; an
        example that runs past its limit or ends the runner gets an error as its result."""
        if self.proc is None:
            if not self.pending:
                raise AssertionError("advance() on a runner with nothing left to run")
            self.start()
        limit = self.script_limit_s if self.current is not None else self.start_limit_s
        try:
            at, line = self.events.get(timeout=max(0.0, self.since + limit - time.monotonic()))
        except queue.Empty:
            self._fail(results, f"timed out: no result within {limit:.0f} s")
            return
        self.since = at
        if line is None:  # the runner ended
            code = self.proc.wait()
            self._fail(results, f"the runner ended (exit status {code}) before its result: {self._tail()}")
            return
        event = json.loads(line)
        if "start" in event:
            self.current = event["start"]
            self.pending.remove(self.current)
        else:
            results[event["path"]] = event["result"]
            self.current = None

    def _fail(self, results: dict[str, dict], reason: str) -> None:
        path = self.current if self.current is not None else self.pending.pop(0)
        results[path] = {"error": reason}
        self.stop()

    def _tail(self) -> str:
        return self.log.read_text(encoding="utf-8")[-3000:] if self.log.exists() else ""

    def stop(self) -> None:
        """Kill the runner and its process group (an example's children too); the next
        :meth:`advance` starts a new runner on the examples left."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:  # nothing of the group is left
            pass
        self.proc.wait()
        if self.reader is not None:
            self.reader.join(timeout=5)  # the pipe's end: every process of the group is gone
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.proc, self.current = None, None


class GuardRuns:
    """The guard's results for a list of examples, computed by ``workers`` runners started at once
    (the examples dealt out in order) and read as the tests ask for them."""

    def __init__(self, paths: list[str], folder: Path, *, workers: int = WORKERS,
                 script_limit_s: float = SCRIPT_LIMIT_S, start_limit_s: float = START_LIMIT_S) -> None:
        self.results: dict[str, dict] = {}
        self._folder, self._limits = folder, (script_limit_s, start_limit_s)
        self._runners: list[_Runner] = []
        self._runner_of: dict[str, _Runner] = {}
        for i in range(workers):
            self._add(paths[i::workers])

    def _add(self, paths: list[str]) -> _Runner:
        runner = _Runner(paths, self._folder / f"runner-{len(self._runners)}.err", *self._limits)
        if paths:
            runner.start()  # all at once: the runners import torch side by side
        self._runners.append(runner)
        self._runner_of.update(dict.fromkeys(paths, runner))
        return runner

    def result(self, path: str) -> dict:
        """The guard's result for one example (run on its own if it was not in the list)."""
        runner = self._runner_of.get(path) or self._add([path])
        while path not in self.results:
            runner.advance(self.results)
        return self.results[path]

    def close(self) -> None:
        """Stop every runner still at work (after a failure, ``-x`` or an interrupt)."""
        for runner in self._runners:
            runner.stop()


@pytest.fixture(scope="module")
def guard_runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GuardRuns]:
    """The runnable examples of the selected ``test_example_under_guard`` items, run lazily."""
    selected = [item.callspec.params["path"] for item in request.session.items
                if item.module is request.module and getattr(item, "originalname", None) == "test_example_under_guard"]
    runs = GuardRuns([str(p) for p in selected if _runnable(p) is None], tmp_path_factory.mktemp("guard"))
    yield runs
    runs.close()


@pytest.mark.parametrize("path", EXAMPLES, ids=_id)
def test_example_under_guard(path: Path, guard_runs: GuardRuns) -> None:
    reason = _runnable(path)
    if reason:
        pytest.skip(reason)
    result = guard_runs.result(str(path))
    expected = {code for code, _ in _marks(path)}
    if path.name.startswith("bad_") and expected and expected <= set(STATIC_ONLY) \
            and str(result.get("error", "")).startswith("nothing probed"):
        # its rules are read from the code only, and its bug stops training before any forward
        # (Lightning's "closure hasn't been executed"): there is nothing for the guard to watch
        pytest.skip("static rules only, and no forward ran under the guard")
    assert "error" not in result, result.get("error")
    assert result["leftover_hooks"] == 0
    found = set(result["codes"])
    if path.name.startswith("good_"):
        assert found == set()
        return
    for code, check in RUNTIME_CHECKS.items():
        if check.needs == "events":  # observable in any loop: the card must say so
            status = result["checks"][code]
            if code == "ACC201" and "needs A + 3" in status:  # too few microbatches probed (an update every one)
                assert status.startswith("not observable: "), status
                continue
            assert status == "checked", code
    observable = {code for code in expected if result["checks"].get(code) == "checked"}
    assert observable <= found, f"expected {sorted(observable)} (of marks {sorted(expected)}), got {sorted(found)}"
    admitted = expected.union(*(SAME_EVIDENCE.get(code, set()) for code in expected))
    assert found <= admitted, f"unmarked findings {sorted(found - admitted)}"


def test_every_event_code_with_a_folder_is_exercised() -> None:
    """Each code the guard sees in any loop is reproduced by at least one runnable bad example."""
    folders = {p.parent.name.split("-")[0] for p in EXAMPLES}
    marked = {code for p in EXAMPLES if p.name.startswith("bad_") and _runnable(p) is None for code, _ in _marks(p)}
    for code, check in RUNTIME_CHECKS.items():
        if check.needs == "events" and code in folders:
            assert code in marked, code


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped by its parent, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc")
def test_an_example_past_its_limit_fails_alone_and_leaves_no_process(tmp_path: Path) -> None:
    """An example that sleeps past its limit (with a child of its own) gets a time-out as its result;
    the runner and the child are killed, and a new runner gives the next example its result."""
    pids = tmp_path / "pids"
    sleeper = tmp_path / "sleeper.py"
    sleeper.write_text(
        "import os, subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{child.pid}}')\n"
        "time.sleep(120)\n", encoding="utf-8")
    quick = tmp_path / "quick.py"
    quick.write_text("print('no training loop here')\n", encoding="utf-8")
    runs = GuardRuns([str(sleeper), str(quick)], tmp_path, workers=1, script_limit_s=5)
    try:
        assert runs.result(str(sleeper)) == {"error": "timed out: no result within 5 s"}
        runner_pid, child_pid = map(int, pids.read_text().split())
        assert not _alive(runner_pid) and not _alive(child_pid)
        assert runs.result(str(quick))["error"].startswith("nothing probed")
    finally:
        runs.close()
    assert not any(_alive(pid) for pid in (runner_pid, child_pid))
