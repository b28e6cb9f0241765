"""A token *sum* returned by the model's own forward (P4): ``loss = model(x, y)`` where the
model's class (of this module, or imported from the project) returns
``cross_entropy(..., reduction="sum")`` or ``(per-token losses).sum()`` from ``forward``.

A summed token loss backpropagated undivided is the sum convention (modded-nanogpt style:
every update sees the same number of tokens, the learning rate is tuned to the sum), not a
loop that forgot ``/ A``. The answer is "sum" only when the code shows it; a forward that
returns a mean (the loss functions' default), divides, or cannot be read is no evidence.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import TYPE_CHECKING

import libcst as cst

from accumlint.model import conventions
from accumlint.model.callgraph import local_names
from accumlint.model.dataflow import value_history
from accumlint.model.names import dotted, keyword, last_segment, method_name, walk
from accumlint.model.scopes import unpacked

if TYPE_CHECKING:
    from accumlint.model.events import Event
    from accumlint.model.module_functions import ModuleFunctions
    from accumlint.model.scopes import Site

#: losses whose ``reduction=`` keyword says how they reduce (torch 2.13.0 nn/functional.py:
#: ``"mean"`` is the default)
_REDUCING_LOSS = re.compile(r"(cross_entropy|CrossEntropyLoss|nll_loss|NLLLoss)$")
#: calls that return the module they are called on (``GPT(...).cuda()``)
_SAME_MODULE = frozenset({"cuda", "to", "train", "float", "bfloat16", "half", "requires_grad_"})
#: calls that wrap a module and forward to its ``forward`` (``torch.compile(model)``, DDP)
_WRAPPERS = frozenset({"compile", "DistributedDataParallel", "DDP", "DataParallel"})
_MAX_DEPTH = 4


class Reduction(str, Enum):
    """How a loss expression reduces its per-token losses."""

    SUM = "sum"
    MEAN = "mean"
    NONE = "none"  # per element, not reduced
    UNKNOWN = "unknown"


def forward_returns_sum(functions: ModuleFunctions, event: Event,
                        reaching) -> bool:
    """Whether the loss a backward ``event`` differentiates is, unchanged, a model forward's
    output (``model(x, y)``, bound in the scope or backpropagated directly) whose class's
    ``forward`` returns a token sum (see the module docstring). ``reaching(name, site)`` finds
    the assignment reaching a name. A model the code does not bind to a class (a parameter)
    counts when this module's classes that return a loss from ``forward`` all return a sum."""
    if event.loss is None:
        return False
    for value, operator, _ in value_history(event.loss, event.site):
        if operator is not None or type(value) is not cst.Call or method_name(value) is not None:
            continue
        name = dotted(value.func)
        if name is None or functions.imports.qualify(name) is not None or name in functions.functions:
            continue  # an imported or module function (`F.cross_entropy(...)`, a helper): no forward
        classes = _classes_of(functions, name, event.site, reaching)
        if classes is None:
            classes = [(functions, c) for c in functions.classes.values()]
            verdicts = [v for v in (_forward_reduction(f, c) for f, c in classes) if v is not Reduction.UNKNOWN]
            return bool(verdicts) and all(v is Reduction.SUM for v in verdicts)
        return bool(classes) and all(_forward_reduction(f, c) is Reduction.SUM for f, c in classes)
    return False


