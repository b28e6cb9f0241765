"""What the interpreter's parse of a file says about it before LibCST sees it.

Walks of the ``ast`` tree (an order of magnitude cheaper than LibCST's parse) collect the
names a file calls, defines, binds and mentions, and those its loops may reach. Each rule's
gate decides from them whether it can fire on the file at all
(:meth:`accumlint.checks.gate.RuleGate.admits`): a file that no selected rule's gate admits is
never given to LibCST. The sets are supersets of what the group model can find in the same
file, so a gate's verdict "cannot fire" stays exact.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from accumlint.source.prefilter import NeedlePattern

#: The first parameter of an autograd ``Function``'s static ``forward``/``backward``: such a
#: ``def backward(ctx, ...)`` defines no training hook.
AUTOGRAD_CONTEXT = "ctx"

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)


@dataclass(frozen=True)
class SourceFacts:
    """Names of one module's code (strings, comments and docstrings excluded).

    ``called``: the last name of every callee (``loss.backward()`` → ``backward``; the
    function a ``functools.partial`` wraps counts as called);
    ``defined``: functions and methods defined, except an autograd ``Function``'s static
    methods (first parameter ``ctx``); ``bound``: the last name of every assignment target
    (``self.grad_accum = 4`` → ``grad_accum``; also loop, ``with`` and walrus targets);
    ``mentioned``: every identifier of the code: names, attributes, parameters, keyword
    arguments, classes, and each dotted part of an import; ``loop_reach``: the identifiers (calls
    included) that a function holding a loop (or the top level, when it holds one) may use
    (:func:`loop_reach`); ``multiplied``: the identifiers in the factors of a product of at
    least three factors (``micro_bs * grad_accum * world``).
    """

    called: frozenset[str]
    defined: frozenset[str]
    bound: frozenset[str]
    mentioned: frozenset[str]
    #: the interpreter's tree, which the two walks below read when a gate asks
    tree: ast.AST = field(default_factory=ast.Module, repr=False, compare=False)
    #: the file's bytes, for a gate whose name may be spelled in a string (a config key)
    data: bytes = field(default=b"", repr=False)
    #: how many nodes the tree has (what LibCST's parse of the file will cost, roughly)
    nodes: int = 0

    @functools.cached_property
    def loop_reach(self) -> frozenset[str]:
        """See :func:`loop_reach` (walked on first use: most gates never ask)."""
        return loop_reach(self.tree)

    @functools.cached_property
    def multiplied(self) -> frozenset[str]:
        """See :func:`multiplied` (walked on first use)."""
        return multiplied(self.tree)

    def in_bytes(self, pattern: NeedlePattern) -> bool:
        """Whether the file's bytes (strings and comments included) match ``pattern``."""
        return pattern.search(self.data)

    def calls(self, names: Iterable[str]) -> bool:
        """Whether one of ``names`` is called."""
        return not self.called.isdisjoint(names)

    def defines(self, names: Iterable[str]) -> bool:
        """Whether one of ``names`` is defined as a function or method."""
        return not self.defined.isdisjoint(names)

    def mentions(self, names: Iterable[str]) -> bool:
        """Whether one of ``names`` occurs as an identifier of the code."""
        return not self.mentioned.isdisjoint(names)

    def binds(self, accept: Callable[[str], bool]) -> bool:
        """Whether some assignment target's last name satisfies ``accept``."""
        return any(accept(name) for name in self.bound)


