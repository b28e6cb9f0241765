"""``--fix`` never corrupts a file (issue 7 item 3): atomic replace, mode and line endings kept,
a file changed meanwhile refused, a kill during the write leaves the old or the new bytes.

A kill between the temporary file's creation and the rename leaves an orphan named
``.<file>.<pid>.<random>.accumlint-tmp`` next to the file: not a ``.py`` name, so never checked,
and the next ``--fix`` or ``--add-noqa`` run removes it (tests/report/test_safe_writer.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from accumlint.run import apply_fixes as apply
from tests.cli_helpers import ACC001_LOOP, cli
from tests.shared_data import REPO

BUGGY = ACC001_LOOP


def test_fix_keeps_mode_and_crlf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    target = tmp_path / "train.py"
    target.write_bytes(BUGGY.replace(b"\n", b"\r\n"))
    target.chmod(0o751)
    result = cli("check", "--no-cache", "--fix", "train.py")
    fixed = target.read_bytes()
    assert fixed != BUGGY.replace(b"\n", b"\r\n"), result.stdout
    assert fixed.count(b"\r\n") == fixed.count(b"\n")
    assert oct(target.stat().st_mode & 0o777) == oct(0o751)
    assert [p.name for p in tmp_path.iterdir()] == ["train.py"]


def test_fix_refuses_a_file_changed_since_it_was_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    target = tmp_path / "train.py"
    target.write_bytes(BUGGY)
    real = apply.fix_source

    def edit_meanwhile(*args: object, **kwargs: object) -> apply.FixResult:
        result = real(*args, **kwargs)  # type: ignore[arg-type]
        target.write_bytes(BUGGY + b"# edited by the user\n")
        return result

    monkeypatch.setattr(apply, "fix_source", edit_meanwhile)
    result = cli("check", "--no-cache", "--fix", "train.py")
    assert target.read_bytes() == BUGGY + b"# edited by the user\n"
    assert "error: train.py: not fixed: the file changed while it was being fixed" in result.stderr
    assert result.exit_code == 1  # the finding is still there


def test_a_fix_that_does_not_parse_is_not_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from accumlint.fixes import base

    monkeypatch.chdir(tmp_path)
    target = tmp_path / "train.py"
    target.write_bytes(BUGGY)

    class Broken:
        applicability = base.SAFE

        @property
        def module(self) -> object:
            return type("M", (), {"code": "def broken(:\n    loss.backward()\n"})()

    monkeypatch.setitem(apply.FIXERS, "ACC001", (base.SAFE, lambda located: Broken()))
    cli("check", "--no-cache", "--fix", "train.py")
    assert target.read_bytes() == BUGGY


KILLED_DURING_WRITE = """
import sys, time
from accumlint.files import writing
real_write_all = writing._write_all
def half_then_wait(fd, data):
    real_write_all(fd, data[: len(data) // 2])
    print("writing", flush=True)   # half the new bytes are in the temp file
    time.sleep(60)
writing._write_all = half_then_wait
from accumlint.cli.app import main
sys.argv = ["accumlint", "check", "--no-cache", "--fix", sys.argv[1]]
main()
"""


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_a_kill_during_the_write_leaves_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "train.py"
    target.write_bytes(BUGGY)
    process = subprocess.Popen(
        [sys.executable, "-c", KILLED_DURING_WRITE, str(target)],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert process.stdout is not None
    assert process.stdout.readline() == b"writing\n"
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    assert target.read_bytes() == BUGGY  # old, never partial
    orphans = [p.name for p in tmp_path.iterdir() if p.name != "train.py"]
    assert orphans == [f".train.py.{process.pid}.{orphans[0].split('.')[-2]}.accumlint-tmp"]
    # the orphan is never checked, a second --fix completes and removes it (its process is gone)
    os.chdir(tmp_path)
    try:
        result = cli("check", "--no-cache", "--fix", ".")
    finally:
        os.chdir(REPO)
    assert target.read_bytes() != BUGGY and b"optimizer.zero_grad()" in target.read_bytes()
    assert ".accumlint-tmp" not in result.stdout
    assert [p.name for p in tmp_path.iterdir()] == ["train.py"]


# --- issue 19: the last look before the rename, symlinks out of the tree -------------------


@pytest.mark.parametrize("change", ["edit", "same-size-same-mtime", "touch", "replaced"])
def test_a_change_just_before_the_rename_is_not_overwritten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    """Reproduction: an edit saved after the "file changed?" comparison and before the rename was
    overwritten. The comparison now runs once the new bytes are on disk, just before the rename:
    the edit is made during the temporary file's fsync, the last step before it."""
    monkeypatch.chdir(tmp_path)
    target = tmp_path / "train.py"
    target.write_bytes(BUGGY)
    user = BUGGY.replace(b"loss", b"LOSS")  # the same size
    real_fsync = os.fsync

    def edit_during_fsync(fd: int) -> None:
        real_fsync(fd)
        before = target.stat()
        if change == "edit":
            target.write_bytes(BUGGY + b"# saved by the user\n")
        elif change == "same-size-same-mtime":  # only the bytes' hash can tell
            with open(target, "r+b") as handle:
                handle.write(user)
            os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
        elif change == "touch":
            os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000))
        else:  # an editor that saves by rename: same bytes, another inode
            (tmp_path / "saved.tmp").write_bytes(BUGGY)
            os.replace(tmp_path / "saved.tmp", target)

    monkeypatch.setattr(os, "fsync", edit_during_fsync)
    expected = {"edit": BUGGY + b"# saved by the user\n", "same-size-same-mtime": user}.get(change, BUGGY)
    result = cli("check", "--no-cache", "--fix", "train.py")
    assert target.read_bytes() == expected
    assert "error: train.py: not fixed: the file changed while it was being fixed" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.py"]  # the temporary file is gone


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")
def test_fix_does_not_write_through_a_symlink_out_of_the_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reproduction: `--fix` followed a symlinked file or folder out of the checked tree and
    rewrote its target (a cloned repository with `pre-commit` and `--fix`)."""
    outside = tmp_path / "outside"
    (outside / "pkg").mkdir(parents=True)
    (outside / "victim.py").write_bytes(BUGGY)
    (outside / "pkg" / "module.py").write_bytes(BUGGY)
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / "src" / "own.py").write_bytes(BUGGY)
    (repo / "src" / "inner.py").symlink_to(repo / "src" / "own.py")  # within the tree: fixed (its target)
    (repo / "src" / "link.py").symlink_to(outside / "victim.py")
    (repo / "src" / "linked").symlink_to(outside / "pkg")
    monkeypatch.chdir(repo)
    for args in (["src"], ["src/link.py", "src/linked/module.py"]):  # walked, and named as pre-commit does
        result = cli("check", "--no-cache", "--output-format", "concise", "--fix", *args)
        assert (outside / "victim.py").read_bytes() == BUGGY
        assert (outside / "pkg" / "module.py").read_bytes() == BUGGY
        errors = sorted(line for line in result.stderr.splitlines() if line.startswith("error:"))
        assert errors == [
            f"error: src/link.py: not fixed: a symlink to {outside / 'victim.py'}, outside the checked trees",
            f"error: src/linked/module.py: not fixed: a symlink to {outside / 'pkg' / 'module.py'}, "
            "outside the checked trees",
        ]
        assert "src/link.py:3:5: ACC001" in result.stdout  # still reported
        assert "src/linked/module.py:3:5: ACC001" in result.stdout
    assert (repo / "src" / "own.py").read_bytes() != BUGGY  # fixed through src/own.py or src/inner.py
    assert (repo / "src" / "inner.py").is_symlink()


def _minute_on_slow(path: str) -> None:
    if path.endswith("slow.py"):  # LibCST on a 60 KB chain of ternaries
        import time

        time.sleep(60)


def _slow_check(path: str, *args: object, **context: object) -> object:
    _minute_on_slow(path)
    return _REAL_CHECK_ONE(path, *args, **context)


def _slow_fix(path: str, *args: object, **context: object) -> object:
    _minute_on_slow(path)
    return _REAL_FIX_ONE(path, *args, **context)


_REAL_CHECK_ONE, _REAL_FIX_ONE = apply._check_one, apply._fix_one


def test_fix_has_the_parse_time_budget_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("slow.py", "z_fast.py"):
        (tmp_path / name).write_bytes(BUGGY)
    monkeypatch.setattr(apply, "_check_one", _slow_check)  # the file's own check
    result = cli("check", "--no-cache", "--fix", "--parse-timeout", "1", "--jobs", "2", ".")
    assert "error: slow.py: not fixed: took too long to parse (more than 1 s)" in result.stderr
    assert (tmp_path / "slow.py").read_bytes() == BUGGY
    assert (tmp_path / "z_fast.py").read_bytes() != BUGGY  # fixed after the slow one, in a fresh worker


def test_fix_verification_has_its_own_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # verifying the fixes checks the file again once per fix: never held to one check's time, and
    # where even their budget runs out the file is left as it was (an error, not ACC000)
    monkeypatch.chdir(tmp_path)
    for name in ("slow.py", "z_fast.py"):
        (tmp_path / name).write_bytes(BUGGY)
    monkeypatch.setattr(apply, "_fix_one", _slow_fix)
    result = cli("check", "--no-cache", "--fix", "--parse-timeout", "1", "--jobs", "2", ".")
    # one ACC001 to fix: two checks' time for it, two for the file's own check and the noqa pass
    assert "error: slow.py: not fixed: verifying its fixes took too long (more than 4 s)" in result.stderr
    assert "ACC000" not in result.stdout
    assert (tmp_path / "slow.py").read_bytes() == BUGGY
    assert (tmp_path / "z_fast.py").read_bytes() != BUGGY


def _verify_slowly(*args: object, **kwargs: object) -> object:
    import time

    time.sleep(2)  # longer than the run's --parse-timeout of 1 s
    return _REAL_VERIFY(*args, **kwargs)


def _verify_for_a_minute(*args: object, **kwargs: object) -> object:
    _minute_on_slow("slow.py")
    return _REAL_VERIFY(*args, **kwargs)


def test_show_fixes_verification_is_not_held_to_the_parse_timeout(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # --show-fixes verifies each fix after the checks, in this process: slower than one check's
    # limit, the fix is still shown and the file gets no ACC000
    from accumlint.run import suggested_fixes

    monkeypatch.chdir(tmp_path)
    (tmp_path / "loop.py").write_bytes(BUGGY)
    monkeypatch.setattr(suggested_fixes, "verify", _verify_slowly)
    result = cli("check", "--no-cache", "--show-fixes", "--parse-timeout", "1", ".")
    assert "ACC000" not in result.stdout
    assert "loop.py:3:5: ACC001" in result.stdout
    assert "7 +         optimizer.zero_grad()" in result.stdout  # the verified fix, shown as a change


def test_a_code_actions_verification_past_its_budget_verifies_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the language server's verification (runner.verify_one) past its time: no fix, never ACC000
    from accumlint.run import runner, suggested_fixes

    codes = frozenset({"ACC001"})
    checked = runner.check_one("loop.py", BUGGY, codes, suggest=True)
    assert [f.code for f in checked.findings] == ["ACC001"] and checked.fixes
    monkeypatch.setattr(suggested_fixes, "verify", _verify_for_a_minute)
    assert runner.verify_one("loop.py", BUGGY, codes, checked.fixes, checked.findings, timeout=1) == {}
    monkeypatch.setattr(suggested_fixes, "verify", _REAL_VERIFY)
    assert runner.verify_one("loop.py", BUGGY, codes, checked.fixes, checked.findings, timeout=None) == {
        finding: fix for finding, fix in checked.fixes.items()}


from accumlint.run import suggested_fixes as _suggested_fixes  # noqa: E402 - the real one, before any test patches it

_REAL_VERIFY = _suggested_fixes.verify
