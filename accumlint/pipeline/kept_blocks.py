"""Which definitions of a large file LibCST reads: the others become blank lines.

LibCST's parse and the model cost ~200 MB and ~2 s on a 460 KB test module of which most
functions never touch a gradient. The interpreter's tree (already built for the gates) says
which definitions the model can need, and the rest of the text is blanked, line for line, so
every position LibCST reports is that of the real file.

The units are the definitions at the top level and in class bodies (methods, nested
classes); everything else (imports, assignments, a class's own statements, a function's
inner code) is always read with its unit. A unit is read when

1. it is **anchored**: it names, anywhere in its code, one of the selected rules' markers, a
   name the model knows as a framework's hook or argument (:func:`known_names`: every
   identifier among the string constants of the model, frameworks and checks), or it is a
   dunder (``__init__``, called implicitly);
2. it **reaches** a read unit: it names what one defines (a function, a class, an attribute
   it assigns, a class attribute): it may call code that performs events;
3. it is **reached**: a read unit names what it defines (the model may follow the call or read
   the role it binds).

A name counts wherever it occurs as an identifier or an identifier-like string constant
(``getattr(self, "opt")``), so each set is a superset of what the model can follow, and the
model of the kept text is the model of the whole file for every scope a rule can report in
(``tests/engine/test_kept_blocks.py`` checks the findings on every sample we have, read whole and
read this way).
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import functools
import re
import types
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from accumlint.files.text_edits import split_lines

#: files from this size on are read this way: the interpreter's tree is built for them anyway
#: (:data:`accumlint.source.parsing.INTERPRETER_FIRST_ABOVE`), and below it LibCST's parse is cheap
KEPT_BLOCKS_FROM_BYTES = 64 * 1024
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


@dataclass(eq=False)
class _Unit:
    """One definition: its lines (decorators included, 1-based, inclusive), the names it
    defines, the names its code uses, and for each name it binds for code elsewhere (an
    attribute it assigns, a class attribute) the names of the value; a class holds its methods
    and classes as units (``outer``: the class around a method)."""

    node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
    first: int
    last: int
    defines: set[str]
    names: set[str]
    binds: dict[str, set[str]]
    inner: list[_Unit] = field(default_factory=list)
    outer: _Unit | None = None
    own: bool = True  #: a class with statements of its own (else only definitions)
    active: bool = False  #: may perform events, or call code that does
    read: bool = False


def kept_text(tree: ast.Module, text: str, markers: Iterable[str]) -> str | None:
    """``text`` (the source of ``tree``) with the lines of every unit no rule can need blanked
    (``markers``: the selected rules' markers, as names); None where every unit is read."""
    units = [unit for statement in tree.body if (unit := _unit(statement)) is not None]
    every = list(_flatten(units))
    if not every:
        return None
    marked = frozenset(markers)
    # the module's own statements bind names too (`step_fn = gated if fast else eager`)
    top = _scan([statement for statement in tree.body if not isinstance(statement, _DEFINITIONS)], False)[1]
    _activate(every, top, marked)
    _read(every, known_names())
    for unit in every:
        if unit.read and unit.inner and not unit.own and not any(inner.read for inner in unit.inner):
            unit.inner[0].read = True  # a class body must hold a statement
    blank = [(unit.first, unit.last) for unit in _outermost_unread(units)]
    return blank_rows(text, blank) if blank else None


def blank_rows(text: str, spans: Iterable[tuple[int, int]]) -> str:
    """``text`` with the rows of each span (1-based, inclusive) emptied but for their line ends:
    every position in the rows left is that of ``text``."""
    lines = split_lines(text)
    for first, last in spans:
        for number in range(first - 1, min(last, len(lines))):
            line = lines[number]
            lines[number] = line[len(line.rstrip("\r\n")):]  # the line's end only
    return "".join(lines)


@dataclass(eq=False)
class Block:
    """One definition at the top level, read whole: its rows (decorators included, 1-based,
    inclusive), what it and every definition inside it define and name, and what they bind for
    code elsewhere (name → the names of the value), as :func:`kept_text` reads a unit."""

    node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
    first: int
    last: int
    defines: frozenset[str]
    names: frozenset[str]
    binds: dict[str, set[str]]


def top_blocks(tree: ast.Module) -> tuple[list[Block], set[str], dict[str, set[str]]]:
    """The :class:`Block` of each definition at the top level of ``tree``, in order, with what
    the module's other statements name and bind."""
    blocks = [found for statement in tree.body if (found := read_block(statement)) is not None]
    names, binds = _scan([statement for statement in tree.body if not isinstance(statement, _DEFINITIONS)], False)
    return blocks, names, binds


def read_block(statement: ast.stmt) -> Block | None:
    """The :class:`Block` of a top-level ``statement`` (None: it defines nothing)."""
    unit = _unit(statement)
    if unit is None:
        return None
    every = list(_flatten([unit]))
    binds: dict[str, set[str]] = {}
    for inner in every:
        for name, value in inner.binds.items():
            binds.setdefault(name, set()).update(value)
    return Block(unit.node, unit.first, unit.last, frozenset().union(*(u.defines for u in every)),
                 frozenset().union(*(u.names for u in every)), binds)


def definition_rows(statement: ast.stmt) -> tuple[int, int] | None:
    """The rows of a top-level definition (decorators included, 1-based, inclusive), as
    :class:`Block` has them; None for another statement."""
    if not isinstance(statement, _DEFINITIONS):
        return None
    first = min([statement.lineno, *(decorator.lineno for decorator in statement.decorator_list)])
    return first, statement.end_lineno or statement.lineno


def _index(every: list[_Unit], names: Callable[[_Unit], Iterable[str]]) -> dict[str, list[_Unit]]:
    found: dict[str, list[_Unit]] = {}
    for unit in every:
        for name in names(unit):
            found.setdefault(name, []).append(unit)
    return found


def _activate(every: list[_Unit], top: dict[str, set[str]], marked: frozenset[str]) -> None:
    """Mark the units that may perform events: those that name a marker, and, until nothing
    changes, those that name a callable of an active unit (its own name, or a name bound to a
    value that names one)."""
    users = _index(every, lambda unit: unit.names)
    carried: dict[str, set[str]] = {}  # a name in a bound value → the names bound to it
    for binds in [top, *(unit.binds for unit in every)]:
        for bound, value in binds.items():
            for name in value:
                carried.setdefault(name, set()).add(bound)
    callables: set[str] = set()
    pending = list(marked)
    for unit in every:
        if not unit.names.isdisjoint(marked):
            unit.active = True
            pending.append(unit.node.name)
    while pending:
        name = pending.pop()
        if name in callables:
            continue
        callables.add(name)
        pending.extend(carried.get(name, ()))
        for unit in users.get(name, ()):
            if not unit.active:
                unit.active = True
                pending.append(unit.node.name)


def _read(every: list[_Unit], hooks: frozenset[str]) -> None:
    """Mark the units the model reads: the active ones, dunders and hooks a framework calls by
    name, every unit that defines a name a read unit uses, and the classes around them."""
    definers = _index(every, lambda unit: unit.defines)
    needed: set[str] = set()
    pending: list[_Unit] = []

    def read(unit: _Unit) -> None:
        while unit is not None and not unit.read:
            unit.read = True
            pending.append(unit)
            unit = unit.outer  # type: ignore[assignment]  # a read method needs its class

    for unit in every:
        if unit.active or _dunder(unit.node) or not unit.defines.isdisjoint(hooks):
            read(unit)
    while pending:
        for name in pending.pop().names - needed:
            needed.add(name)
            for definer in definers.get(name, ()):
                read(definer)


def _unit(statement: ast.stmt) -> _Unit | None:
    rows = definition_rows(statement)
    if rows is None:
        return None
    first, last = rows
    assert isinstance(statement, _DEFINITIONS)
    if isinstance(statement, ast.ClassDef):
        inner = [unit for child in statement.body if (unit := _unit(child)) is not None]
        own = [child for child in statement.body if not isinstance(child, _DEFINITIONS)]
        names, binds = _scan([*own, *statement.bases, *statement.keywords, *statement.decorator_list], False)
        unit = _Unit(statement, first, last, {statement.name, *binds}, names | {statement.name}, binds, inner,
                     own=bool(own))
        for method in inner:
            method.outer = unit
        return unit
    names, binds = _scan([statement], True)
    return _Unit(statement, first, last, {statement.name, *binds}, names, binds)


_DEFINED = frozenset({ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef})
_ASSIGNMENTS = frozenset({ast.Assign, ast.AnnAssign, ast.AugAssign, ast.NamedExpr})
_BINDING_BLOCKS = frozenset({ast.For, ast.AsyncFor, ast.With, ast.AsyncWith})
_STORES = (ast.Store, ast.Del)


def _scan(nodes: Iterable[ast.AST], attributes_only: bool) -> tuple[set[str], dict[str, set[str]]]:
    """One walk of ``nodes``: every identifier their code uses or defines (and its
    identifier-like strings), and what they bind for code elsewhere: name → the names of the
    value bound (every attribute assigned, ``self.opt = ...``; unless ``attributes_only``, every
    name assigned or imported, as at the top level or in a class body; a declared global)."""
    names: set[str] = set()
    binds: dict[str, set[str]] = {}
    for root in nodes:
        for node in ast.walk(root):
            kind = type(node)
            if kind is ast.Name:
                names.add(node.id)  # type: ignore[attr-defined]
            elif kind is ast.Attribute:
                names.add(node.attr)  # type: ignore[attr-defined]
            elif kind is ast.Constant:
                if type(node.value) is str and _IDENTIFIER.match(node.value):  # type: ignore[attr-defined]
                    names.add(node.value)  # type: ignore[attr-defined]
            elif kind is ast.arg:
                names.add(node.arg)  # type: ignore[attr-defined]
            elif kind is ast.keyword:
                if node.arg is not None:  # type: ignore[attr-defined]
                    names.add(node.arg)  # type: ignore[attr-defined]
            elif kind in _DEFINED:
                names.add(node.name)  # type: ignore[attr-defined]
            elif kind is ast.alias:
                parts = node.name.split(".")  # type: ignore[attr-defined]
                names.update(parts)
                if node.asname:  # type: ignore[attr-defined]
                    names.add(node.asname)  # type: ignore[attr-defined]
                if not attributes_only:
                    binds.setdefault(node.asname or parts[0], set()).update(parts)  # type: ignore[attr-defined]
            elif kind is ast.Global or kind is ast.Nonlocal:
                names.update(node.names)  # type: ignore[attr-defined]
                for name in node.names:  # type: ignore[attr-defined]
                    binds.setdefault(name, set()).add(name)
            elif kind in _ASSIGNMENTS:
                targets = node.targets if kind is ast.Assign else [node.target]  # type: ignore[attr-defined]
                _bind(binds, targets, [node.value] if node.value is not None else [],  # type: ignore[attr-defined]
                      attributes_only)
            elif kind in _BINDING_BLOCKS:
                if kind is ast.For or kind is ast.AsyncFor:
                    _bind(binds, [node.target], [node.iter], attributes_only)  # type: ignore[attr-defined]
                else:
                    for item in node.items:  # type: ignore[attr-defined]
                        if item.optional_vars is not None:
                            _bind(binds, [item.optional_vars], [item.context_expr], attributes_only)
    return names, binds


def _bind(binds: dict[str, set[str]], targets: list[ast.AST], values: list[ast.AST], attributes_only: bool) -> None:
    bound = [name for target in targets for name in _bound(target, attributes_only)]
    if bound:
        value = _scan(values, True)[0]
        for name in bound:
            binds.setdefault(name, set()).update(value)


def _bound(target: ast.AST, attributes_only: bool) -> Iterator[str]:
    for node in ast.walk(target):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, _STORES):
            yield node.attr
        elif isinstance(node, ast.Name) and isinstance(node.ctx, _STORES) and not attributes_only:
            yield node.id