def graphless_outputs(functions: ModuleFunctions, call: cst.Call, site: Site, reaching, count: int) -> frozenset[int]:
    """The positions of the ``count``-tuple a model call returns (``loss, shown, n = model(x)``)
    that hold no autograd graph: in every ``return`` of the ``forward`` of every project class
    the callee is bound to, a tuple of ``count`` whose element there is a number (``0``,
    ``loss.item()``, ``float(...)``, a ``.detach()``), read through the names ``forward``
    binds; a callee the code does not bind (a parameter) may be any class of the module, or
    imported from the project, whose ``forward`` returns such a tuple. Empty when no class is known or a return is not
    such a tuple."""
    name = dotted(call.func)
    if name is None or functions.imports.qualify(name) is not None or name in functions.functions:
        return frozenset()
    classes = _classes_of(functions, name, site, reaching)
    if classes is None:  # a parameter: the classes in view whose forward returns such a tuple
        in_view = [(functions, c) for c in functions.classes.values()] + [
            found for local in functions.imports.names if local[:1].isupper()  # (a class's name: parsed lazily)
            if (found := functions.class_named(local, any_module=True)) is not None]
        classes = [(owner, c) for owner, c in in_view if (f := _method(c, "forward")) is not None
                   and any(isinstance(r.value, (cst.Tuple, cst.List)) and len(r.value.elements) == count
                           for r in _own_returns(f))]
    if not classes:
        return frozenset()
    free = set(range(count))
    for _, class_def in classes:
        forward = _method(class_def, "forward")
        returns = _own_returns(forward) if forward is not None else []
        if not returns:
            return frozenset()
        for statement in returns:
            value = statement.value
            if not isinstance(value, (cst.Tuple, cst.List)) or len(value.elements) != count \
                    or any(isinstance(e, cst.StarredElement) for e in value.elements):
                return frozenset()
            free &= {i for i, element in enumerate(value.elements)
                     if _graphless(element.value, forward)}  # type: ignore[arg-type]
    return frozenset(free)


def _graphless(value: cst.BaseExpression, function: cst.FunctionDef, depth: int = 0) -> bool:
    """Whether ``value`` (in ``function``) is a number or a value cut from the graph; a name
    counts when every assignment to it in ``function`` is."""
    if isinstance(value, (cst.Integer, cst.Float)) or (isinstance(value, cst.Name) and value.value == "None"):
        return True
    if isinstance(value, cst.UnaryOperation):
        return _graphless(value.expression, function, depth)
    if isinstance(value, cst.Call):
        return (method_name(value) or dotted(value.func) or "") in conventions.DETACHING_CALLS
    if isinstance(value, cst.Name) and depth < _MAX_DEPTH:
        assigned = _assigned(function, value.value)
        return bool(assigned) and all(_graphless(v, function, depth + 1) for v in assigned)
    return False


def _classes_of(functions: ModuleFunctions, name: str, site: Site, reaching, depth: int = 0):
    """The classes whose instance ``name`` holds at ``site`` (``[]``: bound to something that is
    no project class), or None when the code does not bind it (a parameter, an attribute)."""
    binding = reaching(name, site)
    value = binding.value_of(name) if binding is not None else None
    if value is None or depth > _MAX_DEPTH:
        return None  # (also a name unpacked from a call's result: `model, opt = amp.initialize(...)`)
    while type(value) is cst.Call:
        method = method_name(value)
        if method in _SAME_MODULE and isinstance(value.func, cst.Attribute):
            value = value.func.value
        elif last_segment(dotted(value.func) or "") in _WRAPPERS and value.args:
            value = value.args[0].value
        else:
            break
    if isinstance(value, (cst.Name, cst.Attribute)):  # (`model = DDP(model)`: the binding before this one)
        return _classes_of(functions, dotted(value) or "", binding, reaching, depth + 1)
    if type(value) is not cst.Call:
        return []
    located = functions.class_named(dotted(value.func))
    return [located] if located is not None else []


def _forward_reduction(functions: ModuleFunctions, class_def: cst.ClassDef) -> Reduction:
    """How the ``forward`` that ``class_def`` runs (its own, or the nearest project base's)
    reduces the loss it returns."""
    for _, current in functions.lineage(class_def):
        forward = _method(current, "forward")
        if forward is not None:
            return _returns(forward, current, 0)
    return Reduction.UNKNOWN


def _method(class_def: cst.ClassDef, name: str) -> cst.FunctionDef | None:
    body = class_def.body.body if isinstance(class_def.body, cst.IndentedBlock) else ()
    return next((s for s in body if isinstance(s, cst.FunctionDef) and s.name.value == name), None)


def _returns(function: cst.FunctionDef, class_def: cst.ClassDef, depth: int) -> Reduction:
    """The reduction of what ``function`` returns: SUM when some return is a sum and none is
    a mean (returns that are no loss, ``return logits``, decide nothing)."""
    verdicts = {_reduction(r.value, function, class_def, depth)
                for r in _own_returns(function) if r.value is not None}
    verdicts.discard(Reduction.UNKNOWN)
    if verdicts == {Reduction.SUM}:
        return Reduction.SUM
    if Reduction.MEAN in verdicts:
        return Reduction.MEAN
    return Reduction.NONE if verdicts == {Reduction.NONE} else Reduction.UNKNOWN