def source_facts(tree: ast.AST, data: bytes = b"") -> SourceFacts:
    """The :class:`SourceFacts` of a parsed module whose bytes are ``data``."""
    called: set[str] = set()
    defined: set[str] = set()
    bound: set[str] = set()
    mentioned: set[str] = set()
    store = ast.Store
    nodes = 0
    for node in ast.walk(tree):
        nodes += 1
        kind = type(node)
        if kind is ast.Name:
            mentioned.add(node.id)  # type: ignore[attr-defined]
            if type(node.ctx) is store:  # type: ignore[attr-defined]
                bound.add(node.id)  # type: ignore[attr-defined]
        elif kind is ast.Attribute:
            mentioned.add(node.attr)  # type: ignore[attr-defined]
            if type(node.ctx) is store:  # type: ignore[attr-defined]
                bound.add(node.attr)  # type: ignore[attr-defined]
        elif kind is ast.Call:
            func = node.func  # type: ignore[attr-defined]
            if type(func) is ast.Attribute:
                called.add(func.attr)
            elif type(func) is ast.Name:
                called.add(func.id)
            if (func.attr if type(func) is ast.Attribute else getattr(func, "id", None)) == "partial" and node.args:
                # `partial(clip_grad_norm_, ...)`: the model counts a call of the partial as one of it
                target = node.args[0]  # type: ignore[attr-defined]
                if type(target) is ast.Attribute:
                    called.add(target.attr)
                elif type(target) is ast.Name:
                    called.add(target.id)
        elif kind is ast.arg:
            mentioned.add(node.arg)  # type: ignore[attr-defined]
        elif kind is ast.keyword:
            if node.arg is not None:  # type: ignore[attr-defined]
                mentioned.add(node.arg)  # type: ignore[attr-defined]
        elif kind in _DEFS:
            mentioned.add(node.name)  # type: ignore[attr-defined]
            arguments = node.args  # type: ignore[attr-defined]
            params = arguments.posonlyargs or arguments.args
            if not params or params[0].arg != AUTOGRAD_CONTEXT:
                defined.add(node.name)  # type: ignore[attr-defined]
        elif kind is ast.ClassDef:
            mentioned.add(node.name)  # type: ignore[attr-defined]
        elif kind is ast.alias:
            mentioned.update(node.name.split("."))  # type: ignore[attr-defined]
            if node.asname:  # type: ignore[attr-defined]
                mentioned.add(node.asname)  # type: ignore[attr-defined]
        elif kind is ast.ImportFrom and node.module:  # type: ignore[attr-defined]
            mentioned.update(node.module.split("."))  # type: ignore[attr-defined]
    return SourceFacts(frozenset(called), frozenset(defined), frozenset(bound), frozenset(mentioned), tree, data,
                       nodes)


