"""Hostile inputs through the command line (issue 7): every file gets ACC000 or a clear error
line, the exit status is 1 (never a traceback), and every other file of the run is checked."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import Result

from accumlint.pipeline import engine
from accumlint.pipeline.run_context import RunContext
from accumlint.run import pool, runner
from tests.cli_helpers import ACC001_LOOP, cli
from tests.shared_data import REPO

BUGGY = ACC001_LOOP
MARKER = b"for b in loader: loss.backward()\noptimizer.step()\n"  # a loop: every loop rule reads the file


def check(tmp_path: Path, hostile: dict[str, bytes], *extra: str) -> Result:
    """Run ``check`` on the hostile files plus two buggy files around them; assert that both
    buggy files were checked and that nothing raised."""
    (tmp_path / "a_first.py").write_bytes(BUGGY)
    (tmp_path / "z_last.py").write_bytes(BUGGY)
    for name, data in hostile.items():
        (tmp_path / name).write_bytes(data)
    os.chdir(tmp_path)
    result = cli("check", "--no-cache", "--output-format", "concise", *extra, ".")
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 1, (result.stdout, result.stderr)
    for name in ("a_first.py", "z_last.py"):
        assert f"{name}:3:5: ACC001" in result.stdout
    return result


def acc000(result: Result, name: str) -> str:
    lines = [line for line in result.stdout.splitlines() if line.startswith(f"{name}:") and "ACC000" in line]
    assert len(lines) == 1, result.stdout
    return lines[0]


@pytest.fixture(autouse=True)
def _cwd(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(os.getcwd())  # check() changes directory; restore it


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"def f(:\n" + MARKER, "1:7: ACC000 file could not be checked: syntax error: invalid syntax"),
        (MARKER + b"x = '\xff'\n", "3:6: ACC000 file could not be checked: undecodable bytes"),
        (b"# -*- coding: nope -*-\n" + MARKER, "1:1: ACC000 file could not be checked: unknown encoding: nope"),
        (b"# coding: ascii\n" + MARKER + "x = 'é'\n".encode(), "4:6: ACC000 file could not be checked: undecodable"),
        (MARKER + b"x = 1\x00\n", "ACC000 file could not be checked: syntax error: source code string cannot"),
        (b"if x:\n\tloss.backward()\n        opt.step()\n", "3:1: ACC000 file could not be checked: syntax"),
        (os.urandom(2048).replace(b"\n", b"") + b"\xff" + MARKER, "ACC000 file could not be checked: undecodable"),
    ],
    ids=["syntax", "undecodable", "unknown-coding", "wrong-coding", "null-byte", "mixed-tabs", "binary"],
)
def test_a_broken_file_is_acc000_and_the_others_are_checked(tmp_path: Path, data: bytes, reason: str) -> None:
    result = check(tmp_path, {"hostile.py": data})
    assert reason in acc000(result, "hostile.py")


def test_a_broken_file_without_markers_is_skipped_unparsed(tmp_path: Path) -> None:
    result = check(tmp_path, {"broken.py": b"def f(:\n", "binary.py": os.urandom(512).replace(b"(", b"")})
    assert "broken.py" not in result.stdout and "binary.py" not in result.stdout
    # a syntax check (ACC000 alone) parses every file
    os.chdir(tmp_path)
    syntax = cli("check", "--no-cache", "--output-format", "concise", "--select", "ACC000", "broken.py")
    assert syntax.stdout.startswith("broken.py:1:7: ACC000")


@pytest.mark.parametrize(
    "data",
    [
        b"\xef\xbb\xbf" + BUGGY,
        BUGGY.replace(b"\n", b"\r\n"),
        BUGGY.replace(b"\n", b"\r"),
        BUGGY.replace(b"    ", b"\t"),
        b"\x0c" + BUGGY.replace(b"    loss.backward()\n", b"    loss.backward()\n\x0c\n"),
    ],
    ids=["bom", "crlf", "cr", "tabs", "form-feed"],
)
def test_odd_but_valid_files_are_checked(tmp_path: Path, data: bytes) -> None:
    result = check(tmp_path, {"odd.py": data})
    assert "odd.py:3:" in result.stdout and "ACC001" in result.stdout
    assert "ACC000" not in result.stdout


def test_pep_695_generics_on_the_running_interpreter(tmp_path: Path) -> None:
    """3.12 syntax: LibCST reads it on any interpreter, so a training loop in such a file is
    checked; the syntax check (``--select ACC000``) follows the running interpreter."""
    data = b"class Box[T]:\n    pass\n\ntype Alias = list[int]\n\n" + BUGGY
    result = check(tmp_path, {"generic.py": data})
    assert "generic.py:8:5: ACC001" in result.stdout
    syntax = cli("check", "--no-cache", "--output-format", "concise", "--select", "ACC000", "generic.py")
    if sys.version_info >= (3, 12):
        assert syntax.exit_code == 0
    else:
        assert syntax.stdout.startswith("generic.py:1:10: ACC000 file could not be checked: syntax error")


def test_empty_files(tmp_path: Path) -> None:
    result = check(tmp_path, {"empty.py": b"", "blank.py": b"\n\n", "__init__.py": b""})
    assert "empty.py" not in result.stdout and "blank.py" not in result.stdout


def test_5000_deep_nested_expression(tmp_path: Path) -> None:
    deep = b"x = " + b"(" * 5000 + b"1" + b")" * 5000 + b"\n"
    brackets = b"x = " + b"[" * 5000 + b"]" * 5000 + b"\n"
    unary = b"x = " + b"-" * 5000 + b"1\n"
    negations = b"x = " + b"not " * 3000 + b"1\n"  # small files: only the byte check sends them to `ast`
    lambdas = b"x = " + b"lambda: " * 3000 + b"1\n"
    files = {"deep.py": deep, "brackets.py": brackets, "unary.py": unary, "not.py": negations, "lambda.py": lambdas}
    result = check(tmp_path, {name: MARKER + source for name, source in files.items()})
    assert "syntax error: too many nested parentheses" in acc000(result, "deep.py")
    assert "syntax error: too many nested parentheses" in acc000(result, "brackets.py")
    for name in ("unary.py", "not.py", "lambda.py"):  # the interpreter gives up on these too
        assert "nesting too deep" in acc000(result, name)


def test_a_chain_of_thousands_of_operands_in_a_large_file(tmp_path: Path) -> None:
    """LibCST's parser recurses once per operand of ``a and b and ...`` (the interpreter keeps
    the chain flat): a large file holding such a chain is reported, not parsed."""
    boolean = b"x = " + b" and ".join([b"a"] * 12_000) + b"\n"
    comparison = b"x = " + b" < ".join([b"a"] * 20_000) + b"\n"
    assert min(len(boolean), len(comparison)) >= engine.INTERPRETER_FIRST_ABOVE
    result = check(tmp_path, {"boolean.py": MARKER + boolean, "comparison.py": MARKER + comparison})
    for name in ("boolean.py", "comparison.py"):
        assert f"an expression of more than {engine.MAX_CHAIN} operands" in acc000(result, name)


def test_20_mb_file(tmp_path: Path) -> None:
    line = b"x = [1, 2, 3]  # padding padding padding padding padding\n"
    big = MARKER + line * (20 * 2**20 // len(line))
    result = check(tmp_path, {"big.py": big, "big_plain.py": line * (20 * 2**20 // len(line))})
    assert "file too large to parse (20.0 MiB > 4 MiB)" in acc000(result, "big.py")
    # read no further than the limit: whether a rule could fire there is unknown, so it is said
    assert "file too large to parse (20.0 MiB > 4 MiB)" in acc000(result, "big_plain.py")


def test_a_sparse_8_gib_file_is_not_read_to_its_end(tmp_path: Path) -> None:
    with open(tmp_path / "huge.py", "wb") as handle:
        handle.write(MARKER)
        handle.truncate(8 * 2**30)  # sparse: no disk, but reading it whole would take minutes and 8 GiB
    result = check(tmp_path, {})
    assert "file too large to parse (8192.0 MiB > 4 MiB)" in acc000(result, "huge.py")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
@pytest.mark.parametrize("jobs", ["1", "2"])
def test_fifos_and_devices_are_skipped_with_a_note(tmp_path: Path, jobs: str) -> None:
    """Reproduction: a FIFO named `*.py` made the run wait forever; a symlink to /dev/zero read
    3 GB in 20 s before the size limit was looked at."""
    os.mkfifo(tmp_path / "pipe.py")
    os.symlink("/dev/zero", tmp_path / "zero.py")
    result = check(tmp_path, {}, "--jobs", jobs)
    notes = [line for line in result.stderr.splitlines() if line.startswith("note:")]
    assert notes == [
        "note: pipe.py: skipped: a FIFO, not a regular file",
        "note: zero.py: skipped: a character device, not a regular file",
    ]
    assert "pipe.py" not in result.stdout and "zero.py" not in result.stdout
    explicit = cli("check", "--no-cache", "--output-format", "concise", "pipe.py", "a_first.py")
    assert explicit.exit_code == 1 and "note: pipe.py: skipped: a FIFO" in explicit.stderr


def test_a_socket_is_skipped(tmp_path: Path) -> None:
    import socket

    server = socket.socket(socket.AF_UNIX)
    os.chdir(tmp_path)
    server.bind("sock.py")  # a relative name: the absolute one may be too long for AF_UNIX
    try:
        result = check(tmp_path, {})
        assert "note: sock.py: skipped: a socket, not a regular file" in result.stderr
    finally:
        server.close()


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")
def test_symlink_loops(tmp_path: Path) -> None:
    os.symlink("self.py", tmp_path / "self.py")
    (tmp_path / "sub").mkdir()
    os.symlink("..", tmp_path / "sub" / "up")
    result = check(tmp_path, {})
    assert "Too many levels of symbolic links" in acc000(result, "self.py")
    assert result.stdout.count("a_first.py:3:5") == 1  # the directory loop is walked once


def test_unreadable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_open = os.open

    def guarded(file: object, *args: object, **kwargs: object) -> object:
        if str(file).endswith("secret.py"):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", guarded)
    result = check(tmp_path, {"secret.py": BUGGY})
    assert acc000(result, "secret.py").endswith("file could not be read: Permission denied")


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root reads any file")
def test_unreadable_file_by_its_mode(tmp_path: Path) -> None:
    (tmp_path / "secret.py").write_bytes(BUGGY)
    (tmp_path / "secret.py").chmod(0)
    result = check(tmp_path, {})
    assert acc000(result, "secret.py").endswith("file could not be read: Permission denied")


def test_directory_named_like_a_python_file(tmp_path: Path) -> None:
    (tmp_path / "pkg.py").mkdir()
    (tmp_path / "pkg.py" / "inner.py").write_bytes(BUGGY)
    result = check(tmp_path, {})
    assert "pkg.py/inner.py:3:5: ACC001" in result.stdout
    os.chdir(tmp_path)
    explicit = cli("check", "--no-cache", "--output-format", "concise", "pkg.py", "a_first.py")
    assert explicit.exit_code == 1 and "pkg.py/inner.py:3:5: ACC001" in explicit.stdout


def test_file_that_vanishes_during_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import accumlint.cli.app as cli_module

    real = cli_module.discover

    def discover_then_delete(*args: object, **kwargs: object) -> list[str]:
        files = real(*args, **kwargs)  # type: ignore[arg-type]
        (tmp_path / "gone.py").unlink()
        return files

    monkeypatch.setattr(cli_module, "discover", discover_then_delete)
    result = check(tmp_path, {"gone.py": BUGGY})
    assert acc000(result, "gone.py").endswith("file could not be read: No such file or directory")


@pytest.mark.skipif(sys.platform != "linux", reason="bytes file names")
@pytest.mark.parametrize("output_format", ["concise", "json", "sarif", "junit", "github"])
def test_non_utf8_file_name(tmp_path: Path, output_format: str) -> None:
    (tmp_path / "a_first.py").write_bytes(BUGGY)
    with open(os.path.join(os.fsencode(tmp_path), b"caf\xe9.py"), "wb") as handle:
        handle.write(BUGGY)
    os.chdir(tmp_path)
    result = cli("check", "--no-cache", "--output-format", output_format, ".")
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 1
    assert "caf" in result.stdout and "a_first.py" in result.stdout


# --- a rule that crashes ------------------------------------------------------------


def _crashing_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    rule = next(r for r in engine.ALL_RULES_INSTANCES if r.code == "ACC003")
    real = type(rule).check

    def check(self: object, model: object) -> object:
        if model.module.code.startswith("# crash"):  # type: ignore[attr-defined]
            raise RuntimeError("boom")
        return real(self, model)  # type: ignore[arg-type]

    monkeypatch.setattr(type(rule), "check", check)


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_rule_crash_is_an_internal_error_for_that_file_and_rule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, jobs: str
) -> None:
    _crashing_rule(monkeypatch)
    result = check(tmp_path, {"m_crash.py": b"# crash\n" + BUGGY}, "--jobs", jobs)
    assert "m_crash.py:4:5: ACC001" in result.stdout  # the other rules still ran on it
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        "error: m_crash.py: internal error in ACC003 (RuntimeError('boom')); please report it with this file"
    ]


_REAL_CHECK = runner._check
_REAL_CHECK_IN_WORKER = runner._check_in_worker


def _dying(path: str, data: bytes, codes: frozenset[str], context: RunContext) -> engine.FileResult:
    if path.endswith("killer.py"):
        os._exit(9)  # what a segmentation fault in native code does to the worker
    return _REAL_CHECK(path, data, codes, context)


def _dying_in_worker(
    path: str, data: bytes, codes: frozenset[str], screened: engine.Screened | None, *, context: RunContext
) -> engine.FileResult | engine.Screened:
    if path.endswith("killer.py") and screened is not None:
        os._exit(9)  # in the LibCST stage, where native code runs
    return _REAL_CHECK_IN_WORKER(path, data, codes, screened, context=context)


def test_a_worker_that_dies_loses_only_its_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "_check_in_worker", _dying_in_worker)
    monkeypatch.setattr(runner, "_check", _dying)  # and again when it is checked alone
    result = check(tmp_path, {"killer.py": BUGGY, "m_ok.py": BUGGY}, "--jobs", "2")
    assert "m_ok.py:3:5: ACC001" in result.stdout
    assert [line for line in result.stderr.splitlines() if "internal error" in line] == [
        "error: killer.py: internal error: the process checking this file died (A process in the process pool was "
        "terminated abruptly while the future was running or pending.); please report it"
    ]


# --- issue 19: notebooks, the time budget, a crash in a worker ---------------------------

CELL = '{"cell_type": "code", "source": "loss.backward()\\n"}'


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        ('{"cells": [' + CELL + ", " + "[" * 100_000 + "]" * 100_000 + "]}", "not a notebook: JSON nested too deep"),
        (
            '{"cells": [' + CELL + '], "n": ' + "9" * 5000 + "}",
            "not a notebook: Exceeds the limit (4300 digits) for integer string conversion",
        ),
        (
            '{"cells": [{"cell_type": "code", "source": "loss.backward()\\nx = 1\\ud800"}]}',
            "cell 1, line 2: '\\ud800' is not a character",
        ),
    ],
    ids=["deep-json", "5000-digits", "lone-surrogate"],
)
@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_hostile_notebook_is_acc000(tmp_path: Path, data: str, reason: str, jobs: str) -> None:
    result = check(tmp_path, {"hostile.ipynb": data.encode()}, "--jobs", jobs)
    assert f"hostile.ipynb:1:1: ACC000 file could not be checked: {reason}" in acc000(result, "hostile.ipynb")


def _slow_in_worker(
    path: str, data: bytes, codes: frozenset[str], screened: engine.Screened | None, *, context: RunContext
) -> engine.FileResult | engine.Screened:
    if path.endswith("slow.py"):
        import time

        time.sleep(60)  # what LibCST does on a 60 KB chain of ternaries (> 180 s)
    return _REAL_CHECK_IN_WORKER(path, data, codes, screened, context=context)


@pytest.mark.parametrize("files", [{"slow.py": BUGGY}, {"slow.py": BUGGY, **{f"m{i}.py": BUGGY for i in range(6)}}])
def test_a_file_past_the_time_budget_is_acc000_and_the_others_go_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, files: dict[str, bytes]
) -> None:
    monkeypatch.setattr(runner, "_check_in_worker", _slow_in_worker)
    result = check(tmp_path, files, "--jobs", "2", "--parse-timeout", "1.5")
    late = "ACC000 file could not be checked: took too long to parse (more than 1.5 s)"
    assert acc000(result, "slow.py").endswith(late)
    for name in files:
        if name != "slow.py":
            assert f"{name}:3:5: ACC001" in result.stdout


def test_the_time_budget_from_the_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "_check_in_worker", _slow_in_worker)
    (tmp_path / "pyproject.toml").write_text("[tool.accumlint]\nparse-timeout = 1\n", encoding="utf-8")
    result = check(tmp_path, {"slow.py": BUGGY})
    assert acc000(result, "slow.py").endswith("took too long to parse (more than 1 s)")


def test_a_chain_of_calls_libcst_takes_seconds_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reproduction: LibCST took more than 180 s on a 60 KB chain of conditional expressions (now
    out of memory first: tests/engine/test_bounded.py); a chain of 2,000 calls takes it 6 s in 50 MB."""
    monkeypatch.setattr(pool, "load_factor", lambda: 1.0)  # the budget of a quiet machine, whatever the load
    chain = b"x = f" + b"(1)" * 2000 + b"\n"  # 6 KB: LibCST needs far more than 2 s
    result = check(tmp_path, {"calls.py": MARKER + chain}, "--parse-timeout", "2")
    assert acc000(result, "calls.py").endswith("took too long to parse (more than 2 s)")