def _own_returns(function: cst.FunctionDef) -> list[cst.Return]:
    """The ``return`` statements of ``function`` itself, not of defs nested in it."""
    found: list[cst.Return] = []

    class _Visitor(cst.CSTVisitor):
        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:  # noqa: N802 - LibCST's API
            return node is function

        def visit_Lambda(self, node: cst.Lambda) -> bool:  # noqa: N802
            return False

        def visit_Return(self, node: cst.Return) -> None:  # noqa: N802
            found.append(node)

    function.visit(_Visitor())
    return found


def _reduction(expression: cst.BaseExpression, function: cst.FunctionDef, class_def: cst.ClassDef,
               depth: int) -> Reduction:
    if depth > _MAX_DEPTH:
        return Reduction.UNKNOWN
    if isinstance(expression, cst.Name):
        values = _assigned(function, expression.value)
        found = {_reduction(v, function, class_def, depth + 1) for v in values}
        return found.pop() if len(found) == 1 else Reduction.UNKNOWN
    if type(expression) is not cst.Call:
        return Reduction.UNKNOWN  # a division, a product, a tuple: no plain sum
    method = method_name(expression)
    if method == "sum" and not expression.args and isinstance(expression.func, cst.Attribute):
        inner = _reduction(expression.func.value, function, class_def, depth + 1)
        return Reduction.SUM if inner in (Reduction.NONE, Reduction.SUM) else inner
    if method == "mean" and not expression.args:
        return Reduction.MEAN
    name = dotted(expression.func) or ""
    if _REDUCING_LOSS.search(last_segment(name)):
        return _keyword_reduction(keyword(expression, "reduction"))
    if name.startswith("self.") and name.count(".") == 1:  # a helper method: self.loss(logits, y)
        helper = _method(class_def, name[len("self."):])
        if helper is not None:
            return _returns(helper, class_def, depth + 1)
    return Reduction.UNKNOWN


def _keyword_reduction(value: cst.BaseExpression | None) -> Reduction:
    """``reduction=`` given as a string, or a conditional of strings (``"sum" if self.training
    else "mean"``: the training branch, as the backward sees it, when one branch is "sum")."""
    if value is None:
        return Reduction.MEAN
    if isinstance(value, cst.SimpleString):
        text = value.evaluated_value
        return Reduction(text) if text in ("sum", "mean", "none") else Reduction.UNKNOWN
    if isinstance(value, cst.IfExp) and isinstance(value.body, cst.SimpleString) and \
            dotted(value.test) == "self.training":
        return _keyword_reduction(value.body)
    return Reduction.UNKNOWN


def _assigned(function: cst.FunctionDef, name: str) -> list[cst.BaseExpression]:
    """The values ``name = ...`` assigns in ``function`` (a local of it, never rebound otherwise:
    ``+=``, a loop or ``with`` target, or a tuple target unpacked at run time leaves it unread;
    ``a, b = 0, x`` gives ``a`` the element in its place)."""
    if name not in local_names(function):
        return []
    values: list[cst.BaseExpression] = []
    for node in walk(function.body):
        if isinstance(node, (cst.AugAssign, cst.For, cst.NamedExpr)) and any(
                isinstance(n, cst.Name) and n.value == name for n in walk(node.target)):
            return []
        if isinstance(node, cst.AsName) and dotted(node.name) == name:
            return []
        if isinstance(node, cst.Assign):
            for target in node.targets:
                elements = target.target.elements if isinstance(target.target, (cst.Tuple, cst.List)) else ()
                if dotted(target.target) == name:
                    values.append(node.value)
                elif [dotted(e.value) for e in elements].count(name) == 1 and not any(
                        isinstance(e, cst.StarredElement) for e in elements):
                    element = unpacked(node.value, [dotted(e.value) for e in elements].index(name), len(elements))
                    if element is None:
                        return []
                    values.append(element)
                elif any(isinstance(n, cst.Name) and n.value == name for n in walk(target.target)):
                    return []
        if isinstance(node, cst.AnnAssign) and dotted(node.target) == name and node.value is not None:
            values.append(node.value)
    return values
