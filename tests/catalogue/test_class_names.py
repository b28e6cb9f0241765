"""No two public classes of accumlint/ and runtime_guard/ share a name while meaning different
things (issue 20: the static ``Group`` and the guard's ``ObservedGroup``, ``Event`` and
``ObservedEvent``, ``Finding`` and ``RuntimeFinding``, ...)."""

from __future__ import annotations

import ast
from collections import defaultdict

from tests.shared_data import REPO

PACKAGES = ("accumlint", "runtime_guard")

#: one idea under one name in several modules: the guard's callback for each trainer (their
#: docstrings say so, checked below)
SAME_IDEA = {"GuardCallback": {"runtime_guard.integrations.lightning", "runtime_guard.integrations.transformers"}}
#: documented aliases kept for users: name -> (module, the class it stands for)
ALIASES = {"Finding": ("runtime_guard.report", "RuntimeFinding")}


def _modules() -> dict[str, ast.Module]:
    out = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            name = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
            out[name] = ast.parse(path.read_text(encoding="utf-8"))
    return out


def _public_classes(modules: dict[str, ast.Module]) -> dict[str, set[str]]:
    """Class name -> the modules that define a public class (or a class alias) of that name at top level."""
    where: dict[str, set[str]] = defaultdict(set)
    classes = {(module, node.name) for module, tree in modules.items() for node in tree.body
               if isinstance(node, ast.ClassDef)}
    for module, tree in modules.items():
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                where[node.name].add(module)
            # `Alias = SomeClass` of a class of the same module: an alias under another name
            if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                    and isinstance(node.value, ast.Name) and (module, node.value.id) in classes
                    and not node.targets[0].id.startswith("_")):
                where[node.targets[0].id].add(module)
    return where


def test_no_two_public_classes_share_a_name_with_different_meanings() -> None:
    modules = _modules()
    where = _public_classes(modules)
    shared = {name: set(mods) for name, mods in where.items() if len(mods) > 1}
    for name, (module, target) in ALIASES.items():
        assert module in where.get(name, set()), f"alias {module}.{name} is gone: drop it from ALIASES"
        shared.get(name, set()).discard(module)
        assert target in where and module in where[target]
    shared = {name: mods for name, mods in shared.items() if len(mods) > 1 and mods != SAME_IDEA.get(name)}
    assert shared == {}


def test_the_same_idea_under_one_name_says_so() -> None:
    modules = _modules()
    for name, owners in SAME_IDEA.items():
        for module in owners:
            cls = next(node for node in modules[module].body if isinstance(node, ast.ClassDef) and node.name == name)
            others = owners - {module}
            doc = ast.get_docstring(cls) or ""
            assert all(f"{other}.{name}" in doc for other in others), f"{module}.{name}: name the twin"


def test_the_renamed_classes_are_where_the_vocabulary_says() -> None:
    where = _public_classes(_modules())
    assert where["Group"] == {"accumlint.model.groups"}
    assert where["ObservedGroup"] == {"runtime_guard.trace"}
    assert where["Event"] == {"accumlint.model.events"} and where["ObservedEvent"] == {"runtime_guard.trace"}
    assert where["DataParallel"] == {"accumlint.checks.shared.parallel"}
    assert where["DataParallelSize"] == {"runtime_guard.frameworks"}
    assert where["Gate"] == {"accumlint.model.gate_analysis"} and where["GatedUpdate"] == {"accumlint.fixes.base"}
    assert where["RuleGate"] == {"accumlint.checks.gate"}
