"""What the codemods share: locating a finding's node, the loop around it, statement moves.

A fixer gets the parsed module (wrapped for positions and parents) and one finding, and
returns an :class:`Edit` (the new module and whether the fix is safe) or ``None`` when this
occurrence has no mechanical fix. Everything outside the replaced nodes is printed back
as it was read (LibCST keeps whitespace and comments), so the rest of the file stays
byte-identical.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import libcst as cst
from libcst.metadata import CodeRange, MetadataWrapper, PositionProvider

from accumlint.files.text_edits import TextEdit, split_lines, text_edits
from accumlint.model.names import children, dotted, method_name, receiver
from accumlint.model.positions import Shared, node_positions
from accumlint.spec.findings import Finding

SAFE = "safe"
UNSAFE = "unsafe"


@dataclass(frozen=True)
class Edit:
    """A fixer's result: the whole new module and the fix's applicability (``safe``/``unsafe``)."""

    module: cst.Module
    applicability: str


class Located:
    """A parsed module, the nodes a finding points at (:attr:`candidates`: every node with the
    finding's span, innermost first), and the parents of the module's syntax nodes.

    Built from the finding's position (:meth:`at_position`: LibCST's positions of the whole
    module) or, where the check still holds the node the rule reported, from that node
    (:meth:`at_node`: only the positions of the statement around it are generated).
    """

    def __init__(self, module: cst.Module, finding: Finding, candidates: list[cst.CSTNode],
                 parents: Mapping[cst.CSTNode, cst.CSTNode], text: str | None = None,
                 positions: Mapping[cst.CSTNode, CodeRange] | None = None, shared: Shared | None = None) -> None:
        self.module = module
        self.finding = finding
        self.candidates = candidates
        self.parents = parents
        self._text = text
        self._positions = positions
        self._shared = shared

    @classmethod
    def at_position(cls, module: cst.Module, finding: Finding) -> Located:
        """The nodes at ``finding``'s span of ``module`` (as the parser returned it: no node
        twice in the tree, so the wrapper need not copy it; a copy costs about a parse)."""
        wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
        positions = wrapper.resolve(PositionProvider)
        return cls(wrapper.module, finding, _spanning(positions, finding), parent_map(wrapper.module),
                   positions=positions)

    @classmethod
    def at_node(cls, module: cst.Module, node: cst.CSTNode, finding: Finding, text: str,
                parents: Mapping[cst.CSTNode, cst.CSTNode] | None = None, shared: Shared | None = None) -> Located:
        """``node`` of ``module`` (parsed from ``text``) and the nodes that share its span: its
        first children and its parents up to its statement (``parents``: :func:`parent_map` of
        ``module``; ``shared``: what positions read of it; both shared by the findings of one file)."""
        parents = parent_map(module) if parents is None else parents
        shared = Shared(text, parents) if shared is None else shared
        inner = []
        current = node
        while kids := children(current):
            current = kids[0]
            inner.append(current)
        outer = []
        current = node
        while not isinstance(current, cst.BaseStatement) and (up := parents.get(current)) is not None:
            outer.append(up)
            current = up
        chain = [*reversed(inner), node, *outer]
        ranges = node_positions(module, chain, text, shared)
        span = ranges[node]
        candidates = [n for n in chain if ranges.get(n) == span]
        return cls(module, finding, candidates, parents, text, shared=shared)

    def again(self, finding: Finding) -> Located:
        """The same module located at another finding by its position (positions and parents are
        resolved once: they cost about three LibCST parses, and a fixer never changes the tree it
        reads)."""
        assert self._positions is not None, "again() needs a Located built at_position"
        return Located(self.module, finding, _spanning(self._positions, finding), self.parents, self._text,
                       self._positions)

    def rewrite(self, *, remove: Sequence[cst.CSTNode] = (),
                insert_after: dict[cst.CSTNode, list[cst.BaseStatement]] | None = None,
                replace: dict[cst.CSTNode, cst.CSTNode] | None = None) -> cst.Module:
        """:func:`rewrite` of :attr:`module`, visiting only the nodes above the changed ones."""
        return rewrite(self.module, remove=remove, insert_after=insert_after, replace=replace, parents=self.parents)

    def positions_of(self, nodes: Sequence[cst.CSTNode]) -> Mapping[cst.CSTNode, CodeRange]:
        """LibCST's range of each of ``nodes`` (nodes of :attr:`module`)."""
        if self._positions is not None:
            return self._positions
        return node_positions(self.module, nodes, self._text, self._shared)

    def node(self, *types: type[cst.CSTNode]) -> cst.CSTNode | None:
        """The flagged node of one of ``types`` (the innermost one when several share the span)."""
        matching = [n for n in self.candidates if isinstance(n, types)]
        return matching[0] if matching else None

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        """The node's parent (``None`` for the module)."""
        return self.parents.get(node)

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        """The node's parents, innermost first."""
        current = self.parents.get(node)
        while current is not None:
            yield current
            current = self.parents.get(current)

    def statement(self, node: cst.CSTNode) -> cst.BaseStatement | None:
        """The innermost statement (simple line or compound) holding ``node``."""
        for current in (node, *self.ancestors(node)):
            if isinstance(current, cst.BaseStatement):
                return current
        return None

    def owner_in(self, node: cst.CSTNode, frame: cst.CSTNode) -> cst.BaseStatement | None:
        """The innermost statement holding ``node`` that belongs to ``frame``'s own block tree
        (through ``if``/``with``/``try``; a nested loop holding ``node`` is itself that statement)."""
        for current in (node, *self.ancestors(node)):
            if current is frame:
                return None
            if isinstance(current, cst.BaseStatement) and self.parent_frame(current) is frame:
                return current
        return None

    def parent_frame(self, statement: cst.CSTNode) -> cst.CSTNode | None:
        """The loop or function whose body (through ``if``/``with``/``try``) holds ``statement``."""
        for current in self.ancestors(statement):
            if isinstance(current, (cst.For, cst.While, cst.FunctionDef, cst.Module)):
                return current
        return None

    def enclosing_frames(self, node: cst.CSTNode) -> list[cst.CSTNode]:
        """The loops and the function around ``node``, innermost first."""
        frames = []
        for current in self.ancestors(node):
            if isinstance(current, (cst.For, cst.While)):
                frames.append(current)
            elif isinstance(current, cst.FunctionDef):
                frames.append(current)
                break
        return frames


