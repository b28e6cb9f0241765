"""The control-flow, name and precision families of ../shared/patterns (``flow_``, ``fp_``,
``cfg_name_``, ``sync_``, ``lr_``, ``dp_``, ``mem_``): a faulty sample reports one of its codes
on one of its lines (``expected.tsv``), a silent twin reports nothing with every rule
selected. Skipped where the shared samples are absent."""

from __future__ import annotations

import pytest

from accumlint.checks import ALL_RULES
from accumlint.pipeline.engine import check_source, rules_for
from tests.shared_data import needs_shared, pattern_rows, require_shared, shared_params

pytestmark = needs_shared  # every test reads ../shared/patterns

FAMILIES = ("flow_", "fp_", "cfg_name_", "sync_", "lr_", "dp_", "mem_")
EVERY_RULE = rules_for(rule.code for rule in ALL_RULES)
#: samples the model does not decide yet, with the reason (strict: a pass makes the test fail)
NOT_YET: dict[str, str] = {}


def _param(row: dict[str, str]):
    reason = NOT_YET.get(row["file"])
    marks = [pytest.mark.xfail(reason=reason, strict=True)] if reason else []
    return pytest.param(row, id=row["file"], marks=marks)


@pytest.mark.parametrize("row", shared_params([_param(row) for row in pattern_rows(FAMILIES)],
                                              "patterns", "expected.tsv"))
def test_pattern(row: dict[str, str]) -> None:
    path = require_shared("patterns", row["file"])
    found = [(f.code, f.line) for f in check_source(str(path), path.read_bytes(), EVERY_RULE).findings]
    if row["required"] == "-":
        assert found == []
        return
    codes = {code for part in row["required"].split(";") for code in part.split("|")}
    lines = {int(line) for line in row["lines"].split(",")}
    assert any(code in codes and line in lines for code, line in found), found


def test_every_family_has_samples() -> None:
    require_shared("patterns", "expected.tsv")
    names = [row["file"] for row in pattern_rows(FAMILIES)]
    assert all(any(name.startswith(family) for name in names) for family in FAMILIES)
