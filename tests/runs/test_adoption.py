"""Adopting accumlint: stdin (``check -``, ``--stdin-filename``, ``--fix -``), ``.gitignore``
(``--no-respect-gitignore``), the nearest configuration judging each file (``--isolated``,
``--config KEY=VALUE``) and ``--add-noqa``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from accumlint.commands.add_noqa import add_noqa_text
from accumlint.settings.gitignore import GitIgnore
from tests.cli_helpers import ACC001_LOOP, cli

FIXED_LOOP = """\
for i, batch in enumerate(loader):
    loss = model(batch).mean() / 4
    loss.backward()
    if (i + 1) % 4 == 0:
        optimizer.step()
        optimizer.zero_grad()
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no global git excludes of the machine
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "home" / ".config"))
    monkeypatch.setattr("accumlint.settings.gitignore._global_excludes_file", lambda: tmp_path / "home" / "ignore")
    return tmp_path


def _codes(result) -> list[tuple[str, str]]:
    return [(f["filename"], f["code"]) for f in json.loads(result.stdout)]


# --- stdin --------------------------------------------------------------------------


def _stdin(*args: str, data: bytes = ACC001_LOOP):
    from click.testing import CliRunner

    from accumlint.cli.app import main

    return CliRunner().invoke(main, ["check", *args], input=data)


def test_stdin_is_checked_under_its_filename(project: Path) -> None:
    (project / "pyproject.toml").write_text(
        '[tool.accumlint.per-file-ignores]\n"legacy/*" = ["ACC001"]\n', encoding="utf-8"
    )
    result = _stdin("--output-format", "json", "-", "--stdin-filename", "src/train.py")
    assert result.exit_code == 1
    assert _codes(result) == [("src/train.py", "ACC001")]
    ignored = _stdin("--output-format", "json", "-", "--stdin-filename", "legacy/train.py")
    assert (ignored.exit_code, json.loads(ignored.stdout)) == (0, [])
    unnamed = _stdin("--output-format", "json", "-")
    assert _codes(unnamed) == [("-", "ACC001")]


def test_stdin_refuses_add_noqa_which_edits_files_by_their_name(project: Path) -> None:
    result = _stdin("--add-noqa", "-", "--stdin-filename", "a.py")
    assert result.exit_code == 2 and "error: --add-noqa needs files, not stdin" in result.output


def test_diff_of_stdin_prints_the_fixes_as_ruff_does(project: Path) -> None:
    result = _stdin("--diff", "-", "--stdin-filename", "train.py")
    assert result.exit_code == 1  # a fix is pending
    assert result.stdout.startswith("--- a/train.py\n+++ b/train.py\n@@ ")
    assert "-    optimizer.zero_grad()\n" in result.stdout and "+        optimizer.zero_grad()\n" in result.stdout
    assert "Would fix 1 finding." in result.output
    unnamed = _stdin("--diff", "-")
    assert unnamed.stdout.startswith("--- a/-\n+++ b/-\n")
    clean = _stdin("--diff", "-", data=FIXED_LOOP.encode())
    assert (clean.exit_code, clean.stdout) == (0, "")


def test_fix_only_on_stdin_prints_only_the_fixed_source(project: Path) -> None:
    result = _stdin("--fix-only", "-", "--stdin-filename", "train.py")
    assert (result.exit_code, result.stdout) == (0, FIXED_LOOP)
    assert _stdin("--fix-only", "--exit-non-zero-on-fix", "-").exit_code == 1


def test_stdin_notebook_by_its_name(project: Path) -> None:
    cells = [{"cell_type": "code", "metadata": {}, "source": ACC001_LOOP.decode(), "outputs": [], "execution_count": 1}]
    notebook = json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}).encode()
    result = _stdin("--output-format", "json", "-", "--stdin-filename", "nb.ipynb", data=notebook)
    [finding] = json.loads(result.stdout)
    assert (finding["code"], finding["cell"], finding["location"]["row"]) == ("ACC001", 1, 3)


def test_fix_stdin_prints_the_fixed_source(project: Path) -> None:
    result = _stdin("--fix", "-", "--stdin-filename", "train.py")
    assert result.exit_code == 0
    assert result.stdout == FIXED_LOOP
    clean = _stdin("--fix", "-", data=FIXED_LOOP.encode())
    assert (clean.exit_code, clean.stdout) == (0, FIXED_LOOP)


