"""A run that checks only some files of a project (a pre-commit hook's changed files, an editor's
open file) follows calls into the project's other modules as a whole-project run does: the
prefilter learns the names of the modules the checked files import, and a function of a module
imported whole (`import utils` ... `utils.f()`) is followed like one imported by name."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from accumlint.run import runner
from accumlint.settings import config
from accumlint.settings.config import Settings

EVERY_CODE = frozenset(config.known_codes())

HELPER_RESETS = """
def micro_step(net, opt, crit, x, y, accum):
    opt.zero_grad()
    (crit(net(x), y) / accum).backward()
"""
HELPER_CORRECT = """
def micro_step(net, opt, crit, x, y, accum):
    (crit(net(x), y) / accum).backward()
"""
CALLER_FROM = """
import torch
from helpers import micro_step

def fit(net, batches, crit, accum):
    opt = torch.optim.AdamW(net.parameters())
    for k, (x, y) in enumerate(batches):
        micro_step(net, opt, crit, x, y, accum)
        if (k + 1) % accum == 0:
            opt.step()
            opt.zero_grad()
"""
CALLER_MODULE = CALLER_FROM.replace("from helpers import micro_step", "import helpers").replace(
    "        micro_step(", "        helpers.micro_step(")


def write_project(root: Path, files: dict[str, str]) -> None:
    for name, source in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source), encoding="utf-8")


def check_paths(root: Path, *names: str) -> list[tuple[str, str, int]]:
    run = runner.check_files([str(root / name) for name in names], Settings(project_root=root), EVERY_CODE, jobs=1)
    assert run.errors == []
    return [(Path(f.path).relative_to(root).as_posix(), f.code, f.line) for f in run.findings]


@pytest.mark.parametrize("caller", [CALLER_FROM, CALLER_MODULE], ids=["from-import", "module-import"])
def test_checking_only_the_caller_follows_the_helper_module(tmp_path: Path, caller: str) -> None:
    write_project(tmp_path, {"train.py": caller, "helpers.py": HELPER_RESETS})
    assert check_paths(tmp_path, "train.py") == [("train.py", "ACC001", 8)]
    assert check_paths(tmp_path, "train.py", "helpers.py") == [("train.py", "ACC001", 8)]


@pytest.mark.parametrize("caller", [CALLER_FROM, CALLER_MODULE], ids=["from-import", "module-import"])
def test_a_correct_helper_module_keeps_the_caller_silent(tmp_path: Path, caller: str) -> None:
    write_project(tmp_path, {"train.py": caller, "helpers.py": HELPER_CORRECT})
    assert check_paths(tmp_path, "train.py") == []


def test_a_src_layout_package_checked_one_file_at_a_time(tmp_path: Path) -> None:
    caller = CALLER_FROM.replace("from helpers import", "from pkg.helpers import")
    write_project(tmp_path, {"pyproject.toml": "[project]\nname = 'pkg'\n", "src/pkg/__init__.py": "",
                        "src/pkg/train.py": caller, "src/pkg/helpers.py": HELPER_RESETS})
    assert check_paths(tmp_path, "src/pkg/train.py") == [("src/pkg/train.py", "ACC001", 8)]


def test_a_helper_two_imports_away_is_followed(tmp_path: Path) -> None:
    """train.py -> helpers.py (no backward of its own) -> core.py (the reset and the backward)."""
    relay = "from core import micro_step as inner\n\ndef micro_step(*args):\n    inner(*args)\n"
    write_project(tmp_path, {"train.py": CALLER_FROM, "helpers.py": relay, "core.py": HELPER_RESETS})
    assert check_paths(tmp_path, "train.py", "helpers.py", "core.py") == check_paths(tmp_path, "train.py")


def test_an_attribute_of_a_value_is_no_module_function(tmp_path: Path) -> None:
    """`runner.micro_step(...)` on a parameter named like a module is not `helpers.micro_step`."""
    caller = CALLER_MODULE.replace("import helpers", "import helpers as _unused").replace(
        "def fit(net,", "def fit(helpers, net,")
    write_project(tmp_path, {"train.py": caller, "helpers.py": HELPER_RESETS})
    assert check_paths(tmp_path, "train.py") == []

