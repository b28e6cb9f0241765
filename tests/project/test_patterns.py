"""The interprocedural families of ../shared/patterns (``xfn_``, ``xmod_``, ``cls_``, ``attr_``,
``multiopt_``): each faulty sample reports its code on its line in the file ``expected.tsv``
names, each silent twin reports nothing even with every rule selected. A folder is one
project, checked together (as ``accumlint check FOLDER`` does)."""

from __future__ import annotations

from pathlib import Path

import pytest

from accumlint.run import runner
from accumlint.settings import config
from accumlint.settings.config import Settings
from tests.shared_data import SHARED, needs_shared, pattern_rows, require_shared, shared_params

pytestmark = needs_shared  # every test reads ../shared/patterns

FAMILIES = ("xfn_", "xmod_", "cls_", "attr_", "multiopt_")
EVERY_CODE = frozenset(config.known_codes())


def check(target: Path) -> list[tuple[str, str, int]]:
    """(file name relative to the sample, code, line) of every finding, every rule selected."""
    files = sorted(str(p) for p in target.rglob("*.py")) if target.is_dir() else [str(target)]
    root = target if target.is_dir() else target.parent
    run = runner.check_files(files, Settings(project_root=root), EVERY_CODE, jobs=1)
    base = target if target.is_dir() else target.parent
    return [(str(Path(f.path).relative_to(base)), f.code, f.line) for f in run.findings]


def assert_row(row: dict[str, str], folder: Path) -> None:
    """An ``expected.tsv`` row (``file``, ``required``, ``lines``) holds for the sample in ``folder``:
    ``-`` nothing at all; else, for each ``;``-separated part, one of its ``|``-separated codes
    on one of the lines of the named file, and no finding in the sample's other modules."""
    name = row["file"]
    sample, _, inner = name.partition("/")
    found = check(folder / sample)
    if row["required"] == "-":
        assert found == [], found
        return
    lines = {int(line) for line in row["lines"].split(",")}
    wanted = inner or name
    for part in row["required"].split(";"):  # `A;B`: both; `A|B`: either
        codes = set(part.split("|"))
        assert any(file == wanted and code in codes and line in lines for file, code, line in found), (row, found)
    assert all(file == wanted for file, _, _ in found), found  # a helper module is silent


@pytest.mark.parametrize("row", shared_params(pattern_rows(FAMILIES), "patterns", "expected.tsv"),
                         ids=lambda row: row["file"])
def test_pattern(row: dict[str, str]) -> None:
    require_shared("patterns", row["file"].partition("/")[0])
    assert_row(row, SHARED / "patterns")


def test_the_families_are_present() -> None:
    require_shared("patterns", "expected.tsv")
    assert len(pattern_rows(FAMILIES)) >= 20
