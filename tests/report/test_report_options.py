"""ruff's reporting and fixing options of ``check``: ``-o/--output-file`` (the report in a file,
written by the one safe writer), ``--fix-only`` and ``--exit-non-zero-on-fix``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from accumlint.cli.app import main
from tests.cli_helpers import ACC001_LOOP, cli

#: an ACC002 (no fix): the update is never followed by a reset
UNFIXABLE = b"""\
import torch
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for i, batch in enumerate(loader):
    loss = model(batch).mean() / 4
    loss.backward()
    if (i + 1) % 4 == 0:
        optimizer.step()
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_bytes(ACC001_LOOP)
    (tmp_path / "update.py").write_bytes(UNFIXABLE)
    return tmp_path


# --- -o / --output-file ----------------------------------------------------------------


def test_output_file_holds_the_report_and_stdout_stays_empty(project: Path) -> None:
    result = cli("check", "--no-cache", "-o", "report.json", "--output-format", "json", ".")
    assert (result.exit_code, result.stdout) == (1, "")  # the status is the run's
    rows = json.loads((project / "report.json").read_text(encoding="utf-8"))
    assert sorted((row["filename"], row["code"]) for row in rows) == [("train.py", "ACC001"), ("update.py", "ACC002")]
    clean = cli("check", "--no-cache", "--output-file", "report.txt", "--color", "always", "update.py",
                "--ignore", "ACC002")
    assert (clean.exit_code, clean.stdout) == (0, "")
    assert (project / "report.txt").read_text(encoding="utf-8") == "All checks passed!\n"  # never colored


def test_output_file_replaces_a_file_keeping_its_mode_and_follows_a_link_to_one(project: Path) -> None:
    target = project / "reports" / "accumlint.txt"
    target.parent.mkdir()
    target.write_text("old report\n", encoding="utf-8")
    target.chmod(0o640)
    (project / "link.txt").symlink_to(target)
    cli("check", "--no-cache", "-o", "link.txt", "--output-format", "concise", "train.py")
    assert (project / "link.txt").is_symlink()
    assert target.read_text(encoding="utf-8").startswith("train.py:3:5: ACC001")
    assert target.stat().st_mode & 0o777 == 0o640
    assert not [name for name in os.listdir(target.parent) if name.endswith(".accumlint-tmp")]


@pytest.mark.parametrize("make", ["missing folder", "link to a device", "broken link", "fifo", "directory"])
def test_output_file_is_refused_before_the_run_where_it_cannot_be_a_regular_file(project: Path, make: str) -> None:
    path = project / "out"
    if make == "missing folder":
        path = project / "no" / "out"
    elif make == "link to a device":
        path.symlink_to("/dev/null")
    elif make == "broken link":
        path.symlink_to(project / "nowhere" / "out")
    elif make == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()
    result = cli("check", "--no-cache", "--fix", "-o", str(path), "train.py")
    assert result.exit_code == 2 and "rror: " in result.stderr  # (click says "Error:" of a directory)
    assert (project / "train.py").read_bytes() == ACC001_LOOP  # refused before anything was fixed


def test_output_file_with_fix_on_stdin_keeps_the_source_on_stdout(project: Path) -> None:
    result = CliRunner().invoke(main, ["check", "--fix", "-o", "report.txt", "-"], input=UNFIXABLE)
    assert (result.exit_code, result.stdout) == (1, UNFIXABLE.decode())
    assert "ACC002" in (project / "report.txt").read_text(encoding="utf-8")


def test_a_usage_error_writes_no_report(project: Path) -> None:
    result = cli("check", "-o", "report.txt", "--select", "NOPE1", ".")
    assert result.exit_code == 2 and not (project / "report.txt").exists()


# --- ACCUMLINT_OUTPUT_FILE: -o's default (ruff's RUFF_OUTPUT_FILE) -----------------------


