"""Configuration errors (issue 7 item 4): one clear line on stderr and exit status 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli_helpers import cli


@pytest.mark.parametrize(
    ("pyproject", "args", "message"),
    [
        ("[tool.accumlint\nselect = [", (), "pyproject.toml: invalid TOML (Expected ']'"),
        ("[tool.accumlint]\nselct = ['ACC0']\n", (), "[tool.accumlint] unknown key 'selct'"),
        ("[tool.accumlint]\nselect = ['ACC777']\n", (), "[tool.accumlint] select: unknown rule selector 'ACC777'"),
        ("[tool.accumlint]\nselect = 'ACC0'\n", (), "[tool.accumlint] select: expected a list of strings"),
        ("[tool.accumlint]\nper-file-ignores = {'*.py' = 'ACC0'}\n", (), "per-file-ignores '*.py': expected a list"),
        ("[tool.accumlint]\ncache-dir = ''\n", (), "[tool.accumlint] cache-dir: expected a directory path"),
        ("", ("--select", "XYZ1"), "--select: unknown rule selector 'XYZ1'"),
        ("", ("--ignore", "ACC0,,ACC77x"), "--ignore: unknown rule selector 'ACC77x'"),
        ("", ("--select", ""), "--select: empty selection"),
        ("", ("--config", "missing.toml"), "missing.toml: config file does not exist"),
        ("", ("--diff", "--fix"), "--fix and --diff"),
        ("", ("--unsafe-fixes",), "--unsafe-fixes needs --fix or --diff"),
        ("", ("--jobs", "0"), "Invalid value for '-j' / '--jobs'"),
    ],
    ids=["broken-toml", "unknown-key", "bad-code", "not-a-list", "bad-pfi", "empty-cache-dir", "cli-bad-code",
         "cli-bad-ignore", "cli-empty-select", "missing-config", "fix-and-diff", "unsafe-alone", "jobs-0"],
)
def test_config_error_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pyproject: str, args: tuple[str, ...], message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    if pyproject:
        (tmp_path / "pyproject.toml").write_text(pyproject, encoding="utf-8")
    (tmp_path / "train.py").write_text("loss.backward()\n", encoding="utf-8")
    result = cli("check", *args, "train.py")
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 or "Usage:" in result.stderr, result.stderr
    assert message in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("pyproject", "message"),
    [
        (b'[tool.accumlint]\nselect = ["\xff"]\n', "pyproject.toml: invalid TOML (not UTF-8: byte 28)"),
        (b"[tool.accumlint]\nx = " + b"[" * 100_000 + b"]" * 100_000 + b"\n", "arrays or tables nested too deep"),
        (b"[tool.accumlint]\nx = " + b"{a = " * 50_000 + b"1" + b"}" * 50_000 + b"\n", "nested too deep"),
        (b"[tool.accumlint]\nparse-timeout = -1\n", "parse-timeout: expected seconds between 0 (no limit) and 86400"),
        (b"[tool.accumlint]\nparse-timeout = true\n", "parse-timeout: expected seconds"),
    ],
    ids=["not-utf8", "deep-arrays", "deep-tables", "negative-timeout", "bool-timeout"],
)
def test_a_hostile_pyproject_is_a_one_line_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 pyproject: bytes, message: str) -> None:
    """Reproduction (issue 19): a pyproject.toml that is not UTF-8, or nests deeply, ended the run
    with a traceback."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_bytes(pyproject)
    (tmp_path / "train.py").write_text("loss.backward()\n", encoding="utf-8")
    for args in (("check", "train.py"), ("clean",)):
        result = cli(*args)
        assert result.exit_code == 2, (result.stdout, result.stderr)
        assert result.exception is None or isinstance(result.exception, SystemExit)
        assert len(result.stderr.strip().splitlines()) == 1 and message in result.stderr, result.stderr


def test_a_pyproject_too_large_is_a_one_line_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 28: a pyproject.toml is read by the bounded reader; past 1 MiB it is not used, and said so."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_bytes(b"[tool.accumlint]\n" + b"# padding\n" * 110_000)
    (tmp_path / "train.py").write_text("loss.backward()\n", encoding="utf-8")
    result = cli("check", "train.py")
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert result.stderr == f"error: {tmp_path / 'pyproject.toml'}: config file not read: larger than 1 MiB (1.0 MiB)\n"
