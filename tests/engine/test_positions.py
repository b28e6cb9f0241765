"""Positions of hit nodes: the same ranges as LibCST's PositionProvider, at a fraction of the cost."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from accumlint.model.positions import node_positions
from tests.shared_data import REPO

SOURCES = sorted([*REPO.glob("rules/ACC*/*.py"), *REPO.glob("examples/*.py")])[::3]


class _All(cst.CSTVisitor):
    def __init__(self) -> None:
        self.nodes: list[cst.CSTNode] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        self.nodes.append(node)
        return True


def all_nodes(module: cst.Module) -> list[cst.CSTNode]:
    collector = _All()
    module.visit(collector)
    return collector.nodes


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(REPO)))
def test_same_ranges_as_position_provider(path: Path) -> None:
    module = cst.parse_module(path.read_bytes())
    full = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    nodes = all_nodes(module)
    assert len(nodes) > 100
    ours = node_positions(module, nodes)
    assert all(ours[node] == full[node] for node in nodes)
    pick = random.Random(path.name)
    for _ in range(25):
        wanted = pick.sample(nodes, pick.randint(1, 4))
        ours = node_positions(module, wanted)
        assert [ours[node] for node in wanted] == [full[node] for node in wanted]


def test_windows_newlines_and_nested_wanted_nodes() -> None:
    module = cst.parse_module("if x:\r\n    y = f(a,\r\n          b)\r\nz = 1\r\n")
    full = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    nodes = all_nodes(module)
    call = next(n for n in nodes if isinstance(n, cst.Call))
    arg = next(n for n in nodes if isinstance(n, cst.Arg))
    ours = node_positions(module, [arg, call])
    assert (ours[call], ours[arg]) == (full[call], full[arg])
    assert (ours[call].start.line, ours[call].end.line, ours[call].end.column) == (2, 3, 12)


def test_a_node_outside_the_module_falls_back_to_the_provider() -> None:
    module = cst.parse_module("x = 1\n")
    stranger = cst.parse_expression("y")
    positions = node_positions(module, [stranger])
    assert stranger not in positions
    assert len(positions) > 3


TRICKY = (
    "# header comment\n"
    "import torch; import os\n"
    "\n"
    "\n"
    "@decorator  # trailing\n"
    "# between decorators\n"
    "@other(\n"
    "    1)\n"
    "def train(loader):\n"
    "\t# a tab-indented body, a comment first\n"
    "\tfor i, batch in enumerate(loader):\n"
    "\t\tloss = model(batch); loss.backward()\n"
    "\t\tif (i + 1) % 4 == 0:\n"
    "\t\t\toptimizer.step()\n"
    "\n"
    "class Recipe:\n"
    "    '''doc'''\n"
    "    class Inner:\n"
    "        async def run(self):\n"
    "            x = (\n"
    "                f(a)\n"
    "            )\n"
    "            async for b in stream():\n"
    "                await g(b)\n"
    "    # a comment line at the end of the class body\n"
    "\n"
    "if __name__ == '__main__':\n"
    "    train(loader=[])\n"
)


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_statement_anchored_ranges_equal_the_provider_where_taken(newline: str) -> None:
    """Every node that the fast path places (it declines by returning None) is placed exactly
    where PositionProvider puts it; calls and statements, what rules report, are all placed."""
    from accumlint.model.positions import Shared, _from_statements

    text = TRICKY.replace("\n", newline)
    module = cst.parse_module(text)
    full = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    placed = 0
    for node in all_nodes(module):
        ours = _from_statements(module, [node], Shared(text))
        if ours is not None:
            assert ours[node] == full[node], module.code_for_node(node)
            placed += 1
        elif isinstance(node, (cst.Call, cst.BaseSmallStatement, cst.If, cst.For)):
            pytest.fail(f"not placed: {module.code_for_node(node)!r}")
    assert placed > 60


def test_hit_nodes_of_the_catalogue_are_placed_without_generating_the_module() -> None:
    """On every catalogue example with findings, the positions come from the statements that
    hold the hits (never the whole-module fallback) and equal PositionProvider's."""
    from accumlint.model import build_model
    from accumlint.model.positions import Shared, _from_statements
    from accumlint.pipeline.engine import ALL_RULES_INSTANCES

    checked = 0
    for path in sorted(REPO.glob("rules/ACC*/bad_*.py")):
        text = path.read_text(encoding="utf-8")
        module = cst.parse_module(text)
        model = build_model(module)
        nodes = [hit.node for rule in ALL_RULES_INSTANCES for hit in rule.check(model)]
        if not nodes:
            continue
        ours = _from_statements(module, nodes, Shared(text))
        assert ours is not None, path.name
        full = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
        assert [ours[node] for node in nodes] == [full[node] for node in nodes], path.name
        checked += 1
    assert checked >= 40


def test_syntax_the_interpreter_does_not_know_falls_back_to_generating_the_module() -> None:
    from accumlint.model.positions import Shared, _from_statements

    text = "type Alias = list[int]\nloss.backward()\n"  # PEP 695: LibCST parses it, Python 3.11 does not
    module = cst.parse_module(text)
    call = module.body[1].body[0].value  # type: ignore[attr-defined]
    full = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    if sys.version_info < (3, 12):
        assert _from_statements(module, [call], Shared(text)) is None
    assert node_positions(module, [call], text)[call] == full[call]
