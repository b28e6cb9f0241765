"""The exact-type tests of the hot walks (``type(node) is cst.X``, :func:`exact_kinds`) agree with
``isinstance`` only for LibCST classes that no node class derives from: every class the package
tests that way is one."""

from __future__ import annotations

import re

import libcst as cst
import pytest

from accumlint.model.names import exact_kinds
from tests.shared_data import REPO

PACKAGE = REPO / "accumlint"
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


SAMPLE = '''
import torch
scaler = Scaler()
class Trainer:
    def fit(self):
        step = accum_step if self.flag else plain_step
        for batch in loader:
            with ctx() as c:
                try:
                    loss = model(batch)
                except ValueError:
                    loss = None
                else:
                    total = loss
                finally:
                    done = True
            while cond:
                if a:
                    x = 1
                elif b:
                    y = 2
                else:
                    z = (w := 3)
        match step:
            case 1:
                m = Scaler()
        f = lambda v: v
        def inner():
            hidden = Scaler()
        class Local:
            attr = Scaler()
    def g(self): q = 1
'''


def test_the_statement_walk_finds_every_assignment_the_full_walk_finds_in_its_order() -> None:
    from accumlint.model.interpreter import walk
    from accumlint.model.names import holds_statements

    module = cst.parse_module(SAMPLE)
    roots = [module, *(n.body for n in walk(module) if isinstance(n, cst.FunctionDef))]
    roots += [n.body for n in cst.parse_module(SAMPLE).body if isinstance(n, cst.ClassDef)]
    for root in roots:
        full = [n for n in walk(root) if type(n) in (cst.Assign, cst.AugAssign, cst.AnnAssign)]
        pruned = [n for n in walk(root, statements_only=True) if type(n) in (cst.Assign, cst.AugAssign, cst.AnnAssign)]
        assert pruned == full
    fit = next(n for n in walk(module) if isinstance(n, cst.FunctionDef) and n.name.value == "fit")
    bound = [n.targets[0].target.value for n in walk(fit.body, statements_only=True) if type(n) is cst.Assign]
    assert sorted(bound) == sorted(["step", "loss", "loss", "total", "done", "x", "y", "z", "m", "f", "attr"])
    # the methods are roots of their own
    assert len([n for n in walk(module, statements_only=True) if type(n) is cst.Assign]) == 1
    assert holds_statements(cst.If) and holds_statements(cst.Module) and holds_statements(cst.MatchCase)
    assert not holds_statements(cst.Lambda) and not holds_statements(cst.Assign) and not holds_statements(cst.Call)
