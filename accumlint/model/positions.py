"""Source positions of a few nodes, as LibCST's ``PositionProvider`` gives them, for less.

``PositionProvider`` generates the code of the whole module and records a range for every
node: for a file with findings that costs about twice its parse. Findings need the
positions of a handful of nodes, so :func:`node_positions` generates only the statements
that hold them: it finds each wanted node's innermost statement (descending through the
bodies of definitions, loops, ``if``, ``with`` and ``try``), takes that statement's first
line from the interpreter's own parse (``ast``, an order of magnitude cheaper than
LibCST's) and generates the statement from there, recording ranges only inside the wanted
subtrees. The result is checked against the source text; where anything does not line up
(a node outside the statement structure, a syntax ``ast`` does not know), it generates the
module from the top, as before, and should even that not reach a node, it falls back to
``PositionProvider``.
"""

from __future__ import annotations

import ast
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager

import libcst as cst
from libcst.metadata import CodeRange, MetadataWrapper, PositionProvider
from libcst.metadata.position_provider import PositionProvidingCodegenState

from accumlint.model.names import children


class _Done(Exception):
    """Raised inside code generation once every wanted node has its range."""


#: how many tokens of a wanted node's code are kept to check its range against the source
_OPENING_TOKENS = 64


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
        self.openings: dict[int, list[str]] = {}  # id(wanted node) → the first tokens of its code
        self.filling: list[list[str]] = []  # the openings still taking tokens

    def add_indent_tokens(self) -> None:
        for token in self.indent_tokens:
            self.add_token(token)

    def add_token(self, value: str) -> None:
        if not self.tokens:  # Module asks whether anything was generated; the text is not kept
            self.tokens.append(value)
        if self.filling:
            for opening in self.filling:
                opening.append(value)
            self.filling = [opening for opening in self.filling if len(opening) < _OPENING_TOKENS]
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
        if id(node) in self.wanted:
            opening = self.openings[id(node)] = []
            self.filling.append(opening)
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


class Shared:
    """What :func:`node_positions` reads of one module each time, computed once for many calls
    on it: the ``ast`` tree of its text and the parent of each of its nodes (where the caller
    has them: :func:`accumlint.fixes.base.parent_map`). A fix's positions cost about a tenth
    of a check without them (a 3,000-line file: ~100 ms each, a parse and a walk of the module)."""

    def __init__(self, text: str, parents: Mapping[cst.CSTNode, cst.CSTNode] | None = None) -> None:
        self.text = text
        self.parents = parents
        self._tree: ast.Module | None | bool = False  # False: not parsed yet

    def tree(self) -> ast.Module | None:
        """The interpreter's tree of the text (None: it does not parse it)."""
        if self._tree is False:
            try:
                self._tree = ast.parse(self.text)
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                self._tree = None  # a syntax LibCST knows and this interpreter does not
        return self._tree  # type: ignore[return-value]


def node_positions(
    module: cst.Module, nodes: Collection[cst.CSTNode], text: str | None = None, shared: Shared | None = None,
) -> Mapping[cst.CSTNode, CodeRange]:
    """``PositionProvider``'s range of each of ``nodes`` (nodes of ``module``).

    ``text`` is the module's source (``module.code`` when not given): with it, only the
    statements holding the nodes are generated. ``shared``: what calls on this module share
    (its ``text`` is then the source).
    """
    shared = shared or Shared(module.code if text is None else text)
    ranges = _from_statements(module, nodes, shared)
    if ranges is not None:
        return ranges
    return _from_the_top(module, nodes)


def _from_the_top(module: cst.Module, nodes: Collection[cst.CSTNode]) -> Mapping[cst.CSTNode, CodeRange]:
    state = _WantedState(module, nodes)
    try:
        module._codegen(state)
    except _Done:
        pass
    ranges: dict[cst.CSTNode, CodeRange] = state.provider._computed  # type: ignore[attr-defined]
    if all(node in ranges for node in nodes):
        return ranges
    return MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)


def _from_statements(
    module: cst.Module, nodes: Collection[cst.CSTNode], shared: Shared
) -> dict[cst.CSTNode, CodeRange] | None:
    """The ranges, generating only each node's statement, or None where anything does not line up."""
    text = shared.text
    paths = _paths(module, nodes) if shared.parents is None else _paths_up(module, nodes, shared.parents)
    if paths is None:
        return None
    tree = shared.tree()
    if tree is None:
        return None
    wanted = {id(node) for node in nodes}
    roots: dict[int, tuple[cst.BaseStatement, int, list[str], list[cst.CSTNode]]] = {}
    for node, path in paths:
        anchored = _anchor(module, tree, path, wanted)
        if anchored is None:
            return None
        root, line, indents = anchored
        roots.setdefault(id(root), (root, line, indents, []))[3].append(node)
    ranges: dict[cst.CSTNode, CodeRange] = {}
    openings: dict[int, list[str]] = {}
    for root, line, indents, inside in roots.values():
        state = _WantedState(module, inside)
        state.line, state.indent_tokens = line, list(indents)
        try:
            root._codegen(state)
        except _Done:
            pass
        ranges.update(state.provider._computed)  # type: ignore[attr-defined]
        openings.update(state.openings)
    lines = text.splitlines()
    if not all(node in ranges and _matches(openings[id(node)], ranges[node], lines) for node in nodes):
        return None
    return ranges


