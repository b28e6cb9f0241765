"""One "was this file fully checked" state (issue 28 item 9): a stage after the rules that fails
(the fixes, the ``noqa`` directives, the unknown-code warnings, ``ACC990``) keeps the findings
already made, drops only its own part, and makes the file "not fully checked" with a reason,
which the summary line, the machine formats and the exit status read: never "All checks passed!"
for such a file."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from accumlint.fixes import propose
from accumlint.noqa import noqa_report, suppression
from accumlint.pipeline import engine
from accumlint.pipeline.engine import check_source
from accumlint.report.output import render, summary_line
from accumlint.run import runner, suggested_fixes
from accumlint.settings.config import default_codes
from tests.cli_helpers import ACC001_LOOP, cli
from tests.conftest import FakeCrash, install_rules

#: deep but valid expressions, each after a real ACC001 loop (reported at line 3, column 5)
DEEP = {
    "attribute-chain": "x = a" + ".b" * 1000,
    "unary-minus": "x = " + "-" * 500 + "1",
    "power-chain": "x = " + "2**" * 1000 + "2",
    "and-chain": "x = " + " and ".join(["a"] * 4000),
}
#: a syntax error on a line with an unclosed bracket and a directive naming an ACC code
UNCLOSED_WITH_NOQA = ACC001_LOOP + b"x = foo(  # noqa: ACC001\n"
FIXES_FAILED = "the fixes could not be computed (RecursionError"


def _where(findings: list) -> list[tuple[str, int, int]]:
    return [(f.code, f.line, f.column) for f in findings]


def _too_deep(*_: object, **__: object) -> None:
    raise RecursionError("maximum recursion depth exceeded")


@pytest.mark.parametrize("tail", DEEP.values(), ids=DEEP.keys())
def test_a_deep_valid_expression_keeps_its_finding_when_the_fixes_fail(
    tail: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reproduction: the fix-suggestion step raised RecursionError and the file's ACC001 was lost.
    A fix now generates only the statements it changed, so the deep expression elsewhere no
    longer breaks it; the stage failing (as it did) still keeps the finding."""
    data = ACC001_LOOP + tail.encode() + b"\n"
    result = check_source("deep.py", data, suggest=True)
    assert _where(result.findings) == [("ACC001", 3, 5)] and result.fully_checked
    assert [(f.code, fix.edits[0].location) for f, fix in (result.fixes or {}).items()] == [("ACC001", (3, 1))]
    monkeypatch.setattr(propose, "suggest_in_check", _too_deep)
    result = check_source("deep.py", data, suggest=True)
    assert _where(result.findings) == [("ACC001", 3, 5)]
    assert result.fixes == {}  # only the failed stage's part is missing
    assert not result.fully_checked
    assert len(result.incomplete) == 1 and result.incomplete[0].startswith(FIXES_FAILED), result.incomplete
    assert result.internal_errors == []


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_the_cli_never_says_all_checks_passed_for_a_deep_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, jobs: str
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(propose, "suggest_in_check", _too_deep)  # the workers are forked with it
    (tmp_path / "deep.py").write_bytes(ACC001_LOOP + DEEP["attribute-chain"].encode() + b"\n")
    result = cli("check", "-n", "--jobs", jobs, "--output-format", "concise", "deep.py")
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert result.stdout.splitlines()[0].startswith("deep.py:3:5: ACC001 ")
    assert result.stdout.splitlines()[-1] == "Found 1 finding. 1 file was not fully checked."
    assert "All checks passed!" not in result.stdout
    assert f"warning: deep.py: not fully checked: {FIXES_FAILED}" in result.stderr
    assert "internal error" not in result.stderr


