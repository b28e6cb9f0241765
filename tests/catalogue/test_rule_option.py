"""``pytest --rule CODE`` (``conftest.py``): one rule's tests, and the precision sets only for a rule
that runs by default."""

from __future__ import annotations

import subprocess
import sys

import pytest

from accumlint import spec
from tests.shared_data import REPO

ROOT = REPO

pytestmark = pytest.mark.slow  # each test collects the suite in a subprocess


def _collected(*options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           *options], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)


def _modules(stdout: str) -> dict[str, list[str]]:
    """Test ids by module, from ``--collect-only -q``."""
    by_module: dict[str, list[str]] = {}
    for line in stdout.splitlines():
        if line.startswith("tests/") and "::" in line:
            by_module.setdefault(line.split("::", 1)[0].removeprefix("tests/"), []).append(line)
    return by_module


def test_a_rule_on_by_default_gets_its_folder_tests_and_the_precision_sets() -> None:
    assert spec.spec_of("ACC301").default_enabled
    done = _collected("--rule", "acc301")
    assert done.returncode == 0, done.stderr
    by_module = _modules(done.stdout)
    for module in ("catalogue/test_rule_folders.py", "catalogue/test_catalogue.py", "guard/test_guard_catalogue.py",
                   "metamorphic/test_metamorphic.py"):
        assert by_module[module], module
        assert all("ACC301" in test for test in by_module[module]), module
    assert {"precision/test_field_trial.py", "precision/test_fresh_trial.py",
            "precision/test_trial47.py"} <= set(by_module)
    assert "model/test_model.py" not in by_module  # a module about something else is not even imported


def test_a_rule_off_by_default_skips_the_precision_sets_and_a_wrong_code_is_a_usage_error() -> None:
    assert not spec.spec_of("ACC901").default_enabled
    done = _collected("--rule", "ACC901")
    assert done.returncode == 0, done.stderr
    assert set(_modules(done.stdout)) == {"catalogue/test_rule_folders.py", "catalogue/test_catalogue.py",
                                          "guard/test_guard_catalogue.py", "metamorphic/test_metamorphic.py"}
    wrong = _collected("--rule", "ACC999")
    assert wrong.returncode != 0
    assert "no rule ACC999" in wrong.stderr