def _raising_in_worker(
    path: str, data: bytes, codes: frozenset[str], screened: engine.Screened | None, *, context: RunContext
) -> engine.FileResult | engine.Screened:
    if path.endswith("raises.py"):
        raise RecursionError("maximum recursion depth exceeded")
    return _REAL_CHECK_IN_WORKER(path, data, codes, screened, context=context)


def _raising(path: str, data: bytes, codes: frozenset[str], context: RunContext) -> engine.FileResult:
    if path.endswith("raises.py"):
        raise RecursionError("maximum recursion depth exceeded")
    return _REAL_CHECK(path, data, codes, context)


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_an_exception_in_a_files_check_is_a_one_line_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, jobs: str
) -> None:
    monkeypatch.setattr(runner, "_check_in_worker", _raising_in_worker)
    monkeypatch.setattr(runner, "_check", _raising)
    result = check(tmp_path, {"raises.py": BUGGY, "m_ok.py": BUGGY}, "--jobs", jobs)
    assert "m_ok.py:3:5: ACC001" in result.stdout
    assert [line for line in result.stderr.splitlines() if line.startswith("error:")] == [
        "error: raises.py: internal error: RecursionError: maximum recursion depth exceeded; please report it"
    ]


# --- issue 28: committed links to devices, FIFOs, stdin: bounded reads; silence ---------------