def _dunder(node: ast.AST) -> bool:
    name = getattr(node, "name", "")
    return name.startswith("__") and name.endswith("__")


def _flatten(units: list[_Unit]) -> Iterator[_Unit]:
    for unit in units:
        yield unit
        yield from _flatten(unit.inner)


def _outermost_unread(units: list[_Unit]) -> Iterator[_Unit]:
    for unit in units:
        if not unit.read:
            yield unit
        else:
            yield from _outermost_unread(unit.inner)


@functools.cache
def known_names() -> frozenset[str]:
    """Every identifier among the string constants of the model, the framework tables and the
    checks (hook names such as ``configure_optimizers``, a dotted name's parts): a definition
    the model may look for by its name. Read from the imported modules (their tables and their
    functions' constants; prose, which has spaces, is no name), not from their source."""
    import importlib
    import pkgutil

    found: set[str] = set()
    seen: set[int] = set()
    for folder in ("model", "frameworks", "checks"):
        package = importlib.import_module(f"accumlint.{folder}")
        modules = [package, *(importlib.import_module(info.name) for info in
                              pkgutil.walk_packages(package.__path__, f"{package.__name__}."))]
        for module in modules:
            for value in vars(module).values():
                _collect(value, found, seen, __name__.partition(".")[0])
    return frozenset(found)