def _spanning(positions: Mapping[cst.CSTNode, CodeRange], finding: Finding) -> list[cst.CSTNode]:
    """The nodes whose range is exactly ``finding``'s span, in ``positions``' order (innermost first)."""
    start = (finding.line, finding.column - 1)
    end = (finding.end_line or finding.line, (finding.end_column or finding.column) - 1)
    return [node for node, where in positions.items()
            if (where.start.line, where.start.column) == start and (where.end.line, where.end.column) == end]


def parent_map(module: cst.Module) -> dict[cst.CSTNode, cst.CSTNode]:
    """Each syntax node of ``module`` → its parent (whitespace and punctuation left out): what
    ``ParentNodeProvider`` gives the fixers, read from the dataclass fields (~40x cheaper)."""
    parents: dict[cst.CSTNode, cst.CSTNode] = {}
    stack: list[cst.CSTNode] = [module]
    while stack:
        current = stack.pop()
        for child in children(current):
            parents[child] = current
            stack.append(child)
    return parents


def statements_in(frame: cst.CSTNode) -> Iterator[cst.BaseStatement]:
    """Every statement of ``frame``'s own block tree, through ``if``/``with``/``try``, in order."""

    def walk(block: cst.CSTNode) -> Iterator[cst.BaseStatement]:
        body = getattr(block, "body", ())
        for statement in body if isinstance(body, Sequence) else ():
            yield statement
            if isinstance(statement, (cst.If, cst.With, cst.Try)):
                yield from walk(statement.body)
                orelse = getattr(statement, "orelse", None)
                while orelse is not None:
                    yield from walk(orelse.body)
                    orelse = getattr(orelse, "orelse", None) if isinstance(orelse, cst.If) else None
                for handler in getattr(statement, "handlers", ()):
                    yield from walk(handler.body)

    yield from walk(frame.body)  # type: ignore[attr-defined]


def expression_call(statement: cst.CSTNode) -> cst.Call | None:
    """The call of a one-expression statement line (``optimizer.step()``)."""
    if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
        expr = statement.body[0]
        if isinstance(expr, cst.Expr) and isinstance(expr.value, cst.Call):
            return expr.value
    return None


def is_step(statement: cst.CSTNode, exclude: str | None = None) -> bool:
    """Whether a statement is a bare ``X.step(...)`` call (not of ``exclude``, e.g. the scheduler)."""
    call = expression_call(statement)
    return call is not None and method_name(call) == "step" and dotted(receiver(call)) != exclude


@dataclass(frozen=True)
class GatedUpdate:
    """An ``if`` in a loop (or ``training_step``) whose body holds the optimizer update."""

    node: cst.If
    step: cst.BaseStatement  # the update statement in its body


def find_gate(frame: cst.CSTNode, exclude: str | None = None) -> GatedUpdate | None:
    """The update gate of a loop body: the first ``if`` whose own body calls ``X.step()``."""
    for statement in statements_in(frame):
        if isinstance(statement, cst.If) and isinstance(statement.body, cst.IndentedBlock):
            steps = [s for s in statement.body.body if is_step(s, exclude)]
            if steps:
                return GatedUpdate(statement, steps[0])
    return None


