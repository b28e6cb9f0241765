"""Fixes computed inside the check, at the node the rule reported, and kept in the cache.

The check that still holds a finding's node locates the fixer there (no second parse, no
positions of the whole module); a warm run shows the fixes it stored. Both must give exactly
the fixes found by position in a new parse (:func:`accumlint.run.suggested_fixes.suggest_source`).
"""

from __future__ import annotations

import json
from pathlib import Path

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, ParentNodeProvider

from accumlint.fixes.base import parent_map
from accumlint.model.names import walk
from accumlint.pipeline import engine
from accumlint.run import cache
from accumlint.run.suggested_fixes import suggest_source
from tests.cli_helpers import ACC001_LOOP, cli
from tests.runs.test_cache import entries, sign_again
from tests.shared_data import REPO

EVERY_CODE = frozenset(rule.code for rule in engine.ALL_RULES_INSTANCES)
#: every catalogue example with a fixable finding, and the bad examples of the other rules
EXAMPLES = sorted(p for p in (REPO / "rules").glob("*/bad_*.py"))

#: two fixable findings in one file (a reset inside the group, a kept loss), and a scheduler
#: stepped per microbatch inside a helper-free loop
TWO_FIXES = b"""\
losses = []
for i, batch in enumerate(loader):
    loss = model(batch).mean() / 4
    optimizer.zero_grad()
    loss.backward()
    losses.append(loss)
    scheduler.step()
    if (i + 1) % 4 == 0:
        optimizer.step()
"""


def test_the_check_finds_the_fixes_that_a_new_parse_finds() -> None:
    fixed = 0
    for path in EXAMPLES:
        data = path.read_bytes()
        checked = engine.check_source(str(path), data, suggest=True)
        assert checked.fixes is not None
        by_position = suggest_source(str(path), data, EVERY_CODE, current=checked.findings)
        assert checked.fixes == by_position, path
        fixed += len(checked.fixes)
    assert fixed >= 17  # the catalogue's fixable examples: each has its fix


def test_two_fixes_in_one_file_and_a_check_without_suggest() -> None:
    checked = engine.check_source("train.py", TWO_FIXES, suggest=True)
    assert checked.fixes is not None
    codes = sorted(f.code for f in checked.fixes)
    assert {"ACC001", "ACC201"} <= set(codes)
    assert checked.fixes == suggest_source("train.py", TWO_FIXES, EVERY_CODE, current=checked.findings)
    assert engine.check_source("train.py", TWO_FIXES).fixes is None  # not asked: not computed


def test_the_parent_map_is_the_providers() -> None:
    module = cst.parse_module((REPO / "rules" / "ACC201-loss-kept-with-graph" / "bad_running_total.py").read_text())
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    provided = wrapper.resolve(ParentNodeProvider)
    mapped = parent_map(module)
    nodes = list(walk(module))[1:]
    assert len(nodes) > 100
    assert all(mapped[node] is provided[node] for node in nodes)


