"""Every fix the catalogue, our reduced loops and the shared cases expect still applies
(``tests/data/expected_fixes.toml``; the shared cases' in the slow tier).

A report shows the fix each finding's rule proposes, without checking the fixed file again;
``--fix``, ``--show-fixes`` and a code action verify it. For each expected fix this checks all
three steps on its source: the check proposes a fix for the finding (what ``[*]`` and the JSON
``fix`` show), verification keeps it with the expected applicability, and ``--fix
--unsafe-fixes`` (:func:`accumlint.run.apply_fixes.fix_source`) applies the fixes of that code.
"""

from __future__ import annotations

import sys
from collections import Counter, defaultdict

import pytest

from accumlint.pipeline.engine import check_source
from accumlint.run.apply_fixes import fix_source
from accumlint.run.suggested_fixes import verify
from tests.catalogue.test_rule_folders import DEFAULT, EVERY, INVALID, RULES_DIR, case_rules, case_source
from tests.shared_data import DATA, needs_shared, require_shared

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

EXPECTED_FIXES = DATA / "expected_fixes.toml"
FIXES = tomllib.loads(EXPECTED_FIXES.read_text(encoding="utf-8"))["fix"]
BY_SOURCE: dict[tuple[str, str], list[dict]] = defaultdict(list)
for _fix in FIXES:
    BY_SOURCE[_fix["source"], _fix["name"]].append(_fix)
CASES = dict(INVALID)


def _source(kind: str, name: str) -> tuple[str, bytes, list]:
    """``(path, bytes, rules)`` of an expected fix's source, as the list describes it."""
    if kind == "case":
        case = CASES[name]
        return "snippet.py", case_source(case), case_rules(case)
    if kind == "script":
        path = RULES_DIR / name
        return str(path), path.read_bytes(), EVERY
    if kind == "data":
        path = DATA / "fix_cases" / name
        return str(path), path.read_bytes(), DEFAULT
    path = require_shared("cases", name)
    return str(path), path.read_bytes(), DEFAULT


def test_the_list_holds_every_kind_of_fix_and_case_011() -> None:
    assert {f["code"] for f in FIXES} == {"ACC001", "ACC006", "ACC101", "ACC201", "ACC304"}
    assert {f["source"] for f in FIXES} == {"case", "script", "shared", "data"}
    restored = [f for f in FIXES if f["name"] == "011_scheduler_every_microbatch.py"]
    assert [(f["code"], f["line"], f["applicability"]) for f in restored] == [("ACC304", 32, "unsafe")]
    # every code a shared case's fix has, one of our own loops has too: the fast tier keeps each kind
    by_kind = {kind: {f["code"] for f in FIXES if f["source"] == kind} for kind in ("shared", "data")}
    assert by_kind["data"] == by_kind["shared"]
    assert {path.name for path in (DATA / "fix_cases").glob("*.py")} == {
        f["name"] for f in FIXES if f["source"] == "data"}


@pytest.mark.parametrize(
    ("kind", "name"),
    [pytest.param(kind, name, id=f"{kind}:{name}", marks=[needs_shared] if kind == "shared" else [])
     for kind, name in sorted(BY_SOURCE)],
)
def test_every_expected_fix_is_offered_verified_and_applied(kind: str, name: str) -> None:
    path, data, rules = _source(kind, name)
    expected = BY_SOURCE[kind, name]
    checked = check_source(path, data, rules, suggest=True)
    proposed = checked.fixes or {}
    for fix in expected:
        [finding] = [f for f in checked.findings if (f.code, f.line) == (fix["code"], fix["line"])]
        assert finding in proposed, f"{fix['code']} at line {fix['line']}: no fix offered"
        kept = verify(path, data, {finding: proposed[finding]}, checked.findings, rules)
        assert finding in kept, f"{fix['code']} at line {fix['line']}: the fix fails verification"
        assert kept[finding].applicability == fix["applicability"]
    codes = {rule.code for rule in rules}
    applied = fix_source(path, data, rules, unsafe=True, codes=codes).applied
    wanted = Counter(fix["code"] for fix in expected)
    assert all(applied[code] >= n for code, n in wanted.items()), (applied, wanted)