#: a run's address space: reading a committed link to /dev/zero to its end ran past it (6 GB in 20 s)
MEMORY_CAP = 2 * 2**30
DEVICE_KINDS = {"zero": "a character device", "stdin": "a FIFO", "fifo": "a FIFO"}


def _capped() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def _hostile_node(path: Path, kind: str) -> None:
    """``path`` made a link to ``/dev/zero`` or ``/dev/stdin`` (a pipe nobody writes to), or a FIFO."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    else:
        os.symlink(f"/dev/{kind}", path)


def run_check(cwd: Path, *args: str, stdin: int | None = None) -> subprocess.CompletedProcess[str]:
    """``accumlint check --no-cache --output-format concise ARGS`` in a process of its own, whose
    stdin is a pipe nobody writes to (``/dev/stdin`` blocks) unless ``stdin`` is given; it must end
    within 60 s and :data:`MEMORY_CAP`."""
    read_end, write_end = os.pipe()
    try:
        return subprocess.run(
            [sys.executable, "-m", "accumlint", "check", "--no-cache", "--output-format", "concise", *args],
            cwd=cwd,
            stdin=read_end if stdin is None else stdin,
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1"},
            preexec_fn=_capped,
            check=False,
        )
    finally:
        os.close(read_end)
        os.close(write_end)


def _buggy_tree(tmp_path: Path) -> None:
    for name in ("a_first.py", "sub/m_middle.py", "z_last.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(BUGGY)
    (tmp_path / ".git" / "info").mkdir(parents=True)  # a work tree: its ignore files are read


def _all_checked(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    for name in ("a_first.py", "sub/m_middle.py", "z_last.py"):
        assert f"{name}:3:5: ACC001" in done.stdout, (done.stdout, done.stderr)


@pytest.mark.skipif(not hasattr(os, "mkfifo") or not os.path.exists("/dev/zero"), reason="needs FIFOs and devices")
@pytest.mark.parametrize("kind", sorted(DEVICE_KINDS))
@pytest.mark.parametrize("ignore_file", [".gitignore", "sub/.gitignore", ".git/info/exclude"])
def test_an_ignore_file_that_is_a_device_or_a_fifo_is_not_used(tmp_path: Path, ignore_file: str, kind: str) -> None:
    """Reproduction: a committed `.gitignore -> /dev/zero` (any folder) or `.git/info/exclude ->
    /dev/zero` read 6 GB in 20 s; a FIFO one, or one linked to /dev/stdin, hung the run."""
    _buggy_tree(tmp_path)
    _hostile_node(tmp_path / ignore_file, kind)
    done = run_check(tmp_path, ".")
    _all_checked(done)
    warning = f"warning: {ignore_file}: ignore file not used: {DEVICE_KINDS[kind]}, not a regular file"
    assert done.stderr.splitlines().count(warning) == 1, done.stderr


def test_an_ignore_file_too_large_is_not_used(tmp_path: Path) -> None:
    _buggy_tree(tmp_path)
    with open(tmp_path / ".gitignore", "wb") as handle:
        handle.write(b"z_last.py\n")
        handle.truncate(8 * 2**30)  # sparse: read whole, it would take 8 GiB
    (tmp_path / "sub" / ".gitignore").write_bytes(b"ignored.py\n")  # the others still apply
    (tmp_path / "sub" / "ignored.py").write_bytes(BUGGY)
    done = run_check(tmp_path, ".")
    _all_checked(done)
    assert "warning: .gitignore: ignore file not used: larger than 1 MiB (8192.0 MiB)" in done.stderr.splitlines()
    assert "ignored.py" not in done.stdout


@pytest.mark.skipif(not hasattr(os, "mkfifo") or not os.path.exists("/dev/zero"), reason="needs FIFOs and devices")
@pytest.mark.parametrize("kind", sorted(DEVICE_KINDS))
def test_a_pyproject_that_is_a_device_or_a_fifo_is_a_config_error(tmp_path: Path, kind: str) -> None:
    """Reproduction: a `pyproject.toml` linked to /dev/zero, /dev/stdin or a FIFO must not hang the
    run: it is a configuration error for that file, which names it and says why."""
    _buggy_tree(tmp_path)
    _hostile_node(tmp_path / "sub" / "pyproject.toml", kind)
    done = run_check(tmp_path, ".")
    assert done.returncode in (1, 2) and "Traceback" not in done.stderr, (done.stdout, done.stderr)
    reason = f"sub{os.sep}pyproject.toml: config file not read: {DEVICE_KINDS[kind]}, not a regular file"
    assert reason in done.stdout + done.stderr, (done.stdout, done.stderr)


def test_a_sparse_8_gib_pyproject_is_a_config_error(tmp_path: Path) -> None:
    _buggy_tree(tmp_path)
    with open(tmp_path / "sub" / "pyproject.toml", "wb") as handle:
        handle.write(b"[tool.accumlint]\n")
        handle.truncate(8 * 2**30)
    done = run_check(tmp_path, ".")
    assert done.returncode in (1, 2) and "Traceback" not in done.stderr, (done.stdout, done.stderr)
    assert "pyproject.toml: config file not read: larger than 1 MiB (8192.0 MiB)" in done.stdout + done.stderr


@pytest.mark.skipif(not hasattr(os, "mkfifo") or not os.path.exists("/dev/zero"), reason="needs FIFOs and devices")
def test_a_notebook_that_is_a_device_or_a_fifo_is_skipped_with_a_note(tmp_path: Path) -> None:
    _buggy_tree(tmp_path)
    for kind in DEVICE_KINDS:
        _hostile_node(tmp_path / f"{kind}.ipynb", kind)
    with open(tmp_path / "huge.ipynb", "wb") as handle:
        handle.write(b'{"cells": []}')
        handle.truncate(8 * 2**30)
    done = run_check(tmp_path, ".")
    _all_checked(done)
    notes = [line for line in done.stderr.splitlines() if line.startswith("note:")]
    assert notes == [
        f"note: {kind}.ipynb: skipped: {DEVICE_KINDS[kind]}, not a regular file" for kind in ("fifo", "stdin", "zero")
    ]
    assert "huge.ipynb:1:1: ACC000 file could not be checked: file too large to parse (8192.0 MiB > 128 MiB)" in (
        done.stdout
    )


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_stdin_is_read_with_a_bound(tmp_path: Path) -> None:
    """Reproduction: `accumlint check - < /dev/zero` read 6.2 GB."""
    with open("/dev/zero", "rb") as zero:
        done = run_check(tmp_path, "-", stdin=zero.fileno())
        assert done.returncode == 1, (done.stdout, done.stderr)
        assert done.stdout.startswith(
            "-:1:1: ACC000 file could not be checked: file too large to parse (more than 4 MiB)\n"
        ), done.stdout
        fixed = run_check(tmp_path, "--fix", "-", stdin=zero.fileno())
    assert (fixed.returncode, fixed.stdout) == (2, "")  # not a prefix of the source as if it were the whole
    assert fixed.stderr == "error: -: stdin not fixed: larger than 4 MiB\n"


def test_an_unreadable_directory_is_named_on_stderr(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reproduction: a directory that could not be listed was skipped without a word."""
    real_scandir = os.scandir

    def guarded(path: object = ".") -> object:
        if os.fspath(path).endswith("locked"):  # type: ignore[arg-type]
            raise PermissionError(13, "Permission denied", os.fspath(path))  # type: ignore[arg-type]
        return real_scandir(path)  # type: ignore[arg-type]

    (tmp_path / "locked").mkdir()
    (tmp_path / "locked" / "hidden.py").write_bytes(BUGGY)
    monkeypatch.setattr(os, "scandir", guarded)
    result = check(tmp_path, {})
    assert "warning: locked: directory not checked: Permission denied" in result.stderr.splitlines()