_LOOPS = (ast.For, ast.AsyncFor, ast.While, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_UNITS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _identifiers(node: ast.AST) -> set[str]:
    """The names and attribute names in ``node``'s subtree."""
    found: set[str] = set()
    for sub in ast.walk(node):
        kind = type(sub)
        if kind is ast.Name:
            found.add(sub.id)  # type: ignore[attr-defined]
        elif kind is ast.Attribute:
            found.add(sub.attr)  # type: ignore[attr-defined]
    return found


def _callee(call: ast.Call) -> str | None:
    func = call.func
    return func.attr if type(func) is ast.Attribute else getattr(func, "id", None)


class _Unit:
    """A function or class body (or the module's top level): what it calls and mentions."""

    __slots__ = ("mentioned", "nested", "loops", "params")

    def __init__(self, params: tuple[str, ...] = ()) -> None:
        self.mentioned: set[str] = set()  # identifiers of its own code (calls included)
        self.nested: set[str] = set()  # the functions and classes defined in it
        self.loops = False
        self.params = params


def loop_reach(tree: ast.AST) -> frozenset[str]:
    """The identifiers that a function holding a loop may use (the module's top level counts
    as a function; comprehensions count as loops; a call's name is an identifier): its own and those of
    every function or class of the module it reaches by name (a method by its name, a class
    with all its methods), through names bound to them (``step = self.train_step``,
    ``model: Net``), and through the parameters of a module function that is passed them.
    What a call of another module's function is handed (``run_loop(loader, step)``) counts as
    reached from a loop: that function may loop over it.

    A superset of the calls the group model can place in a microbatch loop of this module
    (it follows calls into the module's functions and methods; calls into other project
    modules and summarized libraries are the engine's concern), so "no backward here"
    is exact.
    """
    top = _Unit()
    units: dict[str, list[_Unit]] = {}  # name -> the functions and classes of that name
    aliases: dict[str, set[str]] = {}  # a bound name -> the identifiers of its values
    passed: list[tuple[str | None, ast.Call]] = []  # calls with arguments (a function may be passed)
    all_units = [top]
    stack: list[tuple[ast.AST, _Unit]] = [(tree, top)]
    while stack:
        node, unit = stack.pop()
        kind = type(node)
        if kind in _UNITS:
            if kind is ast.ClassDef:
                inner = _Unit()
            else:
                arguments = node.args  # type: ignore[attr-defined]
                every = (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs,
                         *(a for a in (arguments.vararg, arguments.kwarg) if a is not None))
                inner = _Unit(tuple(a.arg for a in every))
                for arg in every:
                    if arg.annotation is not None:
                        aliases.setdefault(arg.arg, set()).update(_identifiers(arg.annotation))
            name = node.name  # type: ignore[attr-defined]
            units.setdefault(name, []).append(inner)
            all_units.append(inner)
            unit.nested.add(name)  # a class reaches its methods; a def its nested functions
            body = {id(statement) for statement in node.body}  # type: ignore[attr-defined]
            for child in ast.iter_child_nodes(node):
                # decorators, defaults and bases run in the enclosing body
                stack.append((child, inner if id(child) in body else unit))
            continue
        if kind is ast.Name:
            unit.mentioned.add(node.id)  # type: ignore[attr-defined]
        elif kind is ast.Attribute:
            unit.mentioned.add(node.attr)  # type: ignore[attr-defined]
        elif kind is ast.Call:
            if node.args or node.keywords:  # type: ignore[attr-defined]
                passed.append((_callee(node), node))  # type: ignore[arg-type]
        elif kind in _LOOPS:
            unit.loops = True
        if kind in (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.NamedExpr, ast.For, ast.AsyncFor):
            targets = node.targets if kind is ast.Assign else [node.target]  # type: ignore[attr-defined]
            values = [getattr(node, field) for field in ("value", "annotation", "iter") if getattr(node, field, None)]
            found = set().union(*(_identifiers(value) for value in values)) if values else set()
            for target in targets:
                for bound in _bound_names(target):
                    aliases.setdefault(bound, set()).update(found)
        elif kind is ast.withitem and node.optional_vars is not None:  # type: ignore[attr-defined]
            for bound in _bound_names(node.optional_vars):  # type: ignore[attr-defined]
                aliases.setdefault(bound, set()).update(_identifiers(node.context_expr))  # type: ignore[attr-defined]
        stack.extend((child, unit) for child in ast.iter_child_nodes(node))
    handed = _Unit()  # what calls of other modules' functions are handed: they may loop over it
    for name, call in passed:  # `run(self.train_step)`: run's parameters may be train_step
        found = set().union(*(_identifiers(a) for a in (*call.args, *(k.value for k in call.keywords))))
        if name in units:
            for callee in units[name]:
                for param in callee.params:
                    aliases.setdefault(param, set()).update(found)
        else:  # a project helper's loop may call it (the model inlines the helper, binding it)
            handed.mentioned |= found
    handed.loops = bool(handed.mentioned)
    all_units.append(handed)
    if not any(unit.loops for unit in all_units):
        return frozenset()
    # dunder methods run without their name in the code (`obj(x)`, `for x in obj`, `with obj`)
    dunder = [unit for name, found in units.items() if name.startswith("__") and name.endswith("__")
              for unit in found]
    reached = [unit for unit in all_units if unit.loops] + dunder
    seen_units = {id(unit) for unit in reached}
    seen_names: set[str] = set()
    used: set[str] = set()
    while reached:
        unit = reached.pop()
        used |= unit.mentioned
        # a class reaches its methods, a function its inner functions; the top level reaches
        # only the functions it names
        names = [*(unit.mentioned - seen_names), *((unit.nested - seen_names) if unit is not top else ())]
        while names:
            name = names.pop()
            if name in seen_names:
                continue
            seen_names.add(name)
            bound = aliases.get(name, ())
            used.update(bound)  # `f = partial(loss.backward)`: f may run it
            names.extend(bound)
            for other in units.get(name, ()):
                if id(other) not in seen_units:
                    seen_units.add(id(other))
                    reached.append(other)
    return frozenset(used)


def _bound_names(target: ast.AST) -> list[str]:
    """The last names an assignment target binds (``self.step = ...`` → ``step``; each name of
    a tuple; the container of a subscript)."""
    found: list[str] = []
    stack = [target]
    while stack:
        node = stack.pop()
        kind = type(node)
        if kind is ast.Name:
            found.append(node.id)  # type: ignore[attr-defined]
        elif kind is ast.Attribute:
            found.append(node.attr)  # type: ignore[attr-defined]
        elif kind in (ast.Tuple, ast.List):
            stack.extend(node.elts)  # type: ignore[attr-defined]
        elif kind in (ast.Starred, ast.Subscript):
            stack.append(node.value)  # type: ignore[attr-defined]
    return found


def multiplied(tree: ast.AST) -> frozenset[str]:
    """The identifiers in the factors of every product of at least three factors."""
    found: set[str] = set()
    inner: set[int] = set()  # the products inside a larger one: counted with it
    for node in ast.walk(tree):
        if type(node) is not ast.BinOp or type(node.op) is not ast.Mult or id(node) in inner:  # type: ignore[attr-defined]
            continue
        factors: list[ast.AST] = []
        stack: list[ast.AST] = [node]
        while stack:
            part = stack.pop()
            if type(part) is ast.BinOp and type(part.op) is ast.Mult:  # type: ignore[attr-defined]
                inner.add(id(part))
                stack.extend((part.left, part.right))  # type: ignore[attr-defined]
            else:
                factors.append(part)
        if len(factors) >= 3:
            for factor in factors:
                found |= _identifiers(factor)
    return frozenset(found)
