"""Expression helpers shared by the model: dotted names, imports, qualified names.

Our own small pass instead of LibCST's ScopeProvider/QualifiedNameProvider: the rules
need only the module's imports and the dotted text of receivers, and the metadata
providers cost several times the parse (measured: ScopeProvider 4–6× ``parse_module``).
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import typing
from collections.abc import Callable, Iterator
from typing import Any

import libcst as cst


def dotted(node: cst.BaseExpression | None) -> str | None:
    """The dotted text of a name, attribute chain or constant-key subscript, else ``None``.

    ``self.optimizer`` → ``"self.optimizer"``; ``state["iter_num"]`` → ``"state['iter_num']"``;
    ``self.optimizers()`` → ``"self.optimizers()"`` (a call with no arguments keeps its
    parentheses, Lightning's accessor style).
    """
    kind = type(node)  # exact types: isinstance on LibCST's (ABC) node classes is slow, and this is hot
    if kind is cst.Name:
        return node.value
    if kind is cst.Attribute:
        base = dotted(node.value)
        return f"{base}.{node.attr.value}" if base else None
    if kind is cst.Subscript and len(node.slice) == 1:
        index = node.slice[0].slice
        if type(index) is cst.Index and type(index.value) in (cst.SimpleString, cst.Integer):
            base = dotted(node.value)
            raw = index.value.value
            key = raw.strip("'\"") if type(index.value) is cst.SimpleString else raw
            return f"{base}['{key}']" if base else None
    if kind is cst.Call and not node.args:
        base = dotted(node.func)
        return f"{base}()" if base else None
    return None


def exact_kinds(*kinds: type[cst.CSTNode]) -> frozenset[type[cst.CSTNode]]:
    """``kinds`` as a set for ``type(node) in``, the hot walks' test: ``isinstance`` on LibCST's
    (ABC) node classes costs about half a microsecond for each class a node is not, a set lookup
    a tenth of that. Only for classes that no node class derives from, where the two agree."""
    derived = [kind.__name__ for kind in kinds if kind.__subclasses__()]
    if derived:
        raise TypeError(f"node classes with subclasses need isinstance: {', '.join(derived)}")
    return frozenset(kinds)


@functools.cache
def derives(kind: type, base: type) -> bool:
    """``issubclass(kind, base)`` for LibCST node classes, cached: their ABC metaclass answers
    a first ``isinstance`` of each pair by asking every subclass of ``base``."""
    return base in kind.__mro__


def last_segment(name: str | None) -> str:
    """The last component of a dotted name (``"self.lr_scheduler"`` → ``"lr_scheduler"``)."""
    if not name:
        return ""
    tail = name.rsplit(".", 1)[-1]
    if "['" in tail:
        key = tail.split("['", 1)[1].rstrip("']")
        if not key.isdigit():
            return key  # a keyed entry names itself: `self.opts['gen']` → "gen"
    return tail.rstrip("()").split("[", 1)[0]  # an element of a list: `optimizers[0]` → "optimizers"


def call_name(call: cst.Call) -> str | None:
    """The dotted text of a call's callee (``torch.optim.AdamW(...)`` → ``"torch.optim.AdamW"``)."""
    return dotted(call.func)


def method_name(call: cst.Call) -> str | None:
    """The attribute called (``x.y.step()`` → ``"step"``), or ``None`` for a plain function call."""
    return call.func.attr.value if type(call.func) is cst.Attribute else None


def receiver(call: cst.Call) -> cst.BaseExpression | None:
    """The object a method is called on (``opt.step()`` → ``opt``)."""
    return call.func.value if type(call.func) is cst.Attribute else None


def keyword(call: cst.Call, name: str) -> cst.BaseExpression | None:
    """The value of keyword argument ``name`` of ``call``, if given."""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            return arg.value
    return None


def positional(call: cst.Call, index: int) -> cst.BaseExpression | None:
    """The ``index``-th positional argument of ``call``, if given."""
    values = [arg.value for arg in call.args if arg.keyword is None and not arg.star]
    return values[index] if index < len(values) else None


def int_value(node: cst.BaseExpression | None) -> int | None:
    """The value of an integer literal (signed), else ``None``."""
    if isinstance(node, cst.Integer):
        try:
            return int(node.value.replace("_", ""), 0)
        except ValueError:
            return None
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        inner = int_value(node.expression)
        return -inner if inner is not None else None
    return None


#: the chains :func:`names_in` names (a call with no arguments is read inside, not named)
_DOTTED = exact_kinds(cst.Name, cst.Attribute, cst.Subscript)


def names_in(node: cst.CSTNode) -> Iterator[str]:
    """Every dotted name read in an expression (outermost chains only: ``a.b.c`` once, not ``a``)."""
    stack: list[cst.CSTNode] = [node]
    while stack:
        current = stack.pop()
        kind = type(current)
        text = dotted(current) if kind in _DOTTED else None
        if text is not None:
            yield text
            continue
        if kind is cst.Lambda or kind is cst.FunctionDef:
            continue
        stack.extend(children(current))


#: what :func:`calls_in` does not descend into: code that does not run where it is written
_NOT_ENTERED = exact_kinds(cst.Lambda, cst.FunctionDef, cst.ClassDef)


def calls_in(node: cst.CSTNode) -> list[cst.Call]:
    """Every call inside ``node`` in execution order (arguments and receivers before the call),
    not descending into lambdas or nested definitions."""
    # iterative: a recursive closure is a reference cycle that would keep the result (and
    # the nodes it holds) alive until the garbage collector's next full pass
    result: list[cst.Call] = []
    stack: list[cst.CSTNode | tuple[cst.Call]] = [node]  # a 1-tuple: a call whose children are done
    while stack:
        current = stack.pop()
        kind = type(current)  # exact types: isinstance on LibCST's (ABC) node classes is slow here
        if kind is tuple:
            result.append(current[0])  # type: ignore[index]
            continue
        if kind in _NOT_ENTERED or is_leaf(kind):  # a name, a literal
            continue
        if kind is cst.Call:
            stack.append((current,))  # type: ignore[arg-type]
        below = children(current)  # type: ignore[arg-type]
        below.reverse()
        stack += below
    return result


#: where a call sits among the conditional expressions of its statement: (IfExp, "body"/"orelse") pairs
Branches = tuple[tuple[cst.IfExp, str], ...]


def calls_with_branches(node: cst.CSTNode) -> tuple[list[cst.Call], dict[int, Branches]]:
    """:func:`calls_in`, and for each call inside an arm of a conditional expression
    (``clip(...) if accelerator.sync_gradients else None``) the arms around it, outermost first
    (by ``id`` of the call; calls outside every arm are not keyed)."""
    result: list[cst.Call] = []
    branches: dict[int, Branches] = {}
    stack: list[tuple[cst.CSTNode, Branches, bool]] = [(node, (), False)]  # (node, arms, children done)
    while stack:
        current, where, done = stack.pop()
        if done:
            result.append(current)  # type: ignore[arg-type]
            if where:
                branches[id(current)] = where
            continue
        kind = type(current)
        if kind in _NOT_ENTERED or is_leaf(kind):
            continue
        if kind is cst.IfExp:  # test first, then one of the arms
            stack.append((current.orelse, (*where, (current, "orelse")), False))  # type: ignore[attr-defined]
            stack.append((current.body, (*where, (current, "body")), False))  # type: ignore[attr-defined]
            stack.append((current.test, where, False))  # type: ignore[attr-defined]
            continue
        if kind is cst.Call:
            stack.append((current, where, True))
        below = children(current)
        below.reverse()
        stack += [(child, where, False) for child in below]
    return result, branches


def _bodies(statement: cst.BaseCompoundStatement) -> list[cst.CSTNode]:
    """The statements directly inside a compound statement (all its blocks)."""
    body = getattr(statement, "body", None)  # a `match` has cases, no body
    blocks: list[cst.BaseSuite] = [body] if isinstance(body, cst.BaseSuite) else []
    for attr in ("orelse", "finalbody"):
        extra = getattr(statement, attr, None)
        if isinstance(extra, cst.If):
            blocks.append(cst.IndentedBlock(body=[extra]))
        elif extra is not None:
            blocks.append(extra.body)
    for handler in getattr(statement, "handlers", ()):
        blocks.append(handler.body)
    for case in getattr(statement, "cases", ()):
        blocks.append(case.body)
    out: list[cst.CSTNode] = []
    for block in blocks:
        out.extend(block.body if isinstance(block, (cst.IndentedBlock, cst.SimpleStatementSuite)) else ())
    return out


class ImportMap:
    """Local name → qualified name, from the module's ``import`` statements (any nesting level).

    ``import torch.nn as nn`` maps ``nn`` → ``torch.nn``; ``from accelerate import
    Accelerator as A`` maps ``A`` → ``accelerate.Accelerator``. Relative imports keep their
    dots stripped (``from .x import y`` → ``x.y``).
    """

    def __init__(self, module: cst.Module) -> None:
        self.names: dict[str, str] = {}
        self.modules: set[str] = set()
        stack: list[cst.CSTNode] = list(module.body)
        while stack:
            node = stack.pop()
            kind = type(node)
            if kind is cst.SimpleStatementLine:
                stack.extend(node.body)  # type: ignore[attr-defined]
                continue
            if derives(kind, cst.BaseCompoundStatement):
                # imports are statements: walk bodies, never expressions
                stack.extend(_bodies(node))  # type: ignore[arg-type]
                continue
            if kind is cst.Import:
                for alias in node.names:
                    full = dotted(alias.name) or ""
                    self.modules.add(full)
                    if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                        self.names[alias.asname.name.value] = full
                    else:
                        head = full.split(".", 1)[0]
                        self.names.setdefault(head, head)
            elif kind is cst.ImportFrom:
                base = dotted(node.module) if node.module is not None else ""
                self.modules.add(base or "")
                if isinstance(node.names, cst.ImportStar):
                    continue
                for alias in node.names:
                    name = dotted(alias.name) or ""
                    local = name
                    if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                        local = alias.asname.name.value
                    self.names[local] = f"{base}.{name}" if base else name

    def qualify(self, name: str | None) -> str | None:
        """Resolve the head of a dotted name through the imports (``nn.Linear`` → ``torch.nn.Linear``)."""
        if not name:
            return None
        head, _, rest = name.partition(".")
        resolved = self.names.get(head)
        if resolved is None:
            return None
        return f"{resolved}.{rest}" if rest else resolved

    def imports_module(self, prefix: str) -> bool:
        """Whether the module imports ``prefix`` or something under it."""
        return any(m == prefix or m.startswith(prefix + ".") for m in self.modules) or any(
            q == prefix or q.startswith(prefix + ".") for q in self.names.values()
        )


_SKIPPED_FIELDS = ("lpar", "rpar", "comma", "semicolon", "header", "footer", "leading_lines", "lines_after_decorators")


@functools.cache
def holds_statements(kind: type) -> bool:
    """Whether a node of this type may have a statement below it: not an expression (a lambda's
    body is one) nor a small statement. A walk that looks for statements (assignments) need not
    enter the others, most of a module's nodes."""
    return not (derives(kind, cst.BaseExpression) or derives(kind, cst.BaseSmallStatement))


def walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """``node`` and every node below it (depth first, iterative: no recursion limit on deep trees).
    A whole module's nodes are listed once and kept while the module lives (:func:`_below`)."""
    if type(node) is cst.Module:
        yield node
        yield from _below(node)
        return
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(children(current))


#: id(module) → the module and its nodes below it in :func:`walk`'s order: the model and the
#: rules walk a whole module many times (the accelerate package: 84 walks of 19 modules,
#: 320,000 nodes), and a list read again costs a fraction of the walk. It holds the modules:
#: the engine empties it after each file (:func:`forget_walks`), and it keeps at most
#: :data:`MAX_WALKED` (LibCST's nodes take no weak reference)
_MODULE_NODES: dict[int, tuple[cst.Module, list[cst.CSTNode]]] = {}
MAX_WALKED = 16


def _below(module: cst.Module) -> list[cst.CSTNode]:
    kept = _MODULE_NODES.get(id(module))
    if kept is not None and kept[0] is module:
        return kept[1]
    nodes: list[cst.CSTNode] = []
    stack = children(module)
    while stack:
        current = stack.pop()
        nodes.append(current)
        stack.extend(children(current))
    if len(_MODULE_NODES) >= MAX_WALKED:
        del _MODULE_NODES[next(iter(_MODULE_NODES))]
    _MODULE_NODES[id(module)] = (module, nodes)
    return nodes


def forget_walks() -> None:
    """Drop the node lists :func:`walk` keeps (and the modules they hold)."""
    _MODULE_NODES.clear()


def children(node: cst.CSTNode) -> list[cst.CSTNode]:
    """The syntax children of ``node`` without whitespace and punctuation, in field order.

    LibCST's own ``children`` property runs a visitor per call; reading the dataclass
    fields directly (all at once, with one ``attrgetter`` per node type) is an order of
    magnitude cheaper on the hot path.
    """
    kind = type(node)
    reader = _READERS.get(kind, _UNSEEN)
    if reader is _UNSEEN:
        reader = _reader(kind)
    if reader is None:
        return []
    read, single = reader
    values = (read(node),) if single else read(node)
    out: list[cst.CSTNode] = []
    kinds = _KIND
    for value in values:
        kind_of = kinds.get(type(value))
        if kind_of is None:
            kind_of = _classify(type(value))
        if kind_of == 1:
            out.append(value)
        elif kind_of == 2:
            for element in value:
                element_kind = kinds.get(type(element))
                if element_kind is None:
                    element_kind = _classify(type(element))
                if element_kind == 1:
                    out.append(element)
    return out


def is_leaf(kind: type) -> bool:
    """Whether nodes of this type have no syntax children (names, literals), once seen by :func:`children`."""
    return _READERS.get(kind, _UNSEEN) is None


#: node type → (a reader of the fields that may hold syntax children, whether it reads a
#: single field), or None for a type without such fields
_READERS: dict[type, tuple[Callable[[cst.CSTNode], Any], bool] | None] = {}
_UNSEEN = object()


def _reader(kind: type) -> tuple[Callable[[cst.CSTNode], Any], bool] | None:
    names = tuple(
        f.name for f in dataclasses.fields(kind)
        if not f.name.startswith("whitespace") and f.name not in _SKIPPED_FIELDS and not _is_text(f.type)
    )
    reader = (operator.attrgetter(*names), len(names) == 1) if names else None
    _READERS[kind] = reader
    return reader


def _is_text(annotation: object) -> bool:
    """Whether a LibCST field's annotation says it holds source text, never a node
    (``Name.value: str``, ``Arg.star: Literal["", "*", "**"]``)."""
    return annotation is str or typing.get_origin(annotation) is typing.Literal


#: type → 1 (a syntax node we walk), 2 (a sequence), 0 (anything else); isinstance on
#: LibCST's abstract node classes is slow, a per-type cache is not
_KIND: dict[type, int] = {}


def _classify(kind: type) -> int:
    # the MRO, not issubclass: for a type outside LibCST (str, None) the ABC metaclass asks
    # every one of CSTNode's hundreds of subclasses, ~4 ms per type
    if derives(kind, cst.CSTNode):
        layout = (cst.BaseParenthesizableWhitespace, cst.Comment, cst.Newline)
        result = 0 if any(derives(kind, base) for base in layout) else 1
    elif issubclass(kind, (tuple, list)):
        result = 2
    else:
        result = 0
    _KIND[kind] = result
    return result


def string_key(expression: cst.BaseExpression) -> str | None:
    """The string key a value is read under: ``state["key"]`` → ``key``; ``state.get("key", 0)``
    → ``key``; None for anything else."""
    if isinstance(expression, cst.Call) and method_name(expression) == "get" and expression.args:
        value = expression.args[0].value
        return value.evaluated_value if isinstance(value, cst.SimpleString) else None  # type: ignore[return-value]
    if isinstance(expression, cst.Subscript) and len(expression.slice) == 1:
        index = expression.slice[0].slice
        if isinstance(index, cst.Index) and isinstance(index.value, cst.SimpleString):
            return index.value.evaluated_value  # type: ignore[return-value]
    return None


def code_of(node: cst.CSTNode) -> str:
    """The source of a node as written (a small expression, for a message)."""
    return cst.Module([]).code_for_node(node)


def declares_attribute(class_def: cst.ClassDef, names: frozenset[str]) -> bool:
    """Whether the class body or one of its methods assigns one of ``names`` (``x = ...`` in the
    class body or ``self.x = ...`` anywhere in it)."""
    for node in walk(class_def.body):
        if isinstance(node, (cst.Assign, cst.AnnAssign)):
            targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
            for target in targets:
                if last_segment(dotted(target)) in names:
                    return True
    return False
