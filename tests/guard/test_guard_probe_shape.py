"""The probe's shape (issue 36, item 5): its observers are components over one state object, not mixins
sharing private names. No module of ``runtime_guard/observe/`` reads a private attribute it does not define
itself (what observers share is a field of ``ProbeState`` or a public method), and ``Probe`` inherits from no
observer."""

from __future__ import annotations

import ast
import dataclasses
import sys

import pytest

pytest.importorskip("torch")

from runtime_guard.observe import Observer  # noqa: E402
from runtime_guard.observe.state import ProbeState  # noqa: E402
from runtime_guard.probe import Probe  # noqa: E402
from tests.shared_data import REPO  # noqa: E402

OBSERVE = REPO / "runtime_guard" / "observe"


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def foreign_private_reads(source: str) -> list[str]:
    """The private attributes ``source`` reads (or imports from ``runtime_guard``) without defining them: a
    name counts as defined where the module assigns it (``self._x = ...``), or defines a function or class by it.
    Reads on a chain rooted at a module imported from outside ``runtime_guard`` (a library's internals, such as
    torch's ``Variable._execution_engine``) are the library's, not another observer's."""
    tree = ast.parse(source)
    defined: set[str] = set()
    libraries: set[str] = set()
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            defined.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            defined.add(node.id)
        elif isinstance(node, ast.Import):
            libraries.update((a.asname or a.name).split(".")[0] for a in node.names
                             if not a.name.startswith("runtime_guard"))
        elif isinstance(node, ast.ImportFrom):
            if (node.module or "").startswith("runtime_guard"):
                found += [f"line {node.lineno}: imports {node.module}.{a.name}" for a in node.names if _private(a.name)]
            else:
                libraries.update(a.asname or a.name for a in node.names)
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and _private(node.attr)) or node.attr in defined:
            continue
        root = node.value
        while isinstance(root, ast.Attribute):
            root = root.value
        if not (isinstance(root, ast.Name) and root.id in libraries):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


@pytest.mark.parametrize("module", sorted(p.name for p in OBSERVE.glob("*.py")))
def test_no_observer_reads_another_ones_private_names(module: str) -> None:
    assert foreign_private_reads((OBSERVE / module).read_text()) == []


def test_the_check_sees_the_mixin_pattern() -> None:
    """A mixin method using the probe's private state and another mixin's helper is caught; the same through
    the state object and a public service, and a library's internals, are not."""
    mixin = "class ResetObserver:\n    def wrap(self):\n        self._prepared_zero_depth += 1\n        self._entry()\n"
    assert foreign_private_reads(mixin) == ["line 4: self._entry"]
    component = ("import torch\nclass ResetObserver:\n    def wrap(self):\n"
                 "        self.state.prepared_zero_depth += 1\n        self.services.entry()\n"
                 "        torch.autograd.Variable._execution_engine.queue_callback(print)\n")
    assert foreign_private_reads(component) == []
    assert foreign_private_reads("from runtime_guard.probe import _attached\n") == [
        "line 1: imports runtime_guard.probe._attached"]


def test_probe_composes_its_observers() -> None:
    """``Probe`` inherits from nothing but ``object``; each observer from :class:`Observer` only, and the state
    is a dataclass whose fields are public."""
    assert Probe.__bases__ == (object,)
    observers = {cls for cls in vars(sys.modules[Probe.__module__]).values()
                 if isinstance(cls, type) and issubclass(cls, Observer) and cls is not Observer}
    assert len(observers) == 11 and all(cls.__bases__ == (Observer,) for cls in observers)
    assert not [f.name for f in dataclasses.fields(ProbeState) if f.name.startswith("_")]
