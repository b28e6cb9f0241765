"""The vocabulary of the metamorphic tests: a program (one file or a small project folder), a
named transformation of it, the registry of transformations, and the LibCST helpers the
transformation families share."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider, ScopeProvider

#: The families of transformations, in the order the report prints them.
FAMILIES = ("rename", "gate", "wrap", "loop", "extract", "config", "roles", "values")


@dataclass(frozen=True)
class Program:
    """A training program: ``files`` maps a path relative to the program's folder (``/``
    separated) to its source text; ``main`` is the file that is run (for a folder sample whose
    entry point is unknown, its first file)."""

    files: tuple[tuple[str, str], ...]
    main: str

    @classmethod
    def single(cls, name: str, text: str) -> Program:
        """A one-file program."""
        return cls(((name, text),), name)

    @property
    def is_single(self) -> bool:
        return len(self.files) == 1

    @property
    def text(self) -> str:
        """The main file's source."""
        return dict(self.files)[self.main]

    def replace(self, changed: dict[str, str]) -> Program:
        """This program with the files in ``changed`` replaced or added (new ones go last)."""
        known = dict(self.files)
        files = [(name, changed.get(name, text)) for name, text in self.files]
        files += [(name, text) for name, text in changed.items() if name not in known]
        return Program(tuple(files), self.main)


@dataclass(frozen=True)
class Transformation:
    """A semantics-preserving refactoring. ``apply`` returns the transformed program, or None
    where the refactoring does not apply to it (then the pair is skipped, not counted)."""

    name: str
    family: str
    apply: Callable[[Program], Program | None]

    @property
    def doc(self) -> str:
        return (self.apply.__doc__ or "").strip()


#: name → transformation, in registration order (family modules register on import).
REGISTRY: dict[str, Transformation] = {}


def transformation(name: str, family: str) -> Callable[[Callable[[Program], Program | None]], Callable]:
    """Register the decorated ``Program -> Program | None`` function as ``family.name``; its
    docstring says what it preserves and when it applies."""
    assert family in FAMILIES, family

    def register(apply: Callable[[Program], Program | None]) -> Callable[[Program], Program | None]:
        full = f"{family}.{name}"
        assert full not in REGISTRY, full
        assert apply.__doc__, f"{full} needs a docstring: what it preserves, when it applies"
        REGISTRY[full] = Transformation(full, family, apply)
        return apply

    return register


def per_file(edit: Callable[[str], str | None]) -> Callable[[Program], Program | None]:
    """A program transformation that applies ``edit`` (source → source, or None where it does
    not apply) to every file on its own; it applies where it changes at least one file. For
    edits that change nothing another module can import."""

    def apply(program: Program) -> Program | None:
        changed: dict[str, str] = {}
        for name, text in program.files:
            new = edit(text)
            if new is not None and new != text:
                changed[name] = new
        return program.replace(changed) if changed else None

    apply.__doc__ = edit.__doc__
    apply.__name__ = edit.__name__
    return apply


def single_file(edit: Callable[[str], str | None]) -> Callable[[Program], Program | None]:
    """A program transformation for one-file programs only (``edit`` renames or moves names
    that another module of a folder could import)."""

    def apply(program: Program) -> Program | None:
        if not program.is_single:
            return None
        new = edit(program.text)
        return program.replace({program.main: new}) if new is not None and new != program.text else None

    apply.__doc__ = edit.__doc__
    apply.__name__ = edit.__name__
    return apply


# --------------------------------------------------------------------------- LibCST helpers

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class FreshNames:
    """Names that occur nowhere in a source (not even in strings or comments), on demand:
    ``prefix`` followed by a number."""

    def __init__(self, *sources: str) -> None:
        self.taken = {word for text in sources for word in _IDENTIFIER.findall(text)}
        self.counter = 0

    def __call__(self, prefix: str = "v") -> str:
        while True:
            self.counter += 1
            name = f"{prefix}{self.counter}"
            if name not in self.taken:
                self.taken.add(name)
                return name


