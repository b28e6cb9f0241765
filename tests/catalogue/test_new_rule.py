"""scripts/new_rule.py on a copy of the checkout: which files a new rule touches, and that it is registered."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from accumlint.report.rule_docs import PAGE_SECTIONS
from tests.shared_data import REPO

pytestmark = pytest.mark.slow


def _copy_of_checkout(target: Path) -> Path:
    listed = subprocess.run(["git", "ls-files", "-z", "accumlint", "runtime_guard", "rules", "scripts", "README.md",
                             "pyproject.toml"],
                            cwd=REPO, capture_output=True, check=True).stdout.decode().split("\0")
    if not any(listed):
        pytest.skip("not a git checkout: scripts/new_rule.py is a contributor's tool")
    for name in filter(None, listed):
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, target / name)
    for command in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"]):
        subprocess.run(["git", *command], cwd=target, check=True)
    return target


#: long enough that the scaffold must wrap it in the spec and in the docstrings it writes
SUMMARY = ("gradients fiddled with on every microbatch of the group by a helper that rescales, clips or copies "
           "them before the update")


def test_a_scaffolded_rule_touches_its_spec_check_folder_and_runtime_check_only(tmp_path: Path) -> None:
    tree = _copy_of_checkout(tmp_path)
    done = subprocess.run([sys.executable, "scripts/new_rule.py", "ACC399", "grad-fiddle-inside-group", "--principle",
                           "P6", "--severity", "warning", "--summary", SUMMARY, "--module", "fiddles", "--runtime",
                           "events"], cwd=tree, check=True, capture_output=True, text=True)
    status = subprocess.run(["git", "status", "--porcelain", "-uall"], cwd=tree, capture_output=True, text=True,
                            check=True).stdout.split("\n")
    changed = sorted(line[3:] for line in status if line)
    assert changed == [
        "README.md",  # the generated rule table
        "accumlint/checks/fiddles.py",
        "accumlint/spec/__init__.py",
        "rules/ACC399-grad-fiddle-inside-group/README.md",
        "rules/ACC399-grad-fiddle-inside-group/bad_grad_fiddle_inside_group.py",
        "rules/ACC399-grad-fiddle-inside-group/cases.toml",
        "rules/ACC399-grad-fiddle-inside-group/good_grad_fiddle_inside_group.py",
        "runtime_guard/checks/__init__.py",
        "runtime_guard/checks/fiddles.py",
    ]
    # it names every file it wrote (the folder as one), the README's table apart
    wrote = sorted(line.removeprefix("wrote ") for line in done.stdout.splitlines() if line.startswith("wrote "))
    assert wrote == sorted([*(name for name in changed if name != "README.md" and not name.startswith("rules/")),
                            "rules/ACC399-grad-fiddle-inside-group"])
    probe = ("from accumlint.checks import ALL_RULES; from accumlint.spec import spec_of; "
             "rule = next(r for r in ALL_RULES if r.code == 'ACC399'); s = spec_of('ACC399'); "
             "print(rule.__name__, rule.name, rule.severity.value, s.family, s.runtime.needs, "
             "[r.code for r in ALL_RULES] == sorted(r.code for r in ALL_RULES))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=tree, capture_output=True, text=True, check=True,
                          env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"})
    assert done.stdout.split() == ["GradFiddleInsideGroup", "grad-fiddle-inside-group", "warning", "3", "events",
                                   "True"]
    assert "| ACC399 | [`grad-fiddle-inside-group`]" in (tree / "README.md").read_text(encoding="utf-8")
    # its output commits without hand clean-up: ruff-clean, the page in the standard shape
    python = [name for name in changed if name.endswith(".py")]
    linted = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", *python], cwd=tree,
                            capture_output=True, text=True)  # under the project's own ruff settings
    assert linted.returncode == 0, linted.stdout
    page = (tree / "rules/ACC399-grad-fiddle-inside-group/README.md").read_text(encoding="utf-8")
    assert tuple(re.findall(r"^## (.+)$", page, re.M)) == PAGE_SECTIONS
    assert "needs: events" in page.split("## Runtime counterpart")[1]
    read = "from accumlint.spec import spec_of; print(spec_of('ACC399').summary)"
    summary = subprocess.run([sys.executable, "-c", read], cwd=tree, capture_output=True, text=True, check=True,
                             env={"PYTHONPATH": str(tree)})
    assert summary.stdout.strip() == SUMMARY
    bad = tree / "rules/ACC399-grad-fiddle-inside-group/bad_grad_fiddle_inside_group.py"
    assert "# expect: ACC399" in bad.read_text(encoding="utf-8")
    compile(bad.read_bytes(), str(bad), "exec")
    again = subprocess.run([sys.executable, "scripts/new_rule.py", "ACC399", "grad-fiddle-inside-group",
                            "--principle", "P6", "--summary", "x", "--module", "fiddles"], cwd=tree,
                           capture_output=True, text=True)
    assert again.returncode != 0 and "already in accumlint/spec/__init__.py" in again.stderr
