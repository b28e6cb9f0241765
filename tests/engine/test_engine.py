"""One file through the engine: decoding, parse errors, rule crashes, noqa."""

from __future__ import annotations

from pathlib import Path

import pytest

from accumlint.pipeline import engine
from accumlint.pipeline.engine import check_source
from tests.conftest import FakeCrash, FakeZeroGrad, install_rules
from tests.shared_data import REPO


def codes_at(result: engine.FileResult) -> list[tuple[str, int, int]]:
    return [(f.code, f.line, f.column) for f in result.findings]


def test_syntax_error_is_acc000_at_the_interpreters_position() -> None:
    result = check_source("bad.py", b"import os\n\ndef f(:\n    pass\n", [])
    assert codes_at(result) == [("ACC000", 3, 7)]
    assert result.findings[0].message == "file could not be checked: syntax error: invalid syntax"
    unclosed = check_source("bad.py", b"x = 1\ny = (\nz = 2\n", [])
    assert codes_at(unclosed) == [("ACC000", 2, 5)]
    assert "'(' was never closed" in unclosed.findings[0].message


def test_undecodable_bytes_are_acc000_at_the_bad_byte() -> None:
    result = check_source("bin.py", b"x = 1\ny = '\xff'\n", [])
    assert codes_at(result) == [("ACC000", 2, 6)]
    assert "undecodable bytes" in result.findings[0].message


def test_unknown_coding_declaration_is_acc000() -> None:
    result = check_source("enc.py", b"# -*- coding: klingon -*-\nx = 1\n", [])
    assert [f.code for f in result.findings] == ["ACC000"]
    assert "klingon" in result.findings[0].message


def test_latin1_file_with_coding_line_decodes(monkeypatch: pytest.MonkeyPatch) -> None:
    install_rules(monkeypatch, [FakeZeroGrad])
    data = "# -*- coding: latin-1 -*-\nname = 'café'\nopt.zero_grad()\n".encode("latin-1")
    assert b"\xe9" in data  # not valid UTF-8
    result = check_source("latin.py", data, engine.rules_for(["ACC001"]))
    assert codes_at(result) == [("ACC001", 3, 1)]


def test_utf8_bom_file_parses(monkeypatch: pytest.MonkeyPatch) -> None:
    install_rules(monkeypatch, [FakeZeroGrad])
    data = b"\xef\xbb\xbfimport torch\n    \nopt.zero_grad()\n"
    result = check_source("bom.py", data, engine.rules_for(["ACC001"]))
    assert codes_at(result) == [("ACC001", 3, 1)]


def test_rule_crash_is_an_internal_error_and_other_rules_still_run(monkeypatch: pytest.MonkeyPatch) -> None:
    install_rules(monkeypatch, [FakeZeroGrad, FakeCrash])
    result = check_source("t.py", b"opt.zero_grad()\n", engine.rules_for(["ACC001", "ACC002"]))
    assert codes_at(result) == [("ACC001", 1, 1)]
    assert len(result.internal_errors) == 1
    assert "t.py: internal error in ACC002" in result.internal_errors[0]
    assert "boom" in result.internal_errors[0]


def test_findings_carry_span_url_and_noqa_applies(monkeypatch: pytest.MonkeyPatch) -> None:
    install_rules(monkeypatch, [FakeZeroGrad])
    source = b"opt.zero_grad()\nmodel.zero_grad()  # noqa: ACC001\n"
    (finding,) = check_source("t.py", source, engine.rules_for(["ACC001"])).findings
    assert (finding.line, finding.column, finding.end_line, finding.end_column) == (1, 1, 1, 16)
    assert finding.url.endswith("/rules/ACC001-fake-zero-grad/README.md")


def test_a_bad_file_does_not_stop_the_run(
    fake_rules: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from accumlint.cli.app import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "a_bad.py").write_bytes(b"def f(:\n")
    (tmp_path / "b_bin.py").write_bytes(b"s = '\xff'\n")
    (tmp_path / "c_good.py").write_bytes(b"import torch\nopt.zero_grad()\n")
    result = CliRunner().invoke(main, ["check", "--output-format", "concise", "."])
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert lines[0].startswith("a_bad.py:1:7: ACC000 file could not be checked: syntax error")
    assert lines[1].startswith("b_bin.py:1:6: ACC000 file could not be checked: undecodable bytes")
    assert lines[2] == "c_good.py:2:1: ACC001 `zero_grad` is called here"
    assert lines[-1] == "Found 3 findings."


def test_syntax_error_is_reported_where_a_rule_needs_the_file() -> None:
    """ACC000 for a file a selected rule would read; a file no rule can fire on is not parsed."""
    training = check_source("train.py", b"loss.backward()\ndef f(:\n    pass\n")
    assert codes_at(training) == [("ACC000", 2, 7)]
    plain = b"x = 1\ndef f(:\n    pass\n"
    assert check_source("plain.py", plain).findings == []
    assert codes_at(check_source("plain.py", plain, [])) == [("ACC000", 2, 7)]  # only ACC000 selected
    assert check_source("ok.py", b"x = 1\n").findings == []


def test_a_marker_only_in_a_comment_or_string_is_no_marker() -> None:
    """`backward` in a comment or string does not make a file relevant: like a file without
    markers, it is decided by its bytes, unparsed (no ACC000), unless only ACC000 is selected."""
    assert check_source("notes.py", b"# call loss.backward() per microbatch\nx = 'backward'\n").findings == []
    broken = b"# loss.backward()\ns = 'loss.backward()'\ndef f(:\n"
    assert check_source("notes.py", broken).findings == []
    assert codes_at(check_source("notes.py", broken, [])) == [("ACC000", 3, 7)]


def test_every_rule_keeps_its_own_examples_when_selected_alone() -> None:
    """The marker prefilter must never drop a file a rule fires on, whatever the selection."""

    from accumlint.pipeline.engine import rules_for

    root = REPO / "rules"
    for folder in sorted(root.glob("ACC*")):
        code = folder.name.split("-")[0]
        for example in sorted(folder.glob("bad_*.py")):
            marked = f"expect: {code}" in example.read_text() or f", {code}" in example.read_text()
            found = [f.code for f in check_source(str(example), example.read_bytes(), rules_for([code])).findings]
            assert (code in found) == marked, example


def test_screen_then_check_screened_is_check_source() -> None:
    """The two stages the worker pool runs apart give what one call gives, on every example."""
    repo = REPO
    examples = sorted([*repo.glob("rules/ACC*/*.py"), *repo.glob("examples/*.py")])
    handed_on = 0
    for path in examples:
        data = path.read_bytes()
        verdict = engine.screen(str(path), data)
        if isinstance(verdict, engine.Screened):
            handed_on += 1
            staged = engine.check_screened(str(path), verdict)
        else:
            staged = verdict
        whole = check_source(str(path), data)
        assert (staged.findings, staged.internal_errors) == (whole.findings, whole.internal_errors), path
    assert handed_on >= 60
    # a file the cheap stages decide never reaches the second stage
    assert engine.screen("gpus.py", b"n = torch.cuda.device_count()\n") == engine.FileResult("gpus.py")
