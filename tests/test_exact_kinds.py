"""The exact-type tests of the hot walks (``type(node) is cst.X``, :func:`exact_kinds`) agree with
``isinstance`` only for LibCST classes that no node class derives from: every class the package
tests that way is one."""

from __future__ import annotations

import re
from pathlib import Path

import libcst as cst
import pytest

from accumlint.model.names import exact_kinds

PACKAGE = Path(__file__).resolve().parents[1] / "accumlint"
#: ``type(x) is cst.Name``, ``kind is cst.Name``, ``kind in (cst.Name, ...)``, ``exact_kinds(cst.Name, ...)``
EXACT = re.compile(r"(?:\btype\([^()]*\)|\bkind(?:_of)?) is cst\.(\w+)|(?<!def )\bexact_kinds\(([^)]*)\)")


def _exactly_tested() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        for match in EXACT.finditer(path.read_text(encoding="utf-8")):
            names = [match[1]] if match[1] else re.findall(r"cst\.(\w+)", match[2])
            for name in names:
                found.setdefault(name, set()).add(path.name)
    return found


def test_the_scan_finds_the_hot_walks_tests() -> None:
    found = _exactly_tested()
    assert {"Call", "Attribute", "Assign", "FunctionDef", "Lambda", "For", "While"} <= found.keys()


@pytest.mark.parametrize("name", sorted(_exactly_tested()))
def test_an_exactly_tested_class_has_no_subclass(name: str) -> None:
    kind = getattr(cst, name)
    assert kind.__subclasses__() == [], f"cst.{name} is tested by exact type in {sorted(_exactly_tested()[name])}"


def test_exact_kinds_refuses_a_base_class() -> None:
    with pytest.raises(TypeError, match="BaseExpression"):
        exact_kinds(cst.Name, cst.BaseExpression)
    assert exact_kinds(cst.Name, cst.Attribute) == frozenset({cst.Name, cst.Attribute})
