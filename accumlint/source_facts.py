"""What the interpreter's parse of a file says about it before LibCST sees it.

One walk of the ``ast`` tree (an order of magnitude cheaper than LibCST's parse) collects
the names a file calls, defines, binds and mentions. Each rule decides from them whether
it can fire on the file at all (:meth:`accumlint.checks.base.Rule.applies`): a file that
no selected rule applies to is never given to LibCST. The sets are supersets of what the
group model can find in the same file, so a rule's verdict "cannot fire" stays exact.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable
from dataclasses import dataclass

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
    arguments, classes, and each dotted part of an import.
    """

    called: frozenset[str]
    defined: frozenset[str]
    bound: frozenset[str]
    mentioned: frozenset[str]

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


def source_facts(tree: ast.AST) -> SourceFacts:
    """The :class:`SourceFacts` of a parsed module (one walk of ``tree``)."""
    called: set[str] = set()
    defined: set[str] = set()
    bound: set[str] = set()
    mentioned: set[str] = set()
    store = ast.Store
    for node in ast.walk(tree):
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
    return SourceFacts(frozenset(called), frozenset(defined), frozenset(bound), frozenset(mentioned))
