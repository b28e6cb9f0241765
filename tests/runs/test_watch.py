"""``accumlint check --watch``: the loop driven by a list of changes (no file events, no sleeping)."""

from __future__ import annotations

import builtins
from collections.abc import Iterator
from pathlib import Path

import pytest

from accumlint.commands import watch
from tests.cli_helpers import ACC001_LOOP, cli

CLEAN = b"for batch in loader:\n    model(batch).mean().backward()\n    optimizer.step()\n    optimizer.zero_grad()\n"


def test_only_sources_notebooks_and_toml_files_count() -> None:
    assert watch.watched(["a/train.py", "b.ipynb", "c.pyi", "pyproject.toml", "notes.md", "x.pyc", "cache/k"]) == [
        "a/train.py", "b.ipynb", "c.pyi", "pyproject.toml"]


def test_the_check_runs_first_then_once_per_batch_that_holds_a_watched_file() -> None:
    runs: list[int] = []
    lines: list[str] = []
    clears: list[int] = []
    status = watch.watch(lambda: runs.append(1) or 1, [["notes.md"], ["src/train.py", "README.md"], [], ["x.ipynb"]],
                         echo=lines.append, clear=lambda: clears.append(1))
    assert status == 0  # a run with findings does not end the watch, nor set its exit status
    assert len(runs) == 3 and len(clears) == 3  # the first run and two of the four batches
    assert [line.split("] ", 1)[1] for line in lines] == [
        "Starting linter in watch mode...", "Watching for file changes.",
        "File change detected...", "Watching for file changes.",
        "File change detected...", "Watching for file changes.",
    ]


def test_ctrl_c_ends_the_watch_with_status_0() -> None:
    def changes() -> Iterator[list[str]]:
        yield ["a.py"]
        raise KeyboardInterrupt

    runs: list[int] = []
    assert watch.watch(lambda: runs.append(1) or 1, changes(), echo=lambda _line: None, clear=lambda: None) == 0
    assert len(runs) == 2


def test_rerun_on_reports_whether_it_ran() -> None:
    runs: list[int] = []
    assert not watch.rerun_on(["build.log"], lambda: runs.append(1) or 0, lambda _line: None, lambda: None)
    assert watch.rerun_on(["m.py"], lambda: runs.append(1) or 0, lambda _line: None, lambda: None)
    assert runs == [1]


def test_check_watch_reports_again_after_each_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI end to end: the report is printed at the start and again for the changed file, the
    stream of changes is asked for the paths on the command line, Ctrl-C exits 0."""
    train = tmp_path / "train.py"
    train.write_bytes(CLEAN)
    asked: list[list[str]] = []

    def changes(targets: list[str]) -> Iterator[list[str]]:
        asked.append(list(targets))
        train.write_bytes(ACC001_LOOP)  # the user saves a bug
        yield [str(train)]
        (tmp_path / "notes.md").write_text("x", encoding="utf-8")
        yield [str(tmp_path / "notes.md")]  # not watched: no run
        train.write_bytes(CLEAN)  # and fixes it
        yield [str(train)]
        raise KeyboardInterrupt

    monkeypatch.setattr(watch, "file_changes", changes)
    monkeypatch.chdir(tmp_path)
    result = cli("check", "--watch", "--no-cache", ".")
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert asked == [["."]]
    reports = result.stdout.split("All checks passed!")
    assert len(reports) == 3  # clean, then the bug, then clean again
    assert "ACC001" not in reports[0] and "train.py:3:5: ACC001" in reports[1] and "ACC001" not in reports[2]
    assert result.stderr.count("File change detected...") == 2


def test_check_watch_goes_on_after_a_configuration_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "train.py").write_bytes(ACC001_LOOP)
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[tool.accumlint]\nselect = ["NOPE"]\n', encoding="utf-8")

    def changes(_targets: list[str]) -> Iterator[list[str]]:
        pyproject.write_text("[tool.accumlint]\n", encoding="utf-8")
        yield [str(pyproject)]

    monkeypatch.setattr(watch, "file_changes", changes)
    monkeypatch.chdir(tmp_path)
    result = cli("check", "--watch", "--no-cache")
    assert result.exit_code == 0, result.stderr
    assert "unknown rule selector 'NOPE'" in result.stderr
    assert "train.py:3:5: ACC001" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("-",), "--watch needs files or folders to watch, not stdin"),
        (("--add-noqa", "."), "--watch cannot be used with --add-noqa"),
        (("--show-settings", "."), "--watch cannot be used with --show-settings"),
    ],
)
def test_what_a_watch_cannot_do_is_a_usage_error(args: tuple[str, ...], message: str) -> None:
    result = cli("check", "--watch", *args)
    assert result.exit_code == 2 and message in result.stderr


def test_without_watchfiles_the_error_says_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_watchfiles(name: str, *args: object, **kwargs: object) -> object:
        if name == "watchfiles":
            raise ImportError("No module named 'watchfiles'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_watchfiles)
    (tmp_path / "train.py").write_bytes(CLEAN)
    monkeypatch.chdir(tmp_path)
    result = cli("check", "--watch", ".")
    assert result.exit_code == 2
    assert result.stderr.strip() == f"error: --watch needs the watchfiles package: {watch.INSTALL_HINT}"
    assert result.stdout == ""  # refused before the first run