@functools.lru_cache(maxsize=64)
def parse(text: str) -> cst.Module | None:
    """The LibCST tree of ``text``, or None where LibCST cannot parse it (such a file has no
    transformation). Cached: the transformations of one input share one tree (trees are
    immutable), its node index and its metadata."""
    try:
        return cst.parse_module(text)
    except (cst.ParserSyntaxError, RecursionError):
        return None


#: (module, scopes, positions) by id of the module; the entry holds the module, so the id stays its own
_METADATA: dict[int, tuple[cst.Module, Mapping, Mapping]] = {}


def metadata(module: cst.Module) -> tuple[Mapping, Mapping] | None:
    """The module's scopes and positions (``ScopeProvider``, ``PositionProvider``), cached with
    the module; None where LibCST's scope analysis gives up on it."""
    entry = _METADATA.get(id(module))
    if entry is None or entry[0] is not module:
        if len(_METADATA) > 64:
            _METADATA.clear()
        wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
        try:
            found = wrapper.resolve_many([ScopeProvider, PositionProvider])
        except Exception:  # noqa: BLE001 - the scope analysis raises on some valid code
            return None
        entry = _METADATA[id(module)] = (module, found[ScopeProvider], found[PositionProvider])
    return entry[1], entry[2]


def parsed_with_scopes(text: str) -> tuple[cst.Module, Mapping] | None:
    """The tree of ``text`` and its scopes, or None where it does not parse or its scope analysis fails."""
    module = parse(text)
    if module is None:
        return None
    resolved = metadata(module)
    return None if resolved is None else (module, resolved[0])


def code(node: cst.CSTNode) -> str:
    """The source of one node."""
    return cst.Module([]).code_for_node(node)


def stmt(source: str) -> cst.BaseStatement:
    """One statement parsed from source."""
    return cst.parse_statement(source)


def is_backward_call(node: cst.CSTNode) -> bool:
    """``X.backward(...)`` or ``backward(...)``: the event every training loop runs."""
    if not isinstance(node, cst.Call):
        return False
    func = node.func
    return (isinstance(func, cst.Attribute) and func.attr.value == "backward") or (
        isinstance(func, cst.Name) and func.value == "backward"
    )


#: the nodes that start afresh (their loops are their own) and the loops a backward runs in
_SCOPES = (cst.FunctionDef, cst.ClassDef, cst.Lambda)
_LOOPS = (cst.For, cst.While)


class _BackwardLoops(cst.CSTVisitor):
    """Loops that run a backward directly: the innermost loop around each backward call (a
    nested function or class starts afresh: its loops are its own)."""

    def __init__(self) -> None:
        self.stack: list[cst.CSTNode | None] = []
        self.loops: list[cst.CSTNode] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, _LOOPS):
            self.stack.append(node)
        elif isinstance(node, _SCOPES):
            self.stack.append(None)
        elif is_backward_call(node) and self.stack and self.stack[-1] is not None:
            loop = self.stack[-1]
            if all(loop is not seen for seen in self.loops):
                self.loops.append(loop)
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        if isinstance(original_node, _LOOPS + _SCOPES):
            self.stack.pop()


def backward_loops(module: cst.CSTNode) -> list[cst.CSTNode]:
    """The loops (``For``/``While``) of ``module`` that run a backward call directly (not only
    in a nested loop), in source order of their first backward."""
    visitor = _BackwardLoops()
    module.visit(visitor)
    return visitor.loops


def innermost(loops: Sequence[cst.CSTNode]) -> list[cst.CSTNode]:
    """The loops among ``loops`` that contain none of the others."""
    inside: set[int] = set()
    for loop in loops:
        for other in loops:
            if other is not loop and contains(loop, other):
                inside.add(id(loop))
    return [loop for loop in loops if id(loop) not in inside]


def contains(outer: cst.CSTNode, inner: cst.CSTNode) -> bool:
    """Whether ``inner`` is ``outer`` or one of its descendants."""
    return any(node is inner for node in walk(outer))


