"""Configuration errors (issue 7 item 4): one clear line on stderr and exit status 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli_helpers import ACC001_LOOP, cli


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
    ids=[
        "broken-toml",
        "unknown-key",
        "bad-code",
        "not-a-list",
        "bad-pfi",
        "empty-cache-dir",
        "cli-bad-code",
        "cli-bad-ignore",
        "cli-empty-select",
        "missing-config",
        "fix-and-diff",
        "unsafe-alone",
        "jobs-0",
    ],
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
        # issue 28 item 8: these ended in a traceback
        (b"[[tool.accumlint]]\n", "pyproject.toml: [tool.accumlint] must be a table, got [{}]"),
        (b"[tool]\naccumlint = 5\n", "pyproject.toml: [tool.accumlint] must be a table, got 5"),
        (b'[tool.accumlint]\ncache-dir = "a\\u0000b"\n', "cache-dir: expected a directory path, got 'a\\x00b'"),
        (b"[tool.accumlint]\nparse-timeout = " + b"9" * 5000 + b"\n", "invalid TOML (Exceeds the limit (4300 digits)"),
        (b"[tool.accumlint]\nparse-timeout = " + b"9" * 4000 + b"\n", "got an integer of 4000 digits"),
        (b"[tool.accumlint]\nselect = ['" + b"X" * 10_000 + b"']\n", "unknown rule selector 'XXXXXXXX"),
    ],
    ids=[
        "not-utf8",
        "deep-arrays",
        "deep-tables",
        "negative-timeout",
        "bool-timeout",
        "array-of-tables",
        "not-a-table",
        "nul-cache-dir",
        "5000-digits",
        "4000-digits",
        "long-selector",
    ],
)
def test_a_hostile_pyproject_is_a_one_line_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pyproject: bytes, message: str
) -> None:
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
        # a rejected value is quoted in part (the path is the tmp folder's: longer under pytest-xdist)
        assert len(result.stderr.replace(str(tmp_path), "")) < 600


def test_a_pyproject_too_large_is_a_one_line_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 28: a pyproject.toml is read by the bounded reader; past 1 MiB it is not used, and said so."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_bytes(b"[tool.accumlint]\n" + b"# padding\n" * 110_000)
    (tmp_path / "train.py").write_text("loss.backward()\n", encoding="utf-8")
    result = cli("check", "train.py")
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert result.stderr == f"error: {tmp_path / 'pyproject.toml'}: config file not read: larger than 1 MiB (1.0 MiB)\n"


def test_a_nul_in_an_overridden_cache_dir_is_a_one_line_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("loss.backward()\n", encoding="utf-8")
    result = cli("check", "--config", 'cache-dir = "a\\u0000b"', "train.py")
    assert result.exit_code == 2 and result.exception is None or isinstance(result.exception, SystemExit)
    assert result.stderr == "error: [tool.accumlint] cache-dir: expected a directory path, got 'a\\x00b'\n"


#: nested pyproject.toml files that cannot be loaded: the first three hold no [tool.accumlint] table that
#: could be seen (whether they have one cannot be known), the last ones are accumlint's own
BROKEN_NESTED = {
    "broken-toml": b'[project\nname = "vendored"\n',
    "not-utf8": b'[project]\nname = "\xff"\n',
    "5000-digits": b"[project]\nversion = " + b"9" * 5000 + b"\n",
    "array-of-tables": b"[[tool.accumlint]]\n",
    "unknown-key": b"[tool.accumlint]\nselct = ['ACC0']\n",
}


def _tree(root: Path, nested: bytes) -> None:
    """A project with a real ACC001 bug in ``src/`` and a vendored package whose pyproject.toml is ``nested``."""
    (root / "pyproject.toml").write_text("[tool.accumlint]\n", encoding="utf-8")
    (root / "src").mkdir()
    (root / "src" / "train.py").write_bytes(ACC001_LOOP)
    package = root / "vendored" / "pkg"
    package.mkdir(parents=True)
    (package / "pyproject.toml").write_bytes(nested)
    (package / "mod.py").write_bytes(ACC001_LOOP)


@pytest.mark.parametrize("nested", BROKEN_NESTED.values(), ids=BROKEN_NESTED.keys())
def test_a_broken_nested_pyproject_is_reported_for_its_files_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nested: bytes
) -> None:
    """Reproduction (issue 28 item 8): one bad pyproject.toml anywhere in the tree ended the whole run with rc 2."""
    monkeypatch.chdir(tmp_path)
    _tree(tmp_path, nested)
    result = cli("check", "-n", "--output-format", "concise", ".")
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.stdout.splitlines()
    assert lines[0].startswith("src/train.py:3:5: ACC001 ")  # the rest is checked
    config = tmp_path / "vendored" / "pkg" / "pyproject.toml"
    assert lines[1].startswith(
        f"vendored/pkg/mod.py:1:1: ACC000 file could not be checked: its configuration is invalid: {config}: "
    ), lines[1]
    assert lines[-1] == "Found 2 findings." or lines[-2] == "Found 2 findings."
    assert result.stderr == ""


def test_a_broken_nested_pyproject_without_acc000_leaves_its_files_not_fully_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    _tree(tmp_path, BROKEN_NESTED["broken-toml"])
    result = cli("check", "-n", "--ignore", "ACC000", "--output-format", "concise", ".")
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert result.stdout.startswith("src/train.py:3:5: ACC001 ")
    assert "Found 1 finding. 1 file was not fully checked." in result.stdout.splitlines()
    config = tmp_path / "vendored" / "pkg" / "pyproject.toml"
    assert f"warning: vendored/pkg/mod.py: not fully checked: its configuration is invalid: {config}: invalid TOML" in (
        result.stderr
    )


def test_fix_goes_on_past_a_broken_nested_pyproject(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    _tree(tmp_path, BROKEN_NESTED["broken-toml"])
    result = cli("check", "-n", "--fix", "--output-format", "concise", ".")
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert (tmp_path / "src" / "train.py").read_bytes() != ACC001_LOOP  # fixed
    assert (tmp_path / "vendored" / "pkg" / "mod.py").read_bytes() == ACC001_LOOP  # its settings are unknown
    assert result.stdout.splitlines()[0].startswith("vendored/pkg/mod.py:1:1: ACC000 ")