def test_stdin_force_excluded_name_is_not_checked(project: Path) -> None:
    (project / "pyproject.toml").write_text('[tool.accumlint]\nexclude = ["gen_*.py"]\n', encoding="utf-8")
    result = _stdin("--force-exclude", "-", "--stdin-filename", "gen_train.py")
    assert (result.exit_code, result.stdout) == (0, "")
    echoed = _stdin("--force-exclude", "--fix", "-", "--stdin-filename", "gen_train.py")
    assert echoed.stdout == ACC001_LOOP.decode()


# --- .gitignore -----------------------------------------------------------------------


def _repo(root: Path) -> None:
    (root / ".git" / "info").mkdir(parents=True)
    for name in ("train.py", "wandb/run/train.py", "outputs/copy.py", "keep/generated.py", "keep/main.py",
                 "excluded_locally.py", "globally.py"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(ACC001_LOOP)
    (root / ".gitignore").write_text("wandb/\noutputs\n", encoding="utf-8")
    (root / "keep" / ".gitignore").write_text("generated.py\n", encoding="utf-8")
    (root / ".git" / "info" / "exclude").write_text("excluded_locally.py\n", encoding="utf-8")
    (root / "home").mkdir(exist_ok=True)
    (root / "home" / "ignore").write_text("globally.py\n", encoding="utf-8")


def test_gitignore_is_respected_by_default(project: Path) -> None:
    _repo(project)
    files = sorted(name for name, _ in _codes(cli("check", "--no-cache", "--output-format", "json", ".")))
    assert files == ["keep/main.py", "train.py"]
    everything = cli("check", "--no-cache", "--no-respect-gitignore", "--output-format", "json", ".")
    assert len(_codes(everything)) == 7
    # a file named on the command line is checked, unless --force-exclude (pre-commit)
    assert _codes(cli("check", "--no-cache", "--output-format", "json", "wandb/run/train.py"))
    forced = cli("check", "--no-cache", "--force-exclude", "--output-format", "json", "wandb/run/train.py")
    assert json.loads(forced.stdout) == []


def test_gitignore_off_in_config_and_negation(project: Path) -> None:
    _repo(project)
    (project / ".gitignore").write_text("*.py\n!keep/main.py\n", encoding="utf-8")
    assert GitIgnore().ignored(project / "train.py") is True
    assert GitIgnore().ignored(project / "keep" / "main.py") is False
    assert GitIgnore().ignored(project / "wandb" / "run" / "train.py") is True
    (project / "pyproject.toml").write_text("[tool.accumlint]\nrespect-gitignore = false\n", encoding="utf-8")
    assert len(_codes(cli("check", "--no-cache", "--output-format", "json", "."))) == 7


def test_outside_a_git_work_tree_nothing_is_ignored(project: Path) -> None:
    (project / ".gitignore").write_text("*.py\n", encoding="utf-8")
    (project / "train.py").write_bytes(ACC001_LOOP)
    assert _codes(cli("check", "--no-cache", "--output-format", "json", ".")) == [("train.py", "ACC001")]


# --- the nearest configuration --------------------------------------------------------


def _nested(root: Path) -> None:
    (root / "sub").mkdir()
    (root / "pyproject.toml").write_text('[tool.accumlint]\nselect = ["ALL"]\n', encoding="utf-8")
    (root / "sub" / "pyproject.toml").write_text('[tool.accumlint]\nignore = ["ACC001"]\n', encoding="utf-8")
    (root / "top.py").write_bytes(ACC001_LOOP)
    (root / "sub" / "s.py").write_bytes(ACC001_LOOP)


def test_each_file_is_judged_by_its_nearest_config(project: Path) -> None:
    _nested(project)
    alone = cli("check", "--no-cache", "--output-format", "json", "sub/s.py")
    together = cli("check", "--no-cache", "--output-format", "json", "sub/s.py", "top.py")
    walked = cli("check", "--no-cache", "--output-format", "json", ".")
    assert _codes(alone) == []
    assert ("sub/s.py", "ACC001") not in _codes(together)
    assert ("top.py", "ACC001") in _codes(together)
    assert _codes(walked) == _codes(together)
    # from inside the sub-project, too
    os.chdir(project / "sub")
    inside = cli("check", "--no-cache", "--output-format", "json", "s.py", "../top.py")
    assert _codes(inside) == [("../" + name, code) for name, code in _codes(together)]


def test_fix_follows_each_files_own_config(project: Path) -> None:
    _nested(project)
    result = cli("check", "--no-cache", "--fix", "sub/s.py", "top.py")
    assert (project / "sub" / "s.py").read_bytes() == ACC001_LOOP  # ACC001 is ignored there
    assert (project / "top.py").read_text(encoding="utf-8") == FIXED_LOOP
    assert "1 fixed" in result.stdout


def test_isolated_and_config_overrides(project: Path) -> None:
    _nested(project)
    isolated = cli("check", "--no-cache", "--isolated", "--output-format", "json", ".")
    assert sorted(_codes(isolated)) == [("sub/s.py", "ACC001"), ("top.py", "ACC001")]
    override = cli("check", "--no-cache", "--config", 'ignore = ["ACC0"]', "--output-format", "json", ".")
    assert _codes(override) == []
    one_file = cli("check", "--no-cache", "--config", "sub/pyproject.toml", "--output-format", "json", ".")
    assert _codes(one_file) == []
    bad = cli("check", "--config", "selekt = []", ".")
    assert bad.exit_code == 2 and "unknown key 'selekt'" in bad.stderr


# --- --add-noqa ------------------------------------------------------------------------


def test_add_noqa_silences_every_finding_once(project: Path) -> None:
    (project / "train.py").write_bytes(ACC001_LOOP.replace(b"optimizer.zero_grad()", b"optimizer.zero_grad()  # reset"))
    (project / "other.py").write_bytes(ACC001_LOOP)
    notebook = project / "nb.ipynb"
    cells = [{"cell_type": "code", "metadata": {}, "source": ACC001_LOOP.decode(), "outputs": [], "execution_count": 1}]
    notebook.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    result = cli("check", "--no-cache", "--add-noqa", ".")
    assert result.exit_code == 0
    assert "Added 3 noqa directives." in result.stderr
    assert "cannot take a directive" not in result.stderr
    assert (project / "train.py").read_text().splitlines()[2] == "    optimizer.zero_grad()  # reset  # noqa: ACC001"
    assert (project / "other.py").read_text().splitlines()[2] == "    optimizer.zero_grad()  # noqa: ACC001"
    # the notebook's cell, in its own layout (one string)
    [cell] = json.loads(notebook.read_bytes())["cells"]
    assert cell["source"].splitlines()[2] == "    optimizer.zero_grad()  # noqa: ACC001"
    again = cli("check", "--no-cache", "--add-noqa", ".")
    assert "Added 0 noqa directives." in again.stderr
    remaining = cli("check", "--no-cache", "--output-format", "json", ".")
    assert _codes(remaining) == []


def test_add_noqa_leaves_a_file_that_changed_since_it_was_checked(project: Path) -> None:
    from accumlint.commands.add_noqa import add_noqa_files
    from accumlint.spec.findings import Finding, Severity

    (project / "train.py").write_bytes(ACC001_LOOP)
    finding = Finding("train.py", 3, 5, "ACC001", "n", Severity.ERROR, "m")
    added, errors = add_noqa_files([finding], {"train.py": b"older bytes"})
    assert (added, errors) == (0, ["train.py: noqa not added: the file changed since it was checked"])
    assert (project / "train.py").read_bytes() == ACC001_LOOP


def test_add_noqa_text_merges_and_skips_what_cannot_take_a_comment() -> None:
    text = "a = f(x)  # noqa: ACC201\nb = 1 + \\\n    2\nc = '''\nd'''\ne = g()  # noqa\n"
    new, changed = add_noqa_text(text, {1: {"ACC001"}, 2: {"ACC001"}, 4: {"ACC001"}, 6: {"ACC001"}})
    assert changed == 1
    assert new.splitlines()[0] == "a = f(x)  # noqa: ACC001, ACC201"
    assert new.splitlines()[1:] == text.splitlines()[1:]
    crlf, _ = add_noqa_text("x = 1\r\ny = 2\r\n", {2: {"ACC304"}})
    assert crlf == "x = 1\r\ny = 2  # noqa: ACC304\r\n"


def test_add_noqa_text_skips_codes_a_directive_of_either_form_suppresses() -> None:
    text = "a = f()  # noqa: ACC0\nb = g()  # accumlint: noqa\nc = h()  # accumlint: noqa: ACC001\n"
    for style in ("noqa", "accumlint"):
        assert add_noqa_text(text, {1: {"ACC001"}, 2: {"ACC301"}, 3: {"ACC001"}}, style) == (text, 0)


def test_add_noqa_text_in_accumlint_style_keeps_other_tools_directives_apart() -> None:
    """``# accumlint: noqa: CODES``, which ruff's RUF100 never deletes: merged into an existing one,
    written beside (never into) another tool's ``# noqa``."""
    text = "a = f()\nb = g()  # noqa: E501\nc = h()  # accumlint: noqa: ACC201 deliberate  # type: ignore\n"
    new, changed = add_noqa_text(text, {1: {"ACC301", "ACC001"}, 2: {"ACC001"}, 3: {"ACC001"}}, "accumlint")
    assert changed == 3
    assert new.splitlines() == [
        "a = f()  # accumlint: noqa: ACC001, ACC301",
        "b = g()  # noqa: E501  # accumlint: noqa: ACC001",
        "c = h()  # accumlint: noqa: ACC001, ACC201 deliberate  # type: ignore",
    ]
    # the default style writes and merges the shared form
    assert add_noqa_text(text, {2: {"ACC001"}})[0].splitlines()[1] == "b = g()  # noqa: ACC001, E501"


def test_add_noqa_writes_the_configured_style(project: Path) -> None:
    (project / "pyproject.toml").write_text('[tool.accumlint]\nnoqa-style = "accumlint"\n', encoding="utf-8")
    (project / "legacy").mkdir()
    (project / "legacy" / "pyproject.toml").write_text("[tool.accumlint]\n", encoding="utf-8")  # its own: the default
    (project / "train.py").write_bytes(ACC001_LOOP.replace(b"zero_grad()", b"zero_grad()  # noqa: E501"))
    (project / "legacy" / "old.py").write_bytes(ACC001_LOOP)
    result = cli("check", "--no-cache", "--add-noqa", ".")
    assert (result.exit_code, "Added 2 noqa directives." in result.stderr) == (0, True)
    assert (project / "train.py").read_text().splitlines()[2] == (
        "    optimizer.zero_grad()  # noqa: E501  # accumlint: noqa: ACC001"
    )
    assert (project / "legacy" / "old.py").read_text().splitlines()[2] == "    optimizer.zero_grad()  # noqa: ACC001"
    assert "Added 0 noqa directives." in cli("check", "--no-cache", "--add-noqa", ".").stderr
    assert cli("check", "--no-cache", ".").exit_code == 0


def test_add_noqa_with_a_reason_as_ruff_writes_it(project: Path) -> None:
    (project / "train.py").write_bytes(ACC001_LOOP)
    result = cli("check", "--no-cache", "--add-noqa=baseline 2024-06", "train.py")
    assert (result.exit_code, result.stderr) == (0, "Added 1 noqa directive.\n")
    line = "    optimizer.zero_grad()  # noqa: ACC001 baseline 2024-06"
    assert (project / "train.py").read_text().splitlines()[2] == line
    # the directive still suppresses its code, and the reason is not read as an unused code
    after = cli("check", "--no-cache", "--extend-select", "ACC990", "train.py")
    assert (after.exit_code, after.stdout) == (0, "All checks passed!\n")
    # a bare --add-noqa still takes no value: the path after it stays a path
    (project / "other.py").write_bytes(ACC001_LOOP)
    assert "Added 1 noqa directive." in cli("check", "--no-cache", "--add-noqa", "other.py").stderr


def test_add_noqa_writes_the_reason_in_every_file(project: Path) -> None:
    """Reproduction: the writer's answer for the first file took the reason's name, and the
    files after it got their directive without the reason."""
    for name in ("a.py", "b.py", "c.py"):
        (project / name).write_bytes(ACC001_LOOP)
    assert "Added 3 noqa directives." in cli("check", "--no-cache", "--add-noqa=baseline", ".").stderr
    for name in ("a.py", "b.py", "c.py"):
        assert (project / name).read_text().splitlines()[2] == "    optimizer.zero_grad()  # noqa: ACC001 baseline"


def test_add_noqa_reason_must_not_read_as_a_code(project: Path) -> None:
    (project / "train.py").write_bytes(ACC001_LOOP)
    for reason in ("PR123 later", "two\nlines"):
        result = cli("check", "--no-cache", f"--add-noqa={reason}", "train.py")
        assert result.exit_code == 2 and "--add-noqa=REASON" in result.stderr
    assert (project / "train.py").read_bytes() == ACC001_LOOP
    merged, _ = add_noqa_text("a = f(x)  # noqa: ACC201\n", {1: {"ACC001"}}, reason="legacy")
    assert merged == "a = f(x)  # noqa: ACC001, ACC201 legacy\n"
    again, _ = add_noqa_text("a = f(x)  # noqa: ACC201 legacy\n", {1: {"ACC001"}}, reason="legacy")
    assert again == merged
    styled, _ = add_noqa_text("a = f(x)  # noqa: E501\n", {1: {"ACC001"}}, "accumlint", reason="legacy")
    assert styled == "a = f(x)  # noqa: E501  # accumlint: noqa: ACC001 legacy\n"
