"""``# noqa`` directives checked: unknown ACC codes warned about, ACC990 unused-noqa (off by default)."""

from __future__ import annotations

from pathlib import Path

import pytest

from accumlint.noqa import noqa_report
from accumlint.noqa.noqa_report import directives, unknown_codes
from tests.cli_helpers import check_command as run

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
    message = "`noqa` directive suppresses nothing for these codes"
    assert out.splitlines() == [
        f"train.py:6:43: ACC990 [*] {message} (unused: ACC101; unknown: ACC777)",
        f"train.py:8:27: ACC990 [*] {message} (unused: ACC9)",
        "",
        "Found 2 findings.",
        "[*] 2 fixable with `--fix`.",
    ]
    # a code that is not enabled suppresses nothing either; the used ACC001 directive is not reported
    status, out, _ = run("--extend-select", "ACC990", "--ignore", "ACC001", "--output-format", "concise", "train.py")
    assert "train.py:5:28: ACC990 [*] `noqa` directive suppresses nothing for these codes (non-enabled: ACC001)" in out


def test_unused_noqa_points_at_its_readme_section(project: Path) -> None:
    _, out, _ = run("--extend-select", "ACC990", "train.py")
    assert out.count("see: https://github.com/accumlint/accumlint/blob/main/README.md#suppression") == 2


def test_file_level_directive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.py").write_text("# accumlint: noqa: ACC201\nx = 1\n", encoding="utf-8")
    status, out, _ = run("--select", "ACC990,ACC2", "--output-format", "concise", "a.py")
    assert out.splitlines()[0] == (
        "a.py:1:1: ACC990 [*] `noqa` directive suppresses nothing for these codes (unused: ACC201)"
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
        "train.py:6:43: ACC990 [*] `noqa` directive suppresses nothing for these codes (unused: ACC101; "
        "unknown: ACC777)",
        "train.py:8:41: ACC990 [*] `noqa` directive suppresses nothing for these codes (unused: ACC9, ACC0)",
        "",
    ]


# --- ACC990's fix ----------------------------------------------------------------------


def test_remove_codes_keeps_other_tools_codes_and_later_comments() -> None:
    text = (
        "a = 1  # noqa: ACC001, E501\n"
        "b = 2  # noqa:acc001 legacy reason # pylint: disable=x\n"
        "# accumlint: noqa: ACC201\n"
        "c = 3  # type: ignore  # noqa: ACC1 ACC2\n"
        "d = 4  # noqa: ACC3\n"
    )
    fixed = noqa_report.remove_codes(text, {1: {"ACC001"}, 2: {"ACC001"}, 3: {"ACC201"}, 4: {"ACC2"}, 5: {"ACC3"}})
    assert fixed == (
        "a = 1  # noqa: E501\n"
        "b = 2  # pylint: disable=x\n"  # the reason goes with its directive, as ruff's RUF100 fix
        "c = 3  # type: ignore  # noqa: ACC1\n"
        "d = 4\n"  # never a bare directive, which would suppress everything
    )


def test_fix_removes_the_unused_codes(project: Path) -> None:
    status, out, err = run("--no-cache", "--extend-select", "ACC990", "--fix", "train.py")
    assert status == 0, out + err
    lines = (project / "train.py").read_text(encoding="utf-8").splitlines()
    assert lines[4] == "    optimizer.zero_grad()  # noqa: ACC001"  # used: kept
    assert lines[5] == "    (model(batch).mean() / 4).backward()  # noqa: E501"
    assert lines[7] == "        optimizer.step()"
    assert run("--no-cache", "--extend-select", "ACC990", "--fix", "train.py")[:2] == (0, "All checks passed!\n")


def test_unused_noqa_is_marked_fixable_with_its_edit(project: Path) -> None:
    import json

    _, out, _ = run("--no-cache", "--extend-select", "ACC990", "--output-format", "json", "train.py")
    fixes = [finding["fix"] for finding in json.loads(out)]
    assert [fix["applicability"] for fix in fixes] == ["safe", "safe"]
    assert fixes[1]["edits"] == [{
        "content": "        optimizer.step()\n",
        "location": {"row": 8, "column": 1},
        "end_location": {"row": 9, "column": 1},
    }]
    _, out, _ = run("--no-cache", "--extend-select", "ACC990", "--statistics", "train.py")
    assert out == "2\tACC990\t[*]\tunused-noqa\n\nAccumulation loops: 1 decided, 0 undecided\n"
    # a warm run answers from the cache, and still knows the fixes
    run("--extend-select", "ACC990", "--output-format", "github", "train.py")
    _, out, _ = run("--extend-select", "ACC990", "--output-format", "concise", "train.py")
    assert out.count("ACC990 [*]") == 2


def test_diff_shows_the_fix_without_writing(project: Path) -> None:
    status, out, err = run("--no-cache", "--extend-select", "ACC990", "--diff", "train.py")
    assert status == 1 and "-        optimizer.step()  # noqa: ACC9\n+        optimizer.step()\n" in out
    assert "Would fix 2 findings." in err
    assert (project / "train.py").read_text(encoding="utf-8") == SOURCE


def test_ignore_noqa_applies_no_directive_and_reports_no_unused_one(project: Path) -> None:
    import json

    from tests.cli_helpers import ACC001_LOOP

    (project / "whole.py").write_bytes(b"# accumlint: noqa\n" + ACC001_LOOP)
    status, out, _ = run("--no-cache", "--ignore-noqa", "--select", "ACC001,ACC990", "--output-format", "json",
                         "train.py", "whole.py")
    assert status == 1
    assert [(f["filename"], f["location"]["row"], f["code"]) for f in json.loads(out)] == [
        ("train.py", 5, "ACC001"),
        ("whole.py", 4, "ACC001"),
    ]
    # the cache of a run that applied the directives does not answer it, nor the other way round
    assert run("--select", "ACC001", "train.py")[:2] == (0, "All checks passed!\n")
    assert run("--ignore-noqa", "--select", "ACC001", "train.py")[0] == 1
    assert run("--select", "ACC001", "train.py")[0] == 0


def test_ignore_noqa_cannot_add_noqa(project: Path) -> None:
    status, _, err = run("--ignore-noqa", "--add-noqa", "train.py")
    assert status == 2 and "--add-noqa cannot be used with --ignore-noqa" in err


def test_remove_codes_from_the_accumlint_form_beside_another_tools_noqa() -> None:
    text = "a = 1  # noqa: E501  # accumlint: noqa: ACC001, ACC002 why\nb = 2  # accumlint: noqa: ACC3  # noqa: E501\n"
    fixed = noqa_report.remove_codes(text, {1: {"ACC001"}, 2: {"ACC3"}})
    assert fixed == "a = 1  # noqa: E501  # accumlint: noqa: ACC002 why\nb = 2  # noqa: E501\n"


def test_fix_takes_unused_codes_out_of_the_accumlint_form(project: Path) -> None:
    """The fix of ``ACC990`` on ``# accumlint: noqa: CODES`` (two directives on one line)."""
    text = SOURCE.replace("# noqa: ACC9", "# noqa: E501  # accumlint: noqa: ACC9, ACC0")
    (project / "train.py").write_text(text, encoding="utf-8")
    status, out, err = run("--no-cache", "--extend-select", "ACC990", "--fix", "train.py")
    assert status == 0, out + err
    fixed = (project / "train.py").read_text(encoding="utf-8").splitlines()
    assert fixed[7] == "        optimizer.step()  # noqa: E501"