def _paths(module: cst.Module, nodes: Collection[cst.CSTNode]) -> list[tuple[cst.CSTNode, list[cst.CSTNode]]] | None:
    """Each node with its ancestors from the module down (the node last), found through
    :func:`~accumlint.model.names.children`; None if one of them is not reached that way."""
    remaining = {id(node) for node in nodes}
    found: list[tuple[cst.CSTNode, list[cst.CSTNode]]] = []
    path: list[cst.CSTNode] = []
    stack: list[tuple[cst.CSTNode, int]] = [(module, 0)]
    while stack and remaining:
        node, depth = stack.pop()
        del path[depth:]
        path.append(node)
        if id(node) in remaining:
            remaining.discard(id(node))
            found.append((node, list(path)))
        stack.extend((child, depth + 1) for child in reversed(children(node)))
    return None if remaining else found


def _paths_up(module: cst.Module, nodes: Collection[cst.CSTNode], parents: Mapping[cst.CSTNode, cst.CSTNode],
              ) -> list[tuple[cst.CSTNode, list[cst.CSTNode]]] | None:
    """:func:`_paths`, read up from each node through ``parents`` (no walk of the module)."""
    found = []
    for node in nodes:
        path = [node]
        while path[-1] is not module:
            parent = parents.get(path[-1])
            if parent is None:
                return None
            path.append(parent)
        found.append((node, path[::-1]))
    return found


#: statements whose ``body`` block is descended into, with their ``ast`` counterparts (the
#: other blocks, ``else``/``elif``/``except``, are generated with their statement)
_DESCENDED: dict[type, tuple[type, ...]] = {
    cst.FunctionDef: (ast.FunctionDef, ast.AsyncFunctionDef),
    cst.ClassDef: (ast.ClassDef,),
    cst.For: (ast.For, ast.AsyncFor),
    cst.While: (ast.While,),
    cst.If: (ast.If,),
    cst.With: (ast.With, ast.AsyncWith),
    cst.Try: (ast.Try,),
}


def _anchor(
    module: cst.Module, tree: ast.Module, path: Sequence[cst.CSTNode], wanted: set[int]
) -> tuple[cst.BaseStatement, int, list[str]] | None:
    """The statement to generate for the node at the end of ``path`` (the deepest statement
    that holds it, descending through the ``body`` blocks of :data:`_DESCENDED`), the line
    its code starts on (its leading blank and comment lines included) and the indentation of
    the blocks around it."""
    if len(path) < 2 or id(module) in wanted:
        return None
    statements: Sequence[cst.BaseStatement] = module.body
    parsed: list[ast.stmt] = tree.body
    indents: list[str] = []
    position = 1
    while True:
        statement = path[position]
        counterpart = _counterpart(statements, parsed, statement)
        if counterpart is None:
            return None
        block = path[position + 1] if position + 2 < len(path) else None
        if (
            isinstance(block, cst.IndentedBlock)
            and block is getattr(statement, "body", None)
            and not {id(statement), id(block)} & wanted
            and isinstance(counterpart, _DESCENDED.get(type(statement), ()))
        ):
            indents.append(module.default_indent if block.indent is None else block.indent)
            statements, parsed, position = block.body, counterpart.body, position + 2
            continue
        return statement, _first_line(statement, counterpart), indents  # type: ignore[return-value]


def _counterpart(
    statements: Sequence[cst.BaseStatement], parsed: list[ast.stmt], statement: cst.CSTNode
) -> ast.stmt | None:
    """The ``ast`` statement that starts where ``statement`` (one of ``statements``) does: a
    LibCST line of ``a; b`` holds two of the interpreter's statements."""
    index = 0
    for candidate in statements:
        if candidate is statement:
            if index >= len(parsed):
                return None
            found = parsed[index]
            simple = isinstance(statement, cst.SimpleStatementLine)
            return found if simple == isinstance(found, _SIMPLE_STATEMENTS) else None
        index += len(candidate.body) if isinstance(candidate, cst.SimpleStatementLine) else 1
    return None


_SIMPLE_STATEMENTS = (
    ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Return, ast.Pass, ast.Break, ast.Continue,
    ast.Delete, ast.Raise, ast.Assert, ast.Import, ast.ImportFrom, ast.Global, ast.Nonlocal,
)


def _first_line(statement: cst.BaseStatement, counterpart: ast.stmt) -> int:
    """The line the code of ``statement`` starts on: its own first line (the first decorator's
    for a decorated definition) less the blank and comment lines LibCST gives it."""
    line = counterpart.lineno
    leading = len(statement.leading_lines)
    decorators = getattr(statement, "decorators", ())
    if decorators and getattr(counterpart, "decorator_list", None):
        line = counterpart.decorator_list[0].lineno  # type: ignore[attr-defined]
        leading += len(decorators[0].leading_lines)
    return line - leading


def _matches(opening: list[str], where: CodeRange, lines: list[str]) -> bool:
    """Whether the source from the start of ``where`` reads as the node's generated code
    (``opening``: its first tokens) does: both without leading comment lines, parentheses and
    whitespace, which ranges may or may not hold."""
    if not 1 <= where.start.line <= len(lines):
        return False
    code = [line for line in "".join(opening).splitlines() if not line.lstrip().startswith("#")]
    source = [lines[where.start.line - 1][where.start.column :], *lines[where.start.line : where.start.line + 3]]
    expected = _opening(code)
    return bool(expected) and _opening(source).startswith(expected)  # the source line may go on with a comment


def _opening(lines: list[str]) -> str:
    text = "\n".join(lines).lstrip("( \t\r\n\f\\")
    return text.split("\n", 1)[0].rstrip()[:40]


__all__ = ["Shared", "node_positions"]
