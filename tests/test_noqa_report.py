"""``# noqa`` directives checked: unknown ACC codes warned about, ACC990 unused-noqa (off by default)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from accumlint import noqa_report
from accumlint.cli import main
from accumlint.noqa_report import directives, unknown_codes

SOURCE = """\
import torch
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
assert len(loader) % 4 == 0
for i, batch in enumerate(loader):
    optimizer.zero_grad()  # noqa: ACC001
    (model(batch).mean() / 4).backward()  # noqa: ACC101, E501, ACC777
    if (i + 1) % 4 == 0:  # noqa
        optimizer.step()  # noqa: ACC9
"""


def run(*args: str) -> tuple[int, str, str]:
    try:
        runner = CliRunner(mix_stderr=False)  # type: ignore[call-arg]
    except TypeError:
        runner = CliRunner()
    result = runner.invoke(main, ["check", *args])
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(SOURCE, encoding="utf-8")
    return tmp_path


def test_unknown_code_is_warned_about_even_when_acc990_is_off(project: Path) -> None:
    status, out, err = run("train.py")
    assert (status, out) == (0, "All checks passed!\n")  # the ACC001 finding on line 5 is suppressed
    assert err == "warning: train.py:6: unknown rule code ACC777 in a `noqa` directive\n"


def test_a_warm_run_warns_from_the_cache(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    warning = "warning: train.py:6: unknown rule code ACC777 in a `noqa` directive\n"
    assert run("train.py")[2] == warning

    def refuse(text: str, known: object) -> list[tuple[int, str]]:
        raise AssertionError("the directives of an unchanged file were read again")

    monkeypatch.setattr(noqa_report, "unknown_codes", refuse)
    assert run("train.py")[2] == warning


def test_unused_noqa_when_selected(project: Path) -> None:
    status, out, _ = run("--extend-select", "ACC990", "--output-format", "concise", "train.py")
    assert status == 1
    assert out.splitlines() == [
        "train.py:6:43: ACC990 `noqa` directive suppresses nothing for these codes (unused: ACC101; unknown: ACC777)",
        "train.py:8:27: ACC990 `noqa` directive suppresses nothing for these codes (unused: ACC9)",
        "",
        "Found 2 findings.",
    ]
    # a code that is not enabled suppresses nothing either; the used ACC001 directive is not reported
    status, out, _ = run("--extend-select", "ACC990", "--ignore", "ACC001", "--output-format", "concise", "train.py")
    assert "train.py:5:28: ACC990 `noqa` directive suppresses nothing for these codes (non-enabled: ACC001)" in out


def test_unused_noqa_points_at_its_readme_section(project: Path) -> None:
    _, out, _ = run("--extend-select", "ACC990", "train.py")
    assert out.count("see: https://github.com/accumlint/accumlint/blob/main/README.md#suppression") == 2


def test_file_level_directive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.py").write_text("# accumlint: noqa: ACC201\nx = 1\n", encoding="utf-8")
    status, out, _ = run("--select", "ACC990,ACC2", "--output-format", "concise", "a.py")
    assert out.splitlines()[0] == (
        "a.py:1:1: ACC990 `noqa` directive suppresses nothing for these codes (unused: ACC201)"
    )
    assert status == 1


def test_directive_parsing() -> None:
    text = 'x = "# noqa: ACC001"  # noqa:ACC002,acc003 trailing\n# accumlint: noqa: ACC1\ny = 1  # noqa\n'
    assert [(d.line, d.column, d.file_wide, d.codes) for d in directives(text)] == [
        (1, 23, False, ("ACC002", "ACC003")),
        (2, 1, True, ("ACC1",)),
    ]
    assert unknown_codes("a  # noqa: ACC1, ACC0001, F401\n", ["ACC000", "ACC101"]) == [(1, "ACC0001")]


def test_accumlint_form_directives_are_parsed_beside_noqa() -> None:
    text = "a()  # noqa: E501  # accumlint: noqa: acc001 deliberate\nb()  # accumlint: noqa\n"
    assert [(d.line, d.column, d.file_wide, d.codes) for d in directives(text)] == [
        (1, 6, False, ("E501",)),
        (1, 20, False, ("ACC001",)),
    ]
    assert unknown_codes("a  # accumlint: noqa: ACC0001\n", ["ACC000", "ACC101"]) == [(1, "ACC0001")]


def test_unused_accumlint_form_directive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``# accumlint: noqa: CODES`` after code is reported as ``# noqa: CODES`` is, at its ``#``."""
    monkeypatch.chdir(tmp_path)
    used = SOURCE.replace("optimizer.zero_grad()  # noqa: ACC001", "optimizer.zero_grad()  # accumlint: noqa: ACC001")
    stale = used.replace("# noqa: ACC9", "# noqa: E501  # accumlint: noqa: ACC9, ACC0")
    (tmp_path / "train.py").write_text(stale, encoding="utf-8")
    status, out, err = run("--extend-select", "ACC990", "--output-format", "concise", "train.py")
    assert status == 1
    assert out.splitlines()[:3] == [  # nothing on line 5: its ACC001 is suppressed, the directive used
        "train.py:6:43: ACC990 `noqa` directive suppresses nothing for these codes (unused: ACC101; unknown: ACC777)",
        "train.py:8:41: ACC990 `noqa` directive suppresses nothing for these codes (unused: ACC9, ACC0)",
        "",
    ]
