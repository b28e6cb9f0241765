"""Imports between accumlint's top-level modules and packages (``accumlint.X``): every import
that runs (at the top of a module, inside a function, or through :func:`accumlint.lazy.lazy_module`;
not those under ``TYPE_CHECKING``). The cycles broken stay broken, and no new one forms: each
cycle left lies within one that is known (to be broken when the tree is regrouped)."""

from __future__ import annotations

import ast
from pathlib import Path

import accumlint

PACKAGE = Path(accumlint.__file__).parent

#: the cycles among top-level units still there (strongly connected components): the fixes
#: package holds both the fixers the engine runs in a check and ``--fix``'s driver, which runs
#: checks; the model's simulation places its steps with ``positions``, which walks the model's
#: nodes; the byte stage falls back to the engine's vocabulary; the cache and the two stores
#: beside it share its signature and proof helpers
KNOWN_CYCLES = (
    frozenset({"byte_stage", "checks", "engine", "fix_scope", "fixes", "model", "notebook", "placement", "pool",
               "positions"}),
    frozenset({"cache", "cache_dir", "index_cache"}),
)
#: pairs that imported each other and no longer do
BROKEN = (
    ("engine", "project"), ("engine", "pool"), ("engine", "suggested_fixes"), ("runner", "pool"),
    ("byte_stage", "project"), ("noqa_report", "suggested_fixes"),
)


def _unit(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "accumlint" else None


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(path: Path, name: str) -> set[str]:
    """The modules the code of ``path`` (module ``name``) imports when it runs."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only = {id(node) for block in ast.walk(tree) if isinstance(block, ast.If)
                   and "TYPE_CHECKING" in ast.unparse(block.test) for stmt in block.body for node in ast.walk(stmt)}
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)  # `from accumlint import engine`
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "lazy_module"
              and node.args and isinstance(node.args[0], ast.Constant)):
            found.add(node.args[0].value)
    return found


def import_graph() -> dict[str, set[str]]:
    """Top-level unit → the top-level units its code imports."""
    graph: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        name = _module_name(path)
        source = _unit(name)
        if source is None:
            continue
        targets = {_unit(module) for module in _imported(path, name)} - {None, source}
        graph.setdefault(source, set()).update(targets)  # type: ignore[arg-type]
    return graph


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one unit (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[frozenset[str]] = []

    def visit(unit: str) -> None:
        index[unit] = low[unit] = len(index)
        stack.append(unit)
        for other in sorted(graph.get(unit, ())):
            if other not in index:
                visit(other)
                low[unit] = min(low[unit], low[other])
            elif other in stack:
                low[unit] = min(low[unit], index[other])
        if low[unit] == index[unit]:
            component = []
            while True:
                other = stack.pop()
                component.append(other)
                if other == unit:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for unit in sorted(graph):
        if unit not in index:
            visit(unit)
    return found


def test_the_broken_cycles_stay_broken() -> None:
    graph = import_graph()
    both_ways = [(a, b) for a, b in BROKEN if b in graph.get(a, ()) and a in graph.get(b, ())]
    assert both_ways == []
    assert graph["run_context"] == set()  # a leaf: every stage may take one


def test_no_new_import_cycle() -> None:
    new = [sorted(cycle) for cycle in cycles(import_graph()) if not any(cycle <= known for known in KNOWN_CYCLES)]
    assert new == []


def test_the_graph_sees_each_kind_of_import() -> None:
    """The parts of the walk the assertions above rely on: a module-level import, a relative
    one, one inside a function, a ``lazy_module`` and one under ``TYPE_CHECKING`` (not counted)."""
    graph = import_graph()
    assert "findings" in graph["runner"]  # from accumlint.findings import Finding
    assert "engine" in graph["runner"]  # engine = lazy_module("accumlint.engine")
    assert "engine" in graph["project"]  # from accumlint.engine import parse_module, in a method
    assert "project" not in graph["engine"]  # only under TYPE_CHECKING there
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [frozenset("abc")]
