"""The rule table read without importing the rules, and what a run answered from the cache loads."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from accumlint import registry
from accumlint.checks import ALL_RULES
from accumlint.engine import PARSE_ERROR_CODE, PARSE_ERROR_NAME, PARSE_ERROR_URL

REPO = Path(__file__).resolve().parents[1]


def test_the_table_is_the_rule_classes() -> None:
    assert [(e.code, e.qualified_name, e.default_enabled) for e in registry.RULES] == [
        (rule.code, f"{rule.__module__}.{rule.__qualname__}", rule.default_enabled) for rule in ALL_RULES
    ]
    assert (PARSE_ERROR_CODE, PARSE_ERROR_NAME, PARSE_ERROR_URL) == (
        registry.PARSE_ERROR_CODE, registry.PARSE_ERROR_NAME, registry.PARSE_ERROR_URL)


LOADED = """
import sys
from accumlint.cli import main
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
