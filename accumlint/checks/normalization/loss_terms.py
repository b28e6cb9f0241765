"""The summands of a backpropagated loss and the divisors each one goes through (P4).

``loss = ce(out, y) / A + 0.01 * aux`` backpropagates two terms: the first divided by A, the
second not. Which summand is the main loss and which the auxiliary term is read from this
provenance (which summand carries the group's denominator), never from names. A summand whose
origin the code does not show (a parameter, another module's value, a branch that binds the
name two ways) ends the decomposition: :func:`loss_terms` answers None rather than guess.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import libcst as cst

from accumlint.model.dataflow import value_history
from accumlint.model.names import calls_in, dotted, method_name

if TYPE_CHECKING:
    from accumlint.model import Event, FileModel, Site

#: how many assignments, helper returns and operators one decomposition follows
_MAX_DEPTH = 12
#: methods whose result carries no gradient: a summand through them is no training term
_NO_GRADIENT = frozenset({"detach", "item", "tolist", "numpy", "cpu_detached"})


@dataclass(frozen=True)
class LossTerm:
    """One summand of a backward's loss.

    ``node``: the summand as written (``0.01 * aux``); ``site``: where it is written (the
    assignment or helper ``return`` holding it, or the backward's own site); ``divisors``: the
    divisors applied to the whole sum it is part of on its way to backward (``(a + b) / A``,
    ``loss /= A`` after ``loss = a + b``), outermost last. Divisions written inside the summand
    itself (``ce(...) / A``) are not listed: :meth:`FileModel.divisions_by`-style readers find
    them in its value history."""

    node: cst.BaseExpression
    site: Site
    divisors: tuple[cst.BaseExpression, ...]


def loss_terms(model: FileModel, event: Event) -> list[LossTerm] | None:
    """The summands of the loss a backward ``event`` differentiates, following additions
    (``a + b``, ``loss += aux``), divisions and multiplications of a sum, single reaching
    assignments and the ``return`` of a helper inlined at the call. A number literal is no
    summand. None when the loss is not known or some name on the way has more than one
    reaching assignment (the terms differ by path)."""
    if event.loss is None:
        return None
    terms: list[LossTerm] = []
    ok = _decompose(model, event.loss, event.site, (), terms, 0)
    return terms if ok else None


def _decompose(model: FileModel, expression: cst.BaseExpression, site: Site,
               divisors: tuple[cst.BaseExpression, ...], terms: list[LossTerm], depth: int) -> bool:
    """Append the summands of ``expression`` (read at ``site``) to ``terms``; False when the
    decomposition hits a value with several possible definitions or runs too deep."""
    if depth > _MAX_DEPTH:
        return False
    kind = type(expression)
    if kind in (cst.Integer, cst.Float):
        return True
    if kind is cst.BinaryOperation:
        operator = type(expression.operator)
        if operator in (cst.Add, cst.Subtract):
            return (_decompose(model, expression.left, site, divisors, terms, depth + 1)
                    and _decompose(model, expression.right, site, divisors, terms, depth + 1))
        if operator is cst.Divide:
            if _is_sum(model, expression.left, site):
                return _decompose(model, expression.left, site, (*divisors, expression.right), terms, depth + 1)
        elif operator is cst.Multiply:
            for sum_side, other in ((expression.left, expression.right), (expression.right, expression.left)):
                if _is_sum(model, sum_side, site):
                    reciprocal = _reciprocal(other)
                    extra = (reciprocal,) if reciprocal is not None else ()
                    if reciprocal is None and not _is_number(other):
                        break  # `(a + b) * w`: a weight of unknown value on the whole sum
                    return _decompose(model, sum_side, site, (*divisors, *extra), terms, depth + 1)
        terms.append(LossTerm(expression, site, divisors))
        return True
    if kind in (cst.Name, cst.Attribute):
        name = dotted(expression)
        definition = model.sole_reaching(name, site) if name else None
        if definition is None or definition.value is None or isinstance(definition.node, (cst.For, cst.With)):
            if name and _ambiguous(model, name, site):
                return False
            terms.append(LossTerm(expression, site, divisors))
            return True
        return _from_assignment(model, name, definition, divisors, terms, depth)
    if kind is cst.Call:
        returns = site.scope.returns_of(expression)
        if len(returns) == 1 and returns[0].value is not None:
            return _decompose(model, returns[0].value, returns[0], divisors, terms, depth + 1)
        terms.append(LossTerm(expression, site, divisors))
        return True
    terms.append(LossTerm(expression, site, divisors))
    return True


def _from_assignment(model: FileModel, name: str, definition: Site, divisors: tuple[cst.BaseExpression, ...],
                     terms: list[LossTerm], depth: int) -> bool:
    """The summands a name holds after ``definition``: its value, or for ``name += x`` /
    ``name /= d`` / ``name *= w`` the previous value's summands with the operand's."""
    operator = type(definition.augmented) if definition.augmented is not None else None
    if operator is None:
        return _decompose(model, definition.value, definition, divisors, terms, depth + 1)  # type: ignore[arg-type]
    previous = model.sole_reaching(name, definition)
    if previous is None or previous.value is None:
        return False  # `loss += aux` on a value this scope does not show
    if operator in (cst.AddAssign, cst.SubtractAssign):
        return (_from_assignment(model, name, previous, divisors, terms, depth + 1)
                and _decompose(model, definition.value, definition, divisors, terms, depth + 1))  # type: ignore[arg-type]
    if operator is cst.DivideAssign:
        return _from_assignment(model, name, previous, (*divisors, definition.value), terms, depth + 1)  # type: ignore[arg-type]
    if operator is cst.MultiplyAssign and _is_number(definition.value):  # type: ignore[arg-type]
        return _from_assignment(model, name, previous, divisors, terms, depth + 1)
    return False



def _ambiguous(model: FileModel, name: str, site: Site) -> bool:
    """Whether several assignments to ``name`` may reach ``site``."""
    if site.inline is not None:
        return False
    candidates, from_entry = model.reaching_definitions(name, site)
    return len(candidates) > 1 or (bool(candidates) and from_entry)


def _is_sum(model: FileModel, expression: cst.BaseExpression, site: Site) -> bool:
    """Whether ``expression`` is a sum (``a + b``) or a name bound to one by the assignments
    reaching ``site`` (``total = a + b``, ``total += aux``)."""
    for _ in range(_MAX_DEPTH):
        if isinstance(expression, cst.BinaryOperation):
            return isinstance(expression.operator, (cst.Add, cst.Subtract))
        name = dotted(expression) if isinstance(expression, (cst.Name, cst.Attribute)) else None
        definition = model.sole_reaching(name, site) if name else None
        if definition is None or definition.value is None or isinstance(definition.node, (cst.For, cst.With)):
            return False
        if isinstance(definition.augmented, (cst.AddAssign, cst.SubtractAssign)):
            return True
        if definition.augmented is not None:
            expression, site = expression, definition  # `loss /= A`: what it held before
            continue
        expression, site = definition.value, definition
    return False


def _is_number(expression: cst.BaseExpression) -> bool:
    return isinstance(expression, (cst.Integer, cst.Float)) or (
        isinstance(expression, cst.UnaryOperation) and isinstance(expression.expression, (cst.Integer, cst.Float)))


def _reciprocal(expression: cst.BaseExpression) -> cst.BaseExpression | None:
    """``1 / d`` → ``d``."""
    if (isinstance(expression, cst.BinaryOperation) and isinstance(expression.operator, cst.Divide)
            and isinstance(expression.left, (cst.Integer, cst.Float))
            and float(expression.left.value.replace("_", "")) == 1.0):
        return expression.right
    return None


def carries_gradient(term: LossTerm) -> bool:
    """Whether a summand may carry a gradient as far as its value history shows: it is computed
    by a call here (a forward, a loss function, a model's attribute read from its output) and
    does not pass through ``.detach()`` / ``.item()``. A bare name of unknown origin (a
    parameter) does not count, nor a summand multiplied by a literal zero (``0.0 * sum(p.sum() for
    p in model.parameters())``: the DDP trick that touches unused parameters, weightless)."""
    if _zero_weighted(term.node):
        return False
    computed = False
    for value, _, _ in value_history(term.node, term.site):
        for call in calls_in(value):
            if method_name(call) in _NO_GRADIENT:
                return False
            computed = True
        if isinstance(value, cst.Attribute) and dotted(value) is None:
            computed = True  # `model(x).aux_loss`
    return computed


def _zero_weighted(expression: cst.BaseExpression) -> bool:
    """Whether a product has a number literal equal to zero among its factors."""
    while isinstance(expression, cst.BinaryOperation) and isinstance(expression.operator, cst.Multiply):
        for side in (expression.left, expression.right):
            if isinstance(side, (cst.Integer, cst.Float)) and float(side.value.replace("_", "")) == 0.0:
                return True
        if isinstance(expression.right, cst.BinaryOperation):
            if _zero_weighted(expression.right):
                return True
        expression = expression.left
    return False
