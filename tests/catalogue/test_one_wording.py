"""One wording per rule: a finding's help is its spec's ``fix`` followed by what is specific to its
site (``accumlint.spec.help_text``), in the linter and in the runtime guard; a rule page's summary
line is its spec's ``summary``."""

from __future__ import annotations

from pathlib import Path

import pytest

from accumlint.checks import ALL_RULES
from accumlint.checks.base import Hit
from accumlint.pipeline.engine import check_source, rules_for
from accumlint.report.rule_docs import page_summary, summary_line
from accumlint.spec import BY_CODE, HERE, RULES, UNAPPLIED_TAIL, WEIGHTED_TAIL, help_text, spec_of
from runtime_guard.checks.base import finding
from tests.shared_data import REPO

RULES_DIR = REPO / "rules"
BAD_EXAMPLES = sorted(RULES_DIR.glob("ACC*/bad_*.py"))
SELECTED = rules_for(rule.code for rule in ALL_RULES)


def test_help_is_the_spec_fix_then_the_site_part() -> None:
    spec = spec_of("ACC302")
    assert help_text(spec) == "call scaler.unscale_(optimizer) once per update, right before clipping"
    assert help_text(spec, "the scaler is `amp`") == (
        "call scaler.unscale_(optimizer) once per update, right before clipping; here: the scaler is `amp`")
    assert HERE == "; here: "


def test_a_rule_without_a_spec_gets_its_site_part_alone() -> None:
    assert help_text(None, "do not call `zero_grad`") == "do not call `zero_grad`"
    assert help_text(None) == ""


def test_a_hit_carries_no_help_unless_its_site_needs_one() -> None:
    assert Hit(node=None, message="m").site_fix == ""  # type: ignore[arg-type]


def test_the_guard_composes_its_help_as_the_linter() -> None:
    plain = finding("ACC001", 1, 0, "observed")
    assert plain.fix == spec_of("ACC001").fix
    weighted = finding("ACC005", 2, None, "observed", "Z F B", WEIGHTED_TAIL)
    assert weighted.fix == f"{spec_of('ACC005').fix}; here: the tail is already applied: divide its losses by its " \
                           "true size r"
    assert help_text(spec_of("ACC005"), UNAPPLIED_TAIL).endswith("reset the gradients (and the counter) at the "
                                                                 "start of each epoch")


@pytest.mark.parametrize("path", BAD_EXAMPLES, ids=lambda p: f"{p.parent.name.split('-')[0]}/{p.name}")
def test_every_catalogue_finding_begins_with_its_spec_fix(path: Path) -> None:
    findings = check_source(str(path), path.read_bytes(), SELECTED).findings
    assert findings, path
    for found in findings:
        fix = BY_CODE[found.code].fix
        assert found.fix.startswith(fix), (found.code, found.line, found.fix)
        site = found.fix[len(fix):]
        assert site == "" or (site.startswith(HERE) and len(site) > len(HERE)), (found.code, found.line, site)
        assert fix not in site, (found.code, found.line)  # the site part never restates the spec


def test_some_catalogue_findings_name_their_site() -> None:
    """Site parts survive where the spec's fix leaves the choice open (ACC005: the tail is applied,
    only weighted wrong), and are absent where it says it all (ACC403)."""
    sites = {}
    for path in BAD_EXAMPLES:
        for found in check_source(str(path), path.read_bytes(), SELECTED).findings:
            sites.setdefault(found.code, set()).add(found.fix[len(BY_CODE[found.code].fix):])
    assert "; here: the tail is already applied: divide its losses by its true size r" in sites["ACC005"]
    assert sites["ACC403"] == {""}  # the spec's fix names every alternative


def test_every_rule_page_states_its_spec_summary() -> None:
    for spec in RULES:
        if spec.implemented_by is None:
            continue  # the engine's codes have a README section, not a page
        page = (RULES_DIR / f"{spec.code}-{spec.name}" / "README.md").read_text(encoding="utf-8")
        assert page_summary(page) == spec.summary, spec.code
        assert f"\n\n{summary_line(spec.summary)}\n\n## " in page, spec.code