def test_an_explicit_unreadable_file_is_acc000(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reproduction: a file named on the command line that cannot be read was a usage error (exit 2,
    nothing checked); it is the file's ACC000 with the reason, and the other files are checked."""
    real_open, real_access = os.open, os.access

    def denied(path: object) -> bool:
        return os.fspath(path).endswith("secret.py")  # type: ignore[arg-type]

    def guarded_open(file: object, *args: object, **kwargs: object) -> object:
        if denied(file):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", guarded_open)
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: not denied(path) and real_access(path, mode, **kw))
    (tmp_path / "secret.py").write_bytes(BUGGY)
    (tmp_path / "a_first.py").write_bytes(BUGGY)
    os.chdir(tmp_path)
    result = cli("check", "--no-cache", "--output-format", "concise", "secret.py", "a_first.py")
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert acc000(result, "secret.py").endswith("file could not be read: Permission denied")
    assert "a_first.py:3:5: ACC001" in result.stdout


def _nobody_can_run_python() -> bool:
    """Whether this root process can run the interpreter (and this checkout) as uid 65534."""
    if os.name != "posix" or os.geteuid() != 0 or not shutil.which("setpriv"):
        return False
    done = subprocess.run(
        [*NOBODY, sys.executable, "-c", "import accumlint.cli.app, libcst"],  # the packages too (CI's venv is 0700)
        capture_output=True,
        check=False,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=60,
    )
    return done.returncode == 0


NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def test_unreadable_by_their_mode_as_another_user(tmp_path: Path) -> None:
    """The same two, for real: as root, a mode of 000 does not stop a read, so the run is another uid's."""
    if not _nobody_can_run_python():
        pytest.skip("needs root, setpriv, and an interpreter that uid 65534 may run")
    tmp_path.chmod(0o755)
    for name in ("a_first.py", "secret.py", "locked/hidden.py"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes(BUGGY)
    (tmp_path / "secret.py").chmod(0)
    (tmp_path / "locked").chmod(0)
    done = subprocess.run(
        [
            *NOBODY,
            sys.executable,
            "-m",
            "accumlint",
            "check",
            "--no-cache",
            "--output-format",
            "concise",
            ".",
            "secret.py",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "PYTHONPATH": str(REPO), "HOME": str(tmp_path)},
    )
    (tmp_path / "locked").chmod(0o755)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "a_first.py:3:5: ACC001" in done.stdout
    assert "secret.py:1:1: ACC000 file could not be read: Permission denied" in done.stdout
    assert "warning: locked: directory not checked: Permission denied" in done.stderr.splitlines()


@pytest.mark.skipif(sys.platform != "linux", reason="PATH_MAX of 4096 bytes")
def test_paths_past_path_max_are_reported(tmp_path: Path) -> None:
    """Reproduction: a directory deeper than PATH_MAX was skipped silently. A folder past it is
    named in a warning; a file whose path passes it gets ACC000."""
    os.chdir(tmp_path)
    for level in range(21):  # 200-byte names: the 21st folder's path passes 4096 bytes
        name = f"{level:02d}" + "d" * 198
        os.mkdir(name)
        os.chdir(name)
        if level == 19:
            with open("f" * 120 + ".py", "wb") as handle:  # in a folder that lists, past PATH_MAX itself
                handle.write(BUGGY)
        if level == 20:
            with open("bug.py", "wb") as handle:
                handle.write(BUGGY)
    result = check(tmp_path, {})
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and warnings[0].endswith(
        "d/20" + "d" * 198 + ": directory not checked: File name too long"
    ), warnings
    long_file = "/".join(f"{level:02d}" + "d" * 198 for level in range(20)) + "/" + "f" * 120 + ".py"
    assert acc000(result, long_file).endswith(":1:1: ACC000 file could not be read: File name too long")