#: id of a node → its children; filled a whole tree at a time (LibCST computes ``.children`` by
#: rebuilding the node, far too slow for repeated walks). ``_INDEXED`` holds the trees indexed,
#: so that no id is reused while it is in the index.
_CHILDREN: dict[int, list[cst.CSTNode]] = {}
_INDEXED: list[cst.CSTNode] = []


class _Indexer(cst.CSTVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.stack: list[cst.CSTNode] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        if self.stack:
            _CHILDREN[id(self.stack[-1])].append(node)
        _CHILDREN[id(node)] = []
        self.stack.append(node)
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        self.stack.pop()


def children(node: cst.CSTNode) -> list[cst.CSTNode]:
    """The node's children in source order (from the index; the node's tree is indexed on first
    use)."""
    found = _CHILDREN.get(id(node))
    if found is None:
        if len(_INDEXED) > 256:
            _CHILDREN.clear()
            _INDEXED.clear()
        node.visit(_Indexer())
        _INDEXED.append(node)
        found = _CHILDREN[id(node)]
    return found


def walk(node: cst.CSTNode, *, into_scopes: bool = True) -> Iterator[cst.CSTNode]:
    """``node`` and its descendants, depth first in source order; ``into_scopes=False`` stops
    at nested functions, classes and lambdas."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        below = children(current)
        if not into_scopes:
            below = [c for c in below if not isinstance(c, (cst.FunctionDef, cst.ClassDef, cst.Lambda))]
        stack.extend(reversed(below))


def declared_names(module: cst.Module) -> set[str]:
    """The names a ``global`` or ``nonlocal`` statement anywhere in ``module`` declares."""
    return {n.name.value for node in walk(module) if isinstance(node, (cst.Global, cst.Nonlocal)) for n in node.names}


def one_argument_call(node: cst.CSTNode, function: str) -> bool:
    """Whether ``node`` is ``function(X)``: a call of that plain name with one positional argument."""
    return (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Name)
        and node.func.value == function
        and len(node.args) == 1
        and node.args[0].keyword is None
        and node.args[0].star == ""
    )


def enumerate_target(loop: cst.CSTNode) -> tuple[cst.Name, cst.BaseAssignTargetExpression, cst.Call] | None:
    """For ``for I, T in enumerate(X)`` (no ``start``): (I, T, the enumerate call), else None."""
    if not isinstance(loop, cst.For) or loop.asynchronous is not None:
        return None
    call = loop.iter
    if not one_argument_call(call, "enumerate"):
        return None
    target = loop.target
    if not (
        isinstance(target, cst.Tuple)
        and len(target.elements) == 2
        and all(isinstance(e, cst.Element) for e in target.elements)
        and isinstance(target.elements[0].value, cst.Name)
    ):
        return None
    return target.elements[0].value, target.elements[1].value, call


def enumerate_loops(module: cst.Module) -> Iterator[tuple[cst.For, str, cst.BaseAssignTargetExpression, cst.Call]]:
    """The backward-running ``for I, T in enumerate(X)`` loops (no ``start``): (loop, I's name, T, the call)."""
    for loop in backward_loops(module):
        found = enumerate_target(loop)
        if found is not None:
            yield loop, found[0].value, found[1], found[2]  # type: ignore[misc]


def body_statements(block: cst.BaseSuite) -> list[cst.BaseStatement]:
    """The statements of an indented block (a one-line suite becomes one simple statement)."""
    if isinstance(block, cst.IndentedBlock):
        return list(block.body)
    return [cst.SimpleStatementLine(body=block.body)]


def block(statements: Sequence[cst.BaseStatement]) -> cst.IndentedBlock:
    return cst.IndentedBlock(body=list(statements))


def after_docstring(body: Sequence[cst.BaseStatement]) -> int:
    """The index in a module's or function's body right after its docstring (0 without one)."""
    return int(
        bool(body)
        and isinstance(body[0], cst.SimpleStatementLine)
        and len(body[0].body) == 1
        and isinstance(body[0].body[0], cst.Expr)
        and isinstance(body[0].body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def insert_import(module: cst.Module, source: str) -> cst.Module:
    """``module`` with the import statement ``source`` after its docstring and ``__future__``
    imports."""
    return insert_statements(module, [stmt(source)])


def insert_statements(
    module: cst.Module, statements: Sequence[cst.BaseStatement], *, after_imports: bool = False
) -> cst.Module:
    """``module`` with ``statements`` after its docstring and ``__future__`` imports (with
    ``after_imports``, after the run of import lines that opens it)."""
    body = list(module.body)
    index = after_docstring(body)

    def opening_import(statement: cst.BaseStatement) -> bool:
        if not isinstance(statement, cst.SimpleStatementLine):
            return False
        if any(
            isinstance(s, cst.ImportFrom) and isinstance(s.module, cst.Name) and s.module.value == "__future__"
            for s in statement.body
        ):
            return True
        return after_imports and all(isinstance(s, (cst.Import, cst.ImportFrom)) for s in statement.body)

    while index < len(body) and opening_import(body[index]):
        index += 1
    body[index:index] = statements
    return module.with_changes(body=body)


def double_quoted_fstring_nodes(module: cst.Module) -> set[int]:
    """ids of the nodes inside a ``"``-quoted f-string, where (before Python 3.12) an inserted
    expression must quote its strings with ``'``."""
    return {id(n) for f in walk(module) if isinstance(f, cst.FormattedString) and '"' in f.start for n in walk(f)}


def module_binds(module: cst.Module, name: str) -> bool:
    """Whether ``name`` occurs anywhere in the module as a name (then a helper import under that
    name could clash)."""
    return any(isinstance(node, cst.Name) and node.value == name for node in walk(module))


def imports_module(module: cst.Module, name: str) -> bool:
    """Whether the module's top level runs ``import NAME`` (so ``NAME.x`` reaches it)."""
    for statement in module.body:
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if isinstance(small, cst.Import) and any(
                    isinstance(alias.name, cst.Name) and alias.name.value == name and alias.asname is None
                    for alias in small.names
                ):
                    return True
    return False


class ReplaceNodes(cst.CSTTransformer):
    """Replaces nodes by identity: ``replacements`` maps ``id(original node)`` to a function of
    the updated node giving the new node (or a ``FlattenSentinel`` of statements)."""

    def __init__(self, replacements: dict[int, Callable[[cst.CSTNode], cst.CSTNode | cst.FlattenSentinel]]) -> None:
        super().__init__()
        self.replacements = replacements

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode):  # type: ignore[override]
        make = self.replacements.get(id(original_node))
        return make(updated_node) if make else updated_node


def replace_nodes(module: cst.Module, replacements: dict[int, Callable]) -> str | None:
    """The source of ``module`` with the replacements made, or None where there are none."""
    if not replacements:
        return None
    return module.visit(ReplaceNodes(replacements)).code


def own_control(body: cst.BaseSuite) -> bool:
    """Whether the body leaves the loop or the function by itself (``break``/``continue`` not in
    a nested loop, ``return``/``yield``/``await``), declares names, or calls ``super()``."""

    def visit(node: cst.CSTNode, in_loop: bool) -> bool:
        if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            return False
        if isinstance(node, (cst.Break, cst.Continue)) and not in_loop:
            return True
        if isinstance(node, (cst.Return, cst.Yield, cst.Await, cst.Global, cst.Nonlocal)):
            return True
        if isinstance(node, cst.Name) and node.value == "super":
            return True
        loop = isinstance(node, (cst.For, cst.While))
        return any(visit(child, in_loop or (loop and child is node.body)) for child in children(node))

    return visit(body, False)


def enclosing_method(module: cst.Module, loop: cst.CSTNode) -> tuple[cst.ClassDef, cst.FunctionDef] | None:
    """The class and the method (first parameter ``self``) whose own body holds the loop."""
    for node in walk(module):
        if isinstance(node, cst.ClassDef) and isinstance(node.body, cst.IndentedBlock):
            for item in node.body.body:
                if (
                    isinstance(item, cst.FunctionDef)
                    and item.params.params
                    and item.params.params[0].name.value == "self"
                    and any(n is loop for n in walk(item.body, into_scopes=False))
                ):
                    return node, item
    return None
