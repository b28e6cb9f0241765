"""What many test modules share: a snippet's findings and model, a project tree's findings, a file
written, the result cache's entry and clock, and the launcher of a group of worker processes (the
guard's DDP and FSDP tests). The CLI run in-process is in ``cli_helpers``; where the inputs live
(the repository, ``tests/data``, ``../shared``) in ``shared_data``."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterable
from pathlib import Path

import libcst as cst
import pytest

from accumlint.checks import ALL_RULES
from accumlint.model import FileModel, build_model
from accumlint.pipeline.engine import FileResult, check_source, rules_for
from accumlint.run import cache, runner
from accumlint.run.cache import ResultCache
from accumlint.settings import config
from accumlint.settings.config import Settings
from accumlint.spec.findings import LoopVerdict

#: every rule's code (``--select ALL``)
EVERY_CODE = frozenset(config.known_codes())
#: the rules on by default (what ``accumlint check`` runs without ``--select``)
DEFAULT_RULES = rules_for(rule.code for rule in ALL_RULES if rule.default_enabled)


def check(source: str, select: str | None = None) -> FileResult:
    """A dedented snippet checked as ``snippet.py``: the default rule set, or the codes in ``select``
    (comma-separated, as ``--select``; off-by-default rules need it; ``"ALL"``: every rule)."""
    codes = sorted(config.known_codes()) if select == "ALL" else (select or "").split(",")
    rules = DEFAULT_RULES if select is None else rules_for(codes)
    return check_source("snippet.py", textwrap.dedent(source).encode(), rules)


def lint(source: str, select: str | None = None) -> list[tuple[str, int]]:
    """(code, line) findings of a dedented snippet, the rules chosen as in :func:`check`."""
    return [(f.code, f.line) for f in check(source, select).findings]


def lint_codes(source: str, select: str = "ALL") -> list[str]:
    """The sorted codes of :func:`lint`'s findings (every rule by default)."""
    return sorted(code for code, _ in lint(source, select))


def line_of(source: str, needle: str) -> int:
    """The 1-based line of the one line of ``source`` (as :func:`lint` numbers it) holding ``needle``."""
    hits = [n for n, text in enumerate(source.split("\n"), start=1) if needle in text]
    assert len(hits) == 1, hits
    return hits[0]


def model_of(source: str) -> FileModel:
    """The group model of a dedented snippet."""
    return build_model(cst.parse_module(textwrap.dedent(source)))


def cadences(source: str) -> list[tuple[str, str, str]]:
    """(event kind, method, cadence) of every event of a snippet's one group."""
    model = model_of(source)
    (group,) = model.loops
    return [(e.kind.name, e.method, group.cadence(e).name) for e in group.events]


def tree(root: Path, files: dict[str, str]) -> list[str]:
    """Write ``files`` (relative path → dedented source) under ``root`` and return their paths."""
    paths = []
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
        paths.append(str(path))
    return sorted(paths)


def findings(root: Path, files: dict[str, str], cache: ResultCache | None = None) -> list[tuple[str, str, int]]:
    """(path relative to ``root``, code, line) of every finding of a project tree, every rule selected."""
    paths = tree(root, files)
    run = runner.check_files(paths, Settings(project_root=root), EVERY_CODE, jobs=1, cache=cache)
    assert run.errors == []
    return sorted((os.path.relpath(f.path, root), f.code, f.line) for f in run.findings)


def one(tmp_path: Path, source: str) -> list[tuple[str, int]]:
    """(code, line) of every finding of one file, ``train.py``, checked as a project (every rule)."""
    return [(code, line) for _, code, line in findings(tmp_path, {"train.py": source})]


def only_message(source: str, code: str) -> str:
    """The message of the one finding of rule ``code`` on a dedented snippet; ``AssertionError``
    unless there is exactly one."""
    found = check_source("s.py", textwrap.dedent(source).encode(), rules_for([code])).findings
    assert len(found) == 1, found
    return found[0].message


def write(path: Path, text: str) -> Path:
    """``text`` written to ``path`` (UTF-8), its folders made first; returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def cache_file(project: Path) -> Path:
    """The one result-cache entry file under ``project``'s cache folder; ``ValueError`` unless one."""
    (file,) = (project / cache.CACHE_DIR_NAME).glob("*/*.json")
    return file


def later(monkeypatch: pytest.MonkeyPatch) -> None:
    """The clock moved on (10 s): files written now count as changed long before their read (their
    signatures are kept)."""
    real = cache._now_ns
    monkeypatch.setattr(cache, "_now_ns", lambda: real() + 10 * 10**9)


def free_port() -> int:
    """A TCP port free on the loopback now (for a gloo group's rendezvous)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_ranks(worker: Path, prefix: Path, world_size: int = 2, *, limit_s: float = 300,
              env: dict[str, str] | None = None) -> list[dict]:
    """``worker PREFIX`` in ``world_size`` processes (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``,
    ``MASTER_PORT`` set; ``env`` added), each writing ``PREFIX.<rank>.json``: their results by rank.

    The group has ``limit_s`` seconds in all: a hang anywhere fails the test instead of blocking the
    run, and no worker outlives the call (a rank that failed may leave the others waiting on it)."""
    base = dict(os.environ, WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
                **(env or {}))
    procs = [subprocess.Popen([sys.executable, str(worker), str(prefix)], env=dict(base, RANK=str(rank)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for rank in range(world_size)]
    deadline = time.monotonic() + limit_s
    try:
        for proc in procs:
            _, err = proc.communicate(timeout=max(0.1, deadline - time.monotonic()))
            assert proc.returncode == 0, err[-3000:]
    except subprocess.TimeoutExpired:
        pytest.fail(f"the {world_size}-rank run of {worker.name} did not finish within {limit_s} s: something hangs")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    return [json.loads(Path(f"{prefix}.{rank}.json").read_text()) for rank in range(world_size)]


def loop_reasons(loops: Iterable[LoopVerdict]) -> list[tuple[str, ...]]:
    """The undecided reasons of each accumulation loop a check counted (empty: decided)."""
    return [loop.reasons for loop in loops]
