"""Source positions of a few nodes, as LibCST's ``PositionProvider`` gives them, for less.

``PositionProvider`` generates the code of the whole module and records a range for every
node: for a file with findings that costs about twice its parse. Findings need the
positions of a handful of nodes, so :func:`node_positions` runs the same code generation
but records ranges only inside the wanted subtrees, tracks lines without keeping the
generated text, and stops after the last wanted node. Should LibCST's code generation
ever not reach a wanted node, it falls back to ``PositionProvider``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager

import libcst as cst
from libcst.metadata import CodeRange, MetadataWrapper, PositionProvider
from libcst.metadata.position_provider import PositionProvidingCodegenState


class _Done(Exception):
    """Raised inside code generation once every wanted node has its range."""


class _Ranges:
    """Stands in for the provider: the ranges recorded so far (read by LibCST's hoisting)."""

    def __init__(self) -> None:
        self._computed: dict[cst.CSTNode, CodeRange] = {}


class _WantedState(PositionProvidingCodegenState):
    """Code generation that records syntactic ranges only inside the wanted subtrees."""

    def __init__(self, module: cst.Module, wanted: Collection[cst.CSTNode]) -> None:
        super().__init__(
            default_indent=module.default_indent, default_newline=module.default_newline, provider=_Ranges()
        )
        self.wanted = {id(node) for node in wanted}
        self.remaining = set(self.wanted)
        self.inside = 0  # depth inside a wanted subtree

    def add_indent_tokens(self) -> None:
        for token in self.indent_tokens:
            self._update_position(token)

    def add_token(self, value: str) -> None:
        if not self.tokens:  # Module asks whether anything was generated; the text is not kept
            self.tokens.append(value)
        self._update_position(value)

    def _update_position(self, value: str) -> None:
        if "\r" in value:  # rare: let LibCST split \r\n and \r
            super()._update_position(value)
            return
        newlines = value.count("\n")
        if newlines:
            self.line += newlines
            self.column = len(value) - value.rfind("\n") - 1
        else:
            self.column += len(value)

    def before_codegen(self, node: cst.CSTNode) -> None:
        if self.inside or id(node) in self.wanted:
            self.inside += 1
            super().before_codegen(node)

    def after_codegen(self, node: cst.CSTNode) -> None:
        if not self.inside:
            return
        super().after_codegen(node)
        self.inside -= 1
        self.remaining.discard(id(node))
        if not self.remaining:
            raise _Done

    @contextmanager
    def record_syntactic_position(
        self, node: cst.CSTNode, *, start_node: cst.CSTNode | None = None, end_node: cst.CSTNode | None = None
    ) -> Iterator[None]:
        if not self.inside:
            yield
            return
        with super().record_syntactic_position(node, start_node=start_node, end_node=end_node):
            yield


def node_positions(module: cst.Module, nodes: Collection[cst.CSTNode]) -> Mapping[cst.CSTNode, CodeRange]:
    """``PositionProvider``'s range of each of ``nodes`` (nodes of ``module``)."""
    state = _WantedState(module, nodes)
    try:
        module._codegen(state)
    except _Done:
        pass
    ranges: dict[cst.CSTNode, CodeRange] = state.provider._computed  # type: ignore[attr-defined]
    if all(node in ranges for node in nodes):
        return ranges
    return MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)


__all__ = ["node_positions"]
