"""Imports between accumlint's top-level packages and modules (``accumlint.X``): every import
that runs (at the top of a module, inside a function, or through :func:`accumlint.lazy.lazy_module`;
not those under ``TYPE_CHECKING``). The packages form layers: each imports only the layers below
it, so there is no cycle among them."""

from __future__ import annotations

import ast
from pathlib import Path

import accumlint

PACKAGE = Path(accumlint.__file__).parent

#: the top-level units, lowest first: the rule spec and the finding, then the plumbing (the heap,
#: lazy imports, files), what the bytes say before LibCST, the ``noqa`` directives, the settings,
#: the framework contracts, the model (the simulator), the rules over it, their fixes, one file's
#: pipeline, the project index, a run over many files, the reports, the commands beside ``check``,
#: the language server, the CLI. ``__version__`` is the package's own attribute.
LAYERS = ("__version__", "spec", "heap", "lazy", "files", "source", "noqa", "settings", "frameworks", "model",
          "checks", "fixes", "pipeline", "project", "run", "report", "commands", "lsp", "cli", "__main__")


def _unit(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "accumlint" else None


def _module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
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


def test_each_package_imports_only_the_layers_below_it() -> None:
    graph = import_graph()
    assert set(graph) <= set(LAYERS), "place a new top-level package or module in LAYERS"
    upward = {unit: sorted(target for target in targets if LAYERS.index(target) > LAYERS.index(unit))
              for unit, targets in graph.items()}
    assert {unit: targets for unit, targets in upward.items() if targets} == {}


def test_no_import_cycle() -> None:
    assert cycles(import_graph()) == []


def model_imports_of_checks(package: Path = PACKAGE) -> dict[str, list[str]]:
    """Module of :mod:`accumlint.model` → the :mod:`accumlint.checks` modules its code imports."""
    found: dict[str, list[str]] = {}
    for path in sorted((package / "model").rglob("*.py")):
        name = _module_name(path, package)
        checks = sorted(module for module in _imported(path, name) if _unit(module) == "checks")
        if checks:
            found[name] = checks
    return found


def private_model_names_in_checks(package: Path = PACKAGE) -> dict[str, list[str]]:
    """Module of :mod:`accumlint.checks` → the ``module.name`` of each name with a leading underscore
    it imports from :mod:`accumlint.model` (a rule reads the core's public API, never its internals)."""
    found: dict[str, list[str]] = {}
    for path in sorted((package / "checks").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and _unit(node.module or "") == "model":
                found.setdefault(_module_name(path, package), []).extend(
                    f"{node.module}.{alias.name}" for alias in node.names if alias.name.startswith("_"))
    return {module: names for module, names in found.items() if names}


def test_the_model_never_imports_a_rule_family() -> None:
    """The core (:mod:`accumlint.model`) is what every family reads; an analysis only some families
    need lives under :mod:`accumlint.checks` (``checks/<family>/`` or ``checks/shared/``), and the
    core imports none of it, not even inside a function."""
    assert model_imports_of_checks() == {}


def test_a_check_imports_no_private_name_of_the_model() -> None:
    assert private_model_names_in_checks() == {}


def test_the_layering_guards_see_a_violation(tmp_path: Path) -> None:
    """A core module that imports a family's analysis inside a function, and a check that imports
    a model module's private helper, are each named."""
    package = tmp_path / "accumlint"
    (package / "model").mkdir(parents=True)
    (package / "checks" / "schedule").mkdir(parents=True)
    (package / "model" / "groups.py").write_text(
        "def f():\n    from accumlint.checks.schedule.schedules import horizons\n", encoding="utf-8")
    (package / "checks" / "schedule" / "__init__.py").write_text(
        "from accumlint.model.groups import Group, _loop_of\n", encoding="utf-8")
    assert model_imports_of_checks(package) == {
        "accumlint.model.groups": ["accumlint.checks.schedule.schedules",
                                   "accumlint.checks.schedule.schedules.horizons"]}
    assert private_model_names_in_checks(package) == {"accumlint.checks.schedule": ["accumlint.model.groups._loop_of"]}


def test_the_graph_sees_each_kind_of_import() -> None:
    """The parts of the walk the assertions above rely on: a module-level import, a relative
    one, one inside a function, a ``lazy_module`` and one under ``TYPE_CHECKING`` (not counted)."""
    runner = _imported(PACKAGE / "run" / "runner.py", "accumlint.run.runner")
    assert "accumlint.spec.findings" in runner  # from accumlint.spec.findings import Finding
    assert "accumlint.pipeline.engine" in runner  # engine = lazy_module("accumlint.pipeline.engine")
    index = _imported(PACKAGE / "project" / "index.py", "accumlint.project.index")
    assert "accumlint.pipeline.engine" in index  # from accumlint.pipeline.engine import parse_module, in a method
    engine = _imported(PACKAGE / "pipeline" / "engine.py", "accumlint.pipeline.engine")
    assert not any(name.startswith("accumlint.project") for name in engine)  # only under TYPE_CHECKING there
    assert "run" in import_graph()["cli"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [frozenset("abc")]