def json_findings(*args: str) -> list[dict]:
    result = cli("check", "--output-format", "json", "--exit-zero", "--jobs", "1", *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(cache.CACHE_DIR_ENV, raising=False)
    (tmp_path / "train.py").write_bytes(ACC001_LOOP)
    (tmp_path / "two.py").write_bytes(TWO_FIXES)
    return tmp_path


def test_a_warm_run_shows_the_stored_fixes_without_parsing(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cold = json_findings()
    assert sum(1 for f in cold if f["fix"]) >= 3
    (file,) = sorted((project / cache.CACHE_DIR_NAME).glob("*/*.json"))
    stored = json.loads(file.read_text(encoding="utf-8"))["files"]
    assert all("fixes" in entry for entry in stored.values() if entry["findings"])

    def refuse(*args: object, **kwargs: object) -> object:
        raise AssertionError("a warm run parsed a file")

    monkeypatch.setattr(engine, "parse_module", refuse)
    assert json_findings() == cold


def test_a_run_that_shows_no_fixes_stores_none_and_a_later_one_computes_them(project: Path) -> None:
    cold = json_findings("--no-cache")
    result = cli("check", "--output-format", "github", "--exit-zero", "--jobs", "1")
    assert result.exit_code == 0 and "ACC001" in result.stdout
    (file,) = sorted((project / cache.CACHE_DIR_NAME).glob("*/*.json"))
    stored = json.loads(file.read_text(encoding="utf-8"))["files"]
    assert not any("fixes" in entry for entry in stored.values())
    assert json_findings() == cold  # the cached findings, their fixes found by position


def test_a_forged_fix_makes_the_entry_unusable(project: Path) -> None:
    cold = json_findings()
    (file,) = sorted((project / cache.CACHE_DIR_NAME).glob("*/*.json"))
    data = json.loads(file.read_text(encoding="utf-8"))
    for entry in data["files"].values():
        for row in entry.get("fixes") or ():
            if row is not None:
                row[2][0][4] = "import os; os.system('x')\n"
    file.write_text(json.dumps(data), encoding="utf-8")
    assert json_findings() == cold  # the entries do not verify: the files are checked anew


@pytest.mark.parametrize(
    "forged",
    [[["safe", "m", [[0, 1, 1, 1, ""]]]], [["safe", "m", [[1, 1, 10**30, 1, ""]]]], [["sure", "m", []]],
     [["safe", "m", [[1, 1, 1, 1, 7]]]], [None, None], "x"],
    ids=["line-0", "huge-line", "applicability", "content", "one-per-finding", "not-a-list"],
)
def test_forged_fixes_are_ignored_even_when_signed(project: Path, forged: object) -> None:
    (project / "two.py").unlink()
    cold = json_findings()
    (file,) = sorted((project / cache.CACHE_DIR_NAME).glob("*/*.json"))
    (entry,) = entries(file).values()
    assert entry["fixes"][0][0] == "safe"  # the stored fix of the ACC001 finding
    sign_again(file, project, lambda entry: entry.update(fixes=forged))
    assert json_findings() == cold  # checked anew
    (entry,) = entries(file).values()
    assert entry["fixes"][0][0] == "safe"


def test_a_report_proposes_fixes_without_checking_the_file_again(monkeypatch: pytest.MonkeyPatch) -> None:
    # verification (a check of the fixed file per fix) is left to --fix, --show-fixes and code actions
    calls = []
    real = engine._check_text
    monkeypatch.setattr(engine, "_check_text", lambda *args: calls.append(args[0]) or real(*args))
    checked = engine.check_source("train.py", TWO_FIXES, suggest=True)
    assert checked.fixes is not None and {"ACC001", "ACC201"} <= {f.code for f in checked.fixes}
    assert calls == ["train.py"]


def test_the_edits_of_the_changed_statements_make_the_fixed_module() -> None:
    # only the top-level statements a fix changed are generated; the edits must still turn the file
    # into the fixer's whole module, also where the changed statement occurs twice in the file
    from accumlint.files.text_edits import apply_edits
    from accumlint.fixes.base import Located
    from accumlint.fixes.rules import FIXERS

    sources = [(str(path), path.read_text(encoding="utf-8")) for path in EXAMPLES]
    sources.append(("twice.py", (ACC001_LOOP + b"\n" + ACC001_LOOP).decode()))
    checked_fixes = 0
    for path, text in sources:
        checked = engine.check_source(path, text.encode(), suggest=True)
        for finding, fix in (checked.fixes or {}).items():
            if finding.code not in FIXERS:
                continue
            edit = FIXERS[finding.code][1](Located.at_position(engine.parse_module(text), finding))
            assert edit is not None
            assert apply_edits(text, fix.edits) == edit.module.code, (path, finding.line)
            checked_fixes += 1
    twice = engine.check_source("twice.py", ACC001_LOOP + b"\n" + ACC001_LOOP, suggest=True)
    assert sorted(f.line for f in twice.fixes or ()) == [3, 10]
    assert sorted(fix.edits[0].location[0] for fix in (twice.fixes or {}).values()) == [3, 10]
    assert checked_fixes >= 19
