"""Positions of hit nodes: the same ranges as LibCST's PositionProvider, at a fraction of the cost."""

from __future__ import annotations

import random
from pathlib import Path

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from accumlint.positions import node_positions

REPO = Path(__file__).resolve().parents[1]
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
