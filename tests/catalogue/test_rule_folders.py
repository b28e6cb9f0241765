"""The rule folder is the unit of test: ``rules/<CODE>-<name>/`` holds, besides its runnable
bad/good scripts, the rule's snippet cases and a snapshot of its findings.

- ``cases.toml``: ``[[invalid]]`` snippets with the ``findings`` (code, line) they must produce
  and ``[[valid]]`` snippets that must produce none, under the default rule set or under
  ``select`` (comma-separated codes as ``--select``, for off-by-default rules; ``"ALL"``: every rule);
- ``snapshot.txt``: every finding of every ``bad_*.py`` script of the folder, with its range and
  message, as ``accumlint check --select ALL`` reports it. Regenerate after an intended change
  with ``ACCUMLINT_UPDATE_SNAPSHOTS=1 pytest tests/catalogue/test_rule_folders.py`` and read the diff.
"""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest

from accumlint.checks import ALL_RULES
from accumlint.checks.base import Rule
from accumlint.pipeline.engine import check_source, rules_for
from tests.shared_data import REPO

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

RULES_DIR = REPO / "rules"
FOLDERS = sorted(p for p in RULES_DIR.glob("ACC*") if p.is_dir())
DEFAULT = rules_for(rule.code for rule in ALL_RULES if rule.default_enabled)
EVERY = rules_for(rule.code for rule in ALL_RULES)
UPDATE = os.environ.get("ACCUMLINT_UPDATE_SNAPSHOTS") == "1"


def _cases(kind: str) -> list[tuple[str, dict]]:
    found = []
    for folder in FOLDERS:
        path = folder / "cases.toml"
        if path.is_file():
            for case in tomllib.loads(path.read_text(encoding="utf-8")).get(kind, []):
                found.append((f"{folder.name[:6]}/{case['name']}", case))
    return found


def case_rules(case: dict) -> list[Rule]:
    """The rules a case is checked with: the default set, or those of its ``select``."""
    select = case.get("select")
    return DEFAULT if select is None else EVERY if select == "ALL" else rules_for(select.split(","))


def case_source(case: dict) -> bytes:
    """A case's snippet as the bytes of a file (line 1: its first line)."""
    return textwrap.dedent(case["code"]).lstrip("\n").encode()


def _lint(case: dict) -> list[tuple[str, int]]:
    return [(f.code, f.line) for f in check_source("snippet.py", case_source(case), case_rules(case)).findings]


def case_code(name: str) -> str:
    """The snippet of the one case called ``name`` in any folder's ``cases.toml`` (for the tests
    elsewhere that read a case's message or model); ``AssertionError`` unless exactly one."""
    (code,) = [case["code"] for kind in ("invalid", "valid") for _, case in _cases(kind) if case["name"] == name]
    return code


INVALID = _cases("invalid")
VALID = _cases("valid")


@pytest.mark.parametrize("case", [c for _, c in INVALID], ids=[i for i, _ in INVALID])
def test_invalid_case(case: dict) -> None:
    assert _lint(case) == [tuple(f) for f in case["findings"]]


@pytest.mark.parametrize("case", [c for _, c in VALID], ids=[i for i, _ in VALID])
def test_valid_case(case: dict) -> None:
    assert _lint(case) == []


def snapshot(folder: Path) -> str:
    """The findings of the folder's bad scripts: ``file:line:col-end_line:end_col CODE message``."""
    lines = []
    for script in sorted(folder.glob("bad_*.py")):
        for f in check_source(script.name, script.read_bytes(), EVERY).findings:
            lines.append(f"{script.name}:{f.line}:{f.column}-{f.end_line}:{f.end_column} {f.code} {f.message}")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name[:6])
def test_snapshot_of_the_bad_scripts(folder: Path) -> None:
    path = folder / "snapshot.txt"
    now = snapshot(folder)
    if UPDATE:
        path.write_text(now, encoding="utf-8")
    assert path.is_file(), (f"no {path.name}: run ACCUMLINT_UPDATE_SNAPSHOTS=1 pytest {__file__} "
                            f"-k '{folder.name[:6]} and snapshot'")
    assert now == path.read_text(encoding="utf-8")


def test_every_case_file_is_well_formed() -> None:
    for folder in FOLDERS:
        path = folder / "cases.toml"
        if not path.is_file():
            continue
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        assert set(data) <= {"invalid", "valid"}, path
        for case in data.get("invalid", []):
            assert any(code == folder.name[:6] for code, _ in case["findings"]), (path, case["name"])
            assert set(case) <= {"name", "code", "findings", "select"}, (path, case["name"])
        for case in data.get("valid", []):
            assert set(case) <= {"name", "code", "select"}, (path, case["name"])
        names = [c["name"] for kind in ("invalid", "valid") for c in data.get(kind, [])]
        assert len(names) == len(set(names)), path