def _collect(value: object, found: set[str], seen: set[int], package: str) -> None:
    """Add the identifier-like strings held by ``value`` (containers, dataclass rows, enums,
    functions and classes of ``package``, through their code objects' constants)."""
    stack = [value]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, bytes):
            current = current.decode("ascii", "replace")
        if isinstance(current, str):
            parts = current.split(".")
            if all(_IDENTIFIER.match(part) for part in parts):
                found.update(parts)
        elif isinstance(current, (tuple, list, set, frozenset)):
            stack.extend(current)
        elif isinstance(current, dict):
            stack.extend(current.keys())
            stack.extend(current.values())
        elif isinstance(current, types.CodeType):
            stack.extend(current.co_consts)
        elif isinstance(current, (types.FunctionType, types.MethodType)):
            if getattr(current, "__module__", "").startswith(package):
                stack.append(getattr(current, "__code__", None))
        elif isinstance(current, (staticmethod, classmethod, property, functools.cached_property)):
            stack.extend(getattr(current, name, None) for name in ("__func__", "fget", "func"))
        elif isinstance(current, type):
            if current.__module__.startswith(package):
                stack.extend(vars(current).values())
        elif getattr(type(current), "__module__", "").startswith(package):
            stack.extend(getattr(current, "__dict__", {}).values())  # a table row (dataclass, enum member)
            if dataclasses.is_dataclass(current):
                stack.extend(getattr(current, row.name, None) for row in dataclasses.fields(current))
            if isinstance(current, enum.Enum):
                stack.append(current.value)