def test_the_environment_variable_is_the_output_file_and_the_option_wins(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACCUMLINT_OUTPUT_FILE", "from-env.txt")
    result = cli("check", "--no-cache", "--output-format", "concise", "update.py")
    assert (result.exit_code, result.stdout) == (1, "")
    assert (project / "from-env.txt").read_text(encoding="utf-8").startswith("update.py:7:9: ACC002")
    option = cli("check", "--no-cache", "-o", "from-option.txt", "--ignore", "ACC002", "update.py")
    assert (option.exit_code, option.stdout) == (0, "")
    assert (project / "from-option.txt").read_text(encoding="utf-8") == "All checks passed!\n"
    assert (project / "from-env.txt").read_text(encoding="utf-8").startswith("update.py:7:9: ACC002")  # untouched
    shown = cli("check", "--show-settings", "update.py")
    assert shown.stdout == ""
    settings = (project / "from-env.txt").read_text(encoding="utf-8").splitlines()
    assert 'output-file = "from-env.txt"  # from ACCUMLINT_OUTPUT_FILE' in settings


def test_an_empty_environment_variable_leaves_the_report_on_stdout(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACCUMLINT_OUTPUT_FILE", "")
    result = cli("check", "--no-cache", "--ignore", "ACC002", "update.py")
    assert (result.exit_code, result.stdout) == (0, "All checks passed!\n")
    assert sorted(os.listdir(project)) == ["train.py", "update.py"]


def test_a_bad_path_from_the_environment_is_named_as_the_variable(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACCUMLINT_OUTPUT_FILE", "no/report.txt")
    result = cli("check", "--no-cache", "--fix", "train.py")
    assert result.exit_code == 2
    assert result.stderr == f"error: ACCUMLINT_OUTPUT_FILE=no/report.txt: no such directory: {project / 'no'}\n"
    assert (project / "train.py").read_bytes() == ACC001_LOOP  # refused before anything was fixed


# --- --fix-only and --exit-non-zero-on-fix ----------------------------------------------------


def test_fix_only_fixes_and_reports_nothing_of_what_is_left(project: Path) -> None:
    result = cli("check", "--no-cache", "--fix-only", ".")
    assert (result.exit_code, result.stdout) == (0, "Fixed 1 finding.\n")  # as ruff's: `Fixed N errors.`
    assert (project / "train.py").read_bytes() != ACC001_LOOP
    assert (project / "update.py").read_bytes() == UNFIXABLE  # its ACC002 is not reported
    again = cli("check", "--no-cache", "--fix-only", ".")
    assert (again.exit_code, again.stdout) == (0, "")  # nothing fixed: nothing said
    assert cli("check", "--no-cache", "--fix", ".").exit_code == 1  # --fix reports what is left


def test_exit_non_zero_on_fix(project: Path) -> None:
    (project / "update.py").unlink()
    assert cli("check", "--no-cache", "--fix", "--exit-non-zero-on-fix", ".").exit_code == 1  # fixed, none left
    assert cli("check", "--no-cache", "--fix", "--exit-non-zero-on-fix", ".").exit_code == 0  # nothing to fix
    (project / "train.py").write_bytes(ACC001_LOOP)
    assert cli("check", "--no-cache", "--fix-only", "--exit-non-zero-on-fix", ".").exit_code == 1
    both = cli("check", "--exit-zero", "--exit-non-zero-on-fix", ".")
    assert both.exit_code == 2 and "cannot be used together" in both.stderr


def test_fix_only_with_diff_is_diff_and_refuses_add_noqa(project: Path) -> None:
    diff = cli("check", "--no-cache", "--fix-only", "--diff", "train.py")
    assert diff.exit_code == 1 and diff.stdout.startswith("--- a/train.py")
    assert (project / "train.py").read_bytes() == ACC001_LOOP
    refused = cli("check", "--fix-only", "--add-noqa", ".")
    assert refused.exit_code == 2 and "--add-noqa cannot be used with --fix" in refused.stderr
