"""The rule spec and the registry read without importing the rules, and what a light import loads."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from accumlint import spec
from accumlint.checks import ALL_RULES
from accumlint.pipeline.engine import PARSE_ERROR_CODE, PARSE_ERROR_NAME, PARSE_ERROR_URL
from accumlint.spec import registry
from accumlint.spec.findings import Severity
from tests.shared_data import REPO


def test_the_table_is_the_rule_classes() -> None:
    assert [(e.code, e.qualified_name, e.default_enabled) for e in registry.RULES] == [
        (rule.code, f"{rule.__module__}.{rule.__qualname__}", rule.default_enabled) for rule in ALL_RULES
    ]
    assert (PARSE_ERROR_CODE, PARSE_ERROR_NAME, PARSE_ERROR_URL) == (
        registry.PARSE_ERROR_CODE, registry.PARSE_ERROR_NAME, registry.PARSE_ERROR_URL)


def test_every_rule_class_takes_its_metadata_from_its_spec() -> None:
    for rule in ALL_RULES:
        entry = spec.spec_of(rule.code)
        assert rule.spec is entry
        assert (rule.name, rule.severity, rule.principle, rule.summary, rule.default_enabled, rule.url()) == (
            entry.name, entry.severity, entry.principle, entry.summary, entry.default_enabled, entry.url)



def test_a_rule_class_may_not_restate_its_spec() -> None:
    from accumlint.checks.base import Rule

    with pytest.raises(TypeError, match="declares severity: the spec of ACC001 says it"):
        type("ZeroGradInsideGroup", (Rule,), {"code": "ACC001", "severity": Severity.INFO,
                                              "__module__": "accumlint.checks.resets"})


def test_the_spec_declares_families_principles_and_wording() -> None:
    assert [rule.code for rule in spec.RULES] == sorted(rule.code for rule in spec.RULES)
    for rule in (*spec.ENGINE_CODES, *spec.RULES):
        assert rule.family in spec.FAMILIES and rule.principle in spec.PRINCIPLES
        assert rule.summary and rule.meaning and rule.fix
    assert spec.spec_of("acc301").family == 3 and spec.FAMILIES[3].name == "gradient operations and schedules"
    assert [p for p in spec.PRINCIPLES if p != "-"] == [f"P{n}" for n in range(1, 13)]
    with pytest.raises(ValueError, match="unknown principle"):
        spec.RuleSpec("ACC777", "x", Severity.INFO, "P99", None, summary="s", meaning="m", fix="f")
    with pytest.raises(ValueError, match="no family"):
        spec.RuleSpec("ACC777", "x", Severity.INFO, "P1", None, summary="s", meaning="m", fix="f")


def test_the_guard_prints_the_specs_words() -> None:
    pytest.importorskip("torch")
    from runtime_guard.checks import FIXES, MEANINGS, RUNTIME_CHECKS
    from runtime_guard.report import RuntimeFinding

    assert set(RUNTIME_CHECKS) == {rule.code for rule in spec.RULES if rule.runtime is not None}
    for code in RUNTIME_CHECKS:
        assert (FIXES[code], MEANINGS[code]) == (spec.spec_of(code).fix, spec.spec_of(code).meaning)
    finding = RuntimeFinding("ACC304", 0, 1, "stepped twice", MEANINGS["ACC304"], FIXES["ACC304"])
    assert (finding.name, finding.severity, finding.url) == (
        "scheduler-per-microbatch", "error", spec.spec_of("ACC304").url)


IMPORTS = "import sys, {module}; print(sorted(m for m in sys.modules if m.split('.')[0] in ('libcst', 'torch')))"


def test_the_spec_loads_neither_libcst_nor_torch() -> None:
    done = subprocess.run([sys.executable, "-c", IMPORTS.format(module="accumlint.spec")], capture_output=True,
                          text=True, check=True, cwd=REPO)
    assert done.stdout.strip() == "[]"


def test_import_runtime_guard_loads_no_libcst() -> None:
    pytest.importorskip("torch")
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", "import runtime_guard"], capture_output=True,
                          text=True, check=True, cwd=REPO)
    loaded = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if "|" in line]
    assert "runtime_guard.checks" in loaded and "torch" in loaded
    assert not [name for name in loaded if name.split(".")[0] == "libcst"]


LOADED = """
import sys
from accumlint.cli.app import main
sys.argv = ["accumlint", "check", "--exit-zero", "."]
try:
    main()
except SystemExit:
    pass
print(sorted({name.split(".")[0] for name in sys.modules} & {"libcst", "click"}),
      "accumlint.checks" in sys.modules, file=sys.stderr)
"""


def test_a_run_answered_from_the_cache_loads_neither_libcst_nor_the_rules(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(
        "for i, b in enumerate(loader):\n    opt.zero_grad()\n    model(b).backward()\n    if i % 4 == 3:\n"
        "        opt.step()\n", encoding="utf-8")
    (tmp_path / "util.py").write_text("x = 1\n", encoding="utf-8")

    def loaded() -> str:
        done = subprocess.run([sys.executable, "-c", LOADED], cwd=tmp_path, capture_output=True, text=True,
                              check=True, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
        return done.stderr.strip().splitlines()[-1]

    assert loaded() == "['click', 'libcst'] True"  # cold: train.py is parsed
    assert loaded() == "['click'] False"  # warm: every file from the cache
    # (a changed file loads the rules: their markers decide whether it needs reading)