class _Rewriter(cst.CSTTransformer):
    """Remove statements, insert statements after others, replace nodes: by identity."""

    def __init__(
        self,
        remove: Sequence[cst.CSTNode] = (),
        insert_after: dict[cst.CSTNode, list[cst.BaseStatement]] | None = None,
        replace: dict[cst.CSTNode, cst.CSTNode] | None = None,
        entered: set[int] | None = None,
    ) -> None:
        super().__init__()
        self.remove = set(map(id, remove))
        self.insert_after = {id(k): v for k, v in (insert_after or {}).items()}
        self.replace = {id(k): v for k, v in (replace or {}).items()}
        self.entered = entered  # ids of the nodes whose children are visited (None: every node)

    def on_visit(self, node: cst.CSTNode) -> bool:
        return self.entered is None or id(node) in self.entered

    def on_leave(self, original: cst.CSTNode, updated: cst.CSTNode):  # type: ignore[override]
        updated = super().on_leave(original, updated)
        if id(original) in self.replace:
            return self.replace[id(original)]
        if isinstance(original, (cst.IndentedBlock, cst.Module)) and isinstance(updated, type(original)):
            body = []
            for old, new in zip(original.body, updated.body, strict=True):
                if id(old) not in self.remove:
                    body.append(new)
                body.extend(self.insert_after.get(id(old), ()))
            if not body and isinstance(updated, cst.IndentedBlock):
                body = [cst.SimpleStatementLine([cst.Pass()])]
            return updated.with_changes(body=body)
        return updated


def rewrite(
    module: cst.Module,
    *,
    remove: Sequence[cst.CSTNode] = (),
    insert_after: dict[cst.CSTNode, list[cst.BaseStatement]] | None = None,
    replace: dict[cst.CSTNode, cst.CSTNode] | None = None,
    parents: Mapping[cst.CSTNode, cst.CSTNode] | None = None,
) -> cst.Module:
    """``module`` with statements removed, statements inserted and nodes replaced (all by identity).

    With ``parents`` (:func:`parent_map` of ``module``) only the nodes above the changed ones are
    visited and rebuilt, the rest is kept as it is: the same module, without a transform of the
    whole tree (per fix on transformers' 235 KB ``trainer.py``: 0.4 s whole, 0.3 ms pruned). A
    changed node that ``parents`` does not know (whitespace, a comment) makes it visit every
    node, as without them."""
    entered = _above(module, [*remove, *(insert_after or {}), *(replace or {})], parents) if parents else None
    return module.visit(_Rewriter(remove, insert_after, replace, entered))  # type: ignore[return-value]


def _above(module: cst.Module, changed: Sequence[cst.CSTNode],
           parents: Mapping[cst.CSTNode, cst.CSTNode]) -> set[int] | None:
    """The ids of ``module`` and of every node above one of ``changed`` (None: one of them has
    no known parent)."""
    entered = {id(module)}
    for node in changed:
        current = parents.get(node)
        if current is None:
            return None
        while current is not None and id(current) not in entered:
            entered.add(id(current))
            current = parents.get(current)
    return entered


def module_edits(old: cst.Module, new: cst.Module, text: str, line: int) -> list[TextEdit]:
    """The whole-line edits that turn ``text`` (the code of ``old``) into the code of ``new``,
    generating only the top-level statements of ``new`` that are not ``old``'s own: a rewrite
    (:func:`rewrite`) keeps every statement it did not change by identity, and generating a whole
    module costs about a tenth of its parse (a 3,000-line file: ~80 ms a fix). The old code of
    those statements is looked up in ``text`` (where it occurs more than once, the occurrence that
    holds ``line``, the finding's); where it cannot be placed, the whole of ``new`` is generated."""
    a, b = old.body, new.body
    if (new.header is old.header and new.footer is old.footer
            and new.has_trailing_newline == old.has_trailing_newline):
        head = 0
        while head < min(len(a), len(b)) and a[head] is b[head]:
            head += 1
        tail = 0
        while tail < min(len(a), len(b)) - head and a[-1 - tail] is b[-1 - tail]:
            tail += 1
        before = "".join(old.code_for_node(statement) for statement in a[head:len(a) - tail])
        after = "".join(new.code_for_node(statement) for statement in b[head:len(b) - tail])
        if before == after:
            return []
        row = _row_in(text, before, line)
        if row is not None:
            return text_edits(before, after, first_row=row)
    return text_edits(text, new.code)


def _row_in(text: str, code: str, line: int) -> int | None:
    """The row at which ``code`` (whole lines) starts in ``text``: its only occurrence, or the one
    that holds row ``line``; None where there is none such."""
    if not code:
        return None
    rows = []
    offset = text.find(code)
    while offset >= 0:
        if offset == 0 or text[offset - 1] in "\r\n":
            rows.append((offset, offset + len(code)))
        offset = text.find(code, offset + 1)
    if not rows:
        return None
    starts = [len(split_lines(text[:start])) + 1 for start, _ in rows]
    if len(rows) == 1:
        return starts[0]
    for first, (start, end) in zip(starts, rows, strict=True):
        if first <= line < first + len(split_lines(text[start:end])):
            return first
    return None


def moved(statement: cst.BaseStatement) -> cst.BaseStatement:
    """A statement ready to be inserted elsewhere: without the blank lines and comments above it."""
    return statement.with_changes(leading_lines=())


def parenthesized(expr: cst.BaseExpression) -> cst.BaseExpression:
    """``expr`` wrapped in parentheses unless it is an atom (name, attribute, call, subscript)."""
    if isinstance(expr, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)) or expr.lpar:
        return expr
    return expr.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


Fixer = Callable[[Located], "Edit | None"]
