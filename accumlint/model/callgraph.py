"""Which function a call reaches, and what its parameters are bound to at that call.

The walker in :mod:`~accumlint.model.statement_walk` inlines the body of every function a call
resolves to; this module answers the two questions that makes sound:

- :func:`bind` maps a callee's parameters to the caller's argument expressions (positional,
  keyword, literal defaults). ``*args`` / ``**kwargs`` on either side leave the parameters
  they may fill *unknown* (``None``), never bound to the wrong argument.
- :class:`Inline` is one inlined call: the callee, the parameter bindings and the inlined
  call around it (``parent``). :meth:`Inline.resolve` rewrites an expression of the callee's
  namespace into the namespace of the code that called it (``opt.step()`` in a helper called
  as ``helper(optimizer)`` acts on ``optimizer``), so roles, event targets, boundary tests and
  the loss's data flow are read where the values live.

Resolution of the callee itself (``self.m``, bases, ``super()``, aliases, function-valued
variables, closures, callables stored on ``self``) is :class:`~accumlint.model.module_functions.ModuleFunctions`'.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import libcst as cst

from accumlint.model.names import children, exact_kinds, names_in

#: literal defaults that are bound at a call that does not pass the parameter (``update_grad=True``);
#: any other default is an expression of the callee's module: the parameter stays unknown
_LITERAL_DEFAULTS = (cst.Integer, cst.Float, cst.SimpleString)
_CONSTANT_NAMES = frozenset({"True", "False", "None"})
#: a stand-in for a value the model cannot know (a parameter filled by ``*args``): a call of it
#: is neither pure nor loop-invariant, so a test on it decides nothing
UNKNOWN_VALUE = cst.Call(func=cst.Name("__accumlint_unknown__"))


def _is_literal(node: cst.BaseExpression) -> bool:
    return isinstance(node, _LITERAL_DEFAULTS) or (isinstance(node, cst.Name) and node.value in _CONSTANT_NAMES)


def parameters(function: cst.FunctionDef) -> list[cst.Param]:
    """Every named parameter of ``function`` (positional-only, regular, keyword-only)."""
    params = function.params
    return [*params.posonly_params, *params.params, *params.kwonly_params]


def bind(function: cst.FunctionDef, call: cst.Call, self_value: cst.BaseExpression | None,
         bound_method: bool, leading: Sequence[cst.Arg] = ()) -> dict[str, cst.BaseExpression | None]:
    """The value of each parameter of ``function`` at ``call``: the argument expression (of
    the caller's namespace), a literal default, or ``None`` (unknown: a ``*args`` /
    ``**kwargs`` may fill it, or it is a ``*``/``**`` parameter itself).

    ``bound_method``: the first positional parameter is the receiver (``self_value``; None
    when the receiver is not an expression of the caller, e.g. a class instance built elsewhere).
    ``leading``: arguments bound before the call's own (those a ``functools.partial`` fixed).
    """
    params = function.params
    positional_params = [*params.posonly_params, *params.params]
    bindings: dict[str, cst.BaseExpression | None] = {}
    if bound_method and positional_params:
        bindings[positional_params[0].name.value] = self_value
        positional_params = positional_params[1:]
    arguments = (*leading, *call.args)
    star_positional = any(arg.star == "*" for arg in arguments)
    star_keywords = any(arg.star == "**" for arg in arguments)
    values = [arg.value for arg in arguments if arg.keyword is None and not arg.star]
    first_star = next((i for i, arg in enumerate(a for a in arguments if a.keyword is None) if arg.star == "*"),
                      None)
    for index, param in enumerate(positional_params):
        if index < len(values) and (first_star is None or index < first_star):
            bindings[param.name.value] = values[index]
    keywords = {arg.keyword.value: arg.value for arg in arguments if arg.keyword is not None}
    for param in (*positional_params, *params.kwonly_params):
        name = param.name.value
        if name in keywords:
            bindings[name] = keywords[name]
        elif name not in bindings:
            unknown = star_keywords or (star_positional and param in positional_params)
            default = param.default
            bindings[name] = default if (not unknown and default is not None and _is_literal(default)) else None
    for star in (params.star_arg, params.star_kwarg):
        if isinstance(star, cst.Param):
            bindings[star.name.value] = None
    return bindings


def can_bind(call: cst.Call, method: cst.FunctionDef) -> bool:
    """Whether ``call``'s arguments can bind to the parameters of ``method`` after its receiver's
    (the first): no parameter without a default is left out, no positional argument is left over.
    A starred argument may bind anything."""
    if any(arg.star for arg in call.args):
        return True
    params = method.params
    positional = [*params.posonly_params, *params.params][1:]
    given = sum(1 for arg in call.args if arg.keyword is None)
    if given > len(positional) and not isinstance(params.star_arg, cst.Param):
        return False
    named = {arg.keyword.value for arg in call.args if arg.keyword is not None}
    return all(param.default is not None or param.name.value in named
               for param in (*positional[given:], *params.kwonly_params))


@dataclass(eq=False)
class Inline:
    """One inlined call: ``function`` called at ``call`` (a node of the caller's code).

    ``bindings``: parameter → argument expression of the caller's namespace (None: unknown);
    ``parent``: the inlined call the caller's code is itself part of (None: the scope's own
    code); ``class_def``: the class whose method ``function`` is, as seen from the receiver
    (for ``self.m()`` inside it); ``foreign``: the function lives in another module.
    """

    call: cst.Call
    function: cst.FunctionDef
    parent: Inline | None
    bindings: dict[str, cst.BaseExpression | None]
    class_def: cst.ClassDef | None = None
    foreign: object | None = None  # the project module the function comes from (None: this module)
    performs_backward: bool = True
    #: closure: the function is defined inside the caller and reads the caller's names
    closure: bool = False
    _locals: set[str] = field(default_factory=set)
    _all_locals: set[str] | None = None

    def chain(self) -> list[Inline]:
        """This call and the inlined calls around it, innermost first."""
        found: list[Inline] = []
        current: Inline | None = self
        while current is not None:
            found.append(current)
            current = current.parent
        return found

    def resolve(self, expression: cst.BaseExpression, depth: int = 0) -> tuple[cst.BaseExpression, Inline | None]:
        """``expression`` (read in this callee's code) rewritten into the outermost namespace it
        can reach: a parameter's root name is replaced by its argument, a closure's free name is
        read in the caller. Returns the expression and the inlined call whose namespace it is
        still in (None: the scope's own code). A parameter of unknown value stops the rewrite."""
        root = _root_name(expression)
        if root is None or depth > 8:
            return expression, self
        if root in self.bindings:
            value = self.bindings[root]
            if value is None:
                return expression, self
            rewritten = _replace_root(expression, value)
            if self.parent is None:
                return rewritten, None
            return self.parent.resolve(rewritten, depth + 1)
        if self.closure and root not in self._locals:
            if self.parent is None:
                return expression, None
            return self.parent.resolve(expression, depth + 1)
        return expression, self

    @property
    def local_names(self) -> set[str]:
        """The names ``function`` binds itself (:func:`local_names`), computed on first use."""
        if self._all_locals is None:
            self._all_locals = local_names(self.function)
        return self._all_locals

    def reads_outer(self, expression: cst.BaseExpression) -> bool:
        """Whether ``expression`` reads a parameter of this call or (for a closure) a name of
        the caller: only then does :meth:`rewrite` change it."""
        for name in names_in(expression):
            root = name.split(".", 1)[0].split("[", 1)[0]
            if root in self.bindings or (self.closure and root not in self._locals):
                return True
        return False

    def rewrite(self, expression: cst.BaseExpression, locals_unknown: bool = False,
                carried: dict[str, str] | None = None) -> cst.BaseExpression:
        """``expression`` with every parameter name replaced by its argument (read in the
        scope's own code); a parameter whose value is unknown becomes :data:`UNKNOWN_VALUE` (so
        no test on it is decided). ``locals_unknown``: so does a name local to a helper (its
        ``step`` is not the caller's ``step``); else it stays as written. ``carried``: this
        call's parameters that carry a caller's variable (:func:`~accumlint.model.dataflow.carried`)
        become that variable, rebound or not."""
        return expression.visit(_Rewriter(self, locals_unknown, carried or {}))  # type: ignore[return-value]


class _Rewriter(cst.CSTTransformer):
    def __init__(self, inline: Inline, locals_unknown: bool = False, carried: dict[str, str] | None = None) -> None:
        self.inline = inline
        self.locals_unknown = locals_unknown
        self.carried = carried or {}

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:  # noqa: N802 - LibCST's API
        if original.value in self.carried and self.inline.parent is None:
            return cst.parse_expression(self.carried[original.value])
        value, where = self.inline.resolve(original)
        if where is None:
            return value
        if original.value in where.bindings or (self.locals_unknown and original.value in where.local_names):
            return UNKNOWN_VALUE
        return updated

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.BaseExpression:  # noqa: N802
        return updated.with_changes(attr=original.attr)  # `x.opt`: the attribute's name is no read

    def leave_Arg(self, original: cst.Arg, updated: cst.Arg) -> cst.Arg:  # noqa: N802
        return updated.with_changes(keyword=original.keyword)  # nor is a keyword's name


def _root_name(expression: cst.BaseExpression) -> str | None:
    node = expression
    while type(node) is cst.Attribute or type(node) is cst.Subscript:  # (exact types: hot, see local_names)
        node = node.value
    if type(node) is cst.Call and type(node.func) is cst.Attribute:
        return _root_name(node.func)
    return node.value if type(node) is cst.Name else None


def _replace_root(expression: cst.BaseExpression, value: cst.BaseExpression) -> cst.BaseExpression:
    if isinstance(expression, cst.Name):
        return value
    if isinstance(expression, (cst.Attribute, cst.Subscript)):
        inner = _replace_root(expression.value, value)
        if isinstance(expression, cst.Attribute) and not isinstance(inner, (cst.Name, cst.Attribute, cst.Call,
                                                                             cst.Subscript)):
            inner = cst.Name("__accumlint_unknown__")  # `(a if c else b).opt`: no dotted name
        return expression.with_changes(value=inner)
    if isinstance(expression, cst.Call) and isinstance(expression.func, cst.Attribute):
        return expression.with_changes(func=_replace_root(expression.func, value))
    return expression


#: the statements (and targets) that bind the names of their ``target``
_TARGETED = exact_kinds(cst.AssignTarget, cst.AugAssign, cst.AnnAssign, cst.For)


def local_names(function: cst.FunctionDef) -> set[str]:
    """Names bound in ``function``'s own body (assignments, loop targets, parameters): what a
    closure does not read from its caller."""
    names = {param.name.value for param in parameters(function)}
    for star in (function.params.star_arg, function.params.star_kwarg):
        if isinstance(star, cst.Param):
            names.add(star.name.value)
    stack: list[cst.CSTNode] = [function.body]
    while stack:
        node = stack.pop()
        kind = type(node)  # exact types: isinstance on LibCST's (ABC) node classes is slow
        if kind is cst.FunctionDef or kind is cst.ClassDef:
            names.add(node.name.value)
            continue
        if kind is cst.Lambda:
            continue
        if kind in _TARGETED:
            names.update(_bound(node.target))
        elif kind is cst.AsName:
            names.update(_bound(node.name))
        elif kind is cst.Global or kind is cst.Nonlocal:
            for item in node.names:
                names.discard(item.name.value)
            continue
        stack.extend(children(node))  # LibCST's own `children` runs a visitor: 10x slower here
    return names


def _bound(target: cst.BaseExpression) -> list[str]:
    if isinstance(target, cst.Name):
        return [target.value]
    if isinstance(target, (cst.Tuple, cst.List)):
        return [name for element in target.elements for name in _bound(element.value)]
    if isinstance(target, cst.StarredElement):
        return _bound(target.value)
    return []