def test_unclosed_bracket_with_a_noqa_directive_is_acc000(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reproduction: the directive reader's TokenError ended the file's check with an internal
    error, no ACC000 and "All checks passed!"."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "broken.py").write_bytes(UNCLOSED_WITH_NOQA)
    for fmt in ("concise", "github"):
        result = cli("check", "-n", "--jobs", "1", "--output-format", fmt, "broken.py")
        assert result.exit_code == 1, (result.stdout, result.stderr)
        assert "ACC000" in result.stdout and "'(' was never closed" in result.stdout
        assert "All checks passed!" not in result.stdout
        assert result.stderr == ""
    concise = cli("check", "-n", "--jobs", "1", "--output-format", "concise", "broken.py").stdout
    assert (
        concise.splitlines()[0] == "broken.py:7:8: ACC000 file could not be checked: syntax error: '(' was never closed"
    )


def test_the_directives_of_a_file_that_cannot_be_tokenized_are_read_by_line() -> None:
    text = "opt.zero_grad()  # noqa: ACC001\nx = foo(  # noqa: ACC777\n"
    assert suppression.comments(text) == [(1, "# noqa: ACC001", False), (2, "# noqa: ACC777", False)]
    assert noqa_report.unknown_codes(text, ["ACC001"]) == [(2, "ACC777")]
    assert [use.line for use in noqa_report.directives(text)] == [1, 2]


def _raise(*_: object, **__: object) -> None:
    raise RuntimeError("stage broke")


def test_a_failed_noqa_stage_keeps_every_finding(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine, "apply_noqa", _raise)
    result = check_source("t.py", ACC001_LOOP.replace(b"zero_grad()", b"zero_grad()  # noqa: ACC001"))
    assert _where(result.findings) == [("ACC001", 3, 5)]  # a directive that cannot be read suppresses nothing
    assert result.incomplete == ["the `noqa` directives could not be computed (RuntimeError: stage broke)"]


def test_a_failed_warning_stage_still_checks_the_file_and_is_not_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The unknown-code warnings run before the check: their failure used to skip the file's check."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(runner, "_unknown_noqa_codes", _raise)
    (tmp_path / "train.py").write_bytes(ACC001_LOOP.replace(b"zero_grad()", b"zero_grad()  # noqa: ACC3"))
    for _ in range(2):  # the second run must not be answered from a cache entry that says it was complete
        result = cli("check", "--jobs", "1", "--output-format", "concise", "train.py")
        assert result.exit_code == 1, (result.stdout, result.stderr)
        assert result.stdout.startswith("train.py:3:5: ACC001 ")
        assert "Found 1 finding. 1 file was not fully checked." in result.stdout.splitlines()
        assert (
            "warning: train.py: not fully checked: the `noqa` directives' codes could not be computed "
            "(RuntimeError: stage broke)"
        ) in result.stderr


def test_a_failed_fix_stage_of_a_cached_file_is_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    finding = check_source("t.py", ACC001_LOOP).findings[0]
    monkeypatch.setattr(suggested_fixes, "suggest_source", _raise)
    incomplete: dict[str, list[str]] = {}
    fixes = suggested_fixes.suggest_run([finding], {"t.py": ACC001_LOOP}, lambda _: default_codes(), None, incomplete)
    assert fixes == {}
    assert incomplete == {"t.py": ["the fixes could not be computed (RuntimeError: stage broke)"]}


def test_an_internal_error_alone_is_not_a_clean_verdict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_rules(monkeypatch, [FakeCrash])
    monkeypatch.chdir(tmp_path)
    (tmp_path / "clean.py").write_text("x = 1\n", encoding="utf-8")
    for fmt in ("text", "concise"):
        result = cli("check", "-n", "--exit-zero", "--output-format", fmt, "clean.py")
        assert result.exit_code == 1
        assert result.stdout == "No findings, but 1 file was not fully checked.\n"
    sarif = json.loads(cli("check", "-n", "--output-format", "sarif", "clean.py").stdout)
    (invocation,) = sarif["runs"][0]["invocations"]
    assert invocation["executionSuccessful"] is False
    assert invocation["toolExecutionNotifications"][0]["message"]["text"] == "not fully checked: an internal error"


def test_summary_line_reads_the_state() -> None:
    assert summary_line(0) == "All checks passed!"
    assert summary_line(0, incomplete=2) == "No findings, but 2 files were not fully checked."
    assert summary_line(3, incomplete=1) == "Found 3 findings. 1 file was not fully checked."


def test_machine_formats_read_the_state() -> None:
    incomplete = {"deep.py": ["the fixes could not be computed (RecursionError)"]}
    sarif = json.loads(render([], "sarif", incomplete=incomplete))["runs"][0]["invocations"][0]
    assert sarif["executionSuccessful"] is False
    assert sarif["toolExecutionNotifications"][0]["message"]["text"] == (
        "not fully checked: the fixes could not be computed (RecursionError)"
    )
    assert json.loads(render([], "sarif"))["runs"][0]["invocations"] == [{"executionSuccessful": True}]
    root = ET.fromstring(render([], "junit", incomplete=incomplete))
    assert (root.get("errors"), root.get("failures"), root.get("tests")) == ("1", "0", "1")
    (error,) = root.iter("error")
    assert error.get("message") == "the fixes could not be computed (RecursionError)"
    assert [case.get("name") for case in root.iter("testcase")] == ["fully checked"]  # no passing "No findings"
    (issue,) = json.loads(render([], "gitlab", incomplete=incomplete))
    assert (issue["check_name"], issue["description"], issue["location"]) == (
        "not-fully-checked",
        "not fully checked: the fixes could not be computed (RecursionError)",
        {"path": "deep.py", "lines": {"begin": 1, "end": 1}},
    )
    (diagnostic,) = json.loads(render([], "rdjson", incomplete=incomplete))["diagnostics"]
    assert (diagnostic["message"], diagnostic["location"], diagnostic["severity"]) == (
        "not fully checked: the fixes could not be computed (RecursionError)",
        {"path": "deep.py"},
        "WARNING",
    )
    assert render([], "github", incomplete=incomplete) == (
        "::warning file=deep.py,title=not fully checked::the fixes could not be computed (RecursionError)"
    )


def test_check_one_reports_the_state(monkeypatch: pytest.MonkeyPatch) -> None:
    data = ACC001_LOOP + DEEP["unary-minus"].encode() + b"\n"
    result = runner.check_one("deep.py", data, default_codes(), suggest=True)
    assert _where(result.findings) == [("ACC001", 3, 5)] and result.fully_checked
    monkeypatch.setattr(propose, "suggest_in_check", _too_deep)  # its worker is forked with it
    result = runner.check_one("deep.py", data, default_codes(), suggest=True)
    assert _where(result.findings) == [("ACC001", 3, 5)]
    assert not result.fully_checked


def test_findings_that_cannot_be_placed_are_acc000(monkeypatch: pytest.MonkeyPatch) -> None:
    def too_deep(*_: object) -> None:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(engine, "place", too_deep)
    result = check_source("t.py", ACC001_LOOP)
    assert _where(result.findings) == [("ACC000", 1, 1)]
    assert result.findings[0].message == "file could not be checked: nesting too deep to place the findings"


@pytest.mark.parametrize("how", ["syntax", "too-large", "unreadable"])
def test_a_file_whose_acc000_is_not_selected_is_not_called_clean(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """Issue 28 item 9: with ACC000 ignored, a file that could not be checked is reported as not
    fully checked (exit 1), never as "All checks passed!"; a clean file beside it changes nothing."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "clean.py").write_text("x = 1\n", encoding="utf-8")
    broken = tmp_path / "broken.py"
    if how == "syntax":
        broken.write_bytes(ACC001_LOOP + b"def f(:\n")
    elif how == "too-large":
        broken.write_bytes(ACC001_LOOP + b"#" * (5 * 2**20) + b"\n")
    else:
        broken.write_bytes(ACC001_LOOP)
        real_open = runner.read_signed

        def refuse(path: str, *args: object):  # as root, a mode cannot make the read fail
            if path.endswith("broken.py"):
                raise PermissionError(13, "Permission denied", path)
            return real_open(path, *args)

        monkeypatch.setattr(runner, "read_signed", refuse)
    result = cli("check", "-n", "--jobs", "1", "--ignore", "ACC000", ".")
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert "All checks passed!" not in result.stdout
    assert "No findings, but 1 file was not fully checked." in result.stdout
    assert "warning: broken.py: not fully checked: file could not be" in result.stderr, result.stderr
