"""Where the code computes a validation or test value, and where it reports one (P4).

An *evaluation context* is a function that builds no graph and backpropagates nothing: one
decorated with ``torch.no_grad``/``inference_mode``, one that switches a model to eval mode and
loops under ``no_grad`` (:func:`accumlint.model.actions.evaluates`), a framework's evaluation
hook (Lightning's ``validation_step``, :data:`accumlint.frameworks.lightning.EVALUATION_HOOKS`),
or a function named as an evaluation (:data:`~accumlint.model.conventions.EVALUATION_FUNCTION_NAME`)
with no backward in it; and, in any function, the code inside ``with torch.no_grad()``.

A *report* is where a value leaves the evaluation: returned, added into an accumulator
(``total += loss.item()``), or handed to a call (``print``, ``self.log``, ``metric.update``,
``losses.append``), including inside an f-string or a dict of metrics.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import libcst as cst

from accumlint import frameworks as fw
from accumlint.model import conventions
from accumlint.model.actions import decorated_without_grad, evaluates
from accumlint.model.events import BACKWARD_CALLS
from accumlint.model.names import dotted, last_segment, method_name

if TYPE_CHECKING:
    from accumlint.model import Scope, Site


def evaluation_function(scope: Scope) -> bool:
    """Whether every statement of ``scope``'s function runs as an evaluation (see the module
    docstring); the module's top level never is."""
    function = scope.node
    if not isinstance(function, cst.FunctionDef):
        return False
    if any(site.call is not None and (method_name(site.call) or last_segment(dotted(site.call.func))) in BACKWARD_CALLS
           for site in scope.sites):
        return False
    if decorated_without_grad(function) or evaluates(function):
        return True
    if function.name.value in fw.lightning.EVALUATION_HOOKS and scope.class_def is not None and any(
            last_segment(dotted(base.value)) in fw.lightning.MODULE_BASES for base in scope.class_def.bases):
        return True
    return bool(conventions.EVALUATION_FUNCTION_NAME.search(function.name.value))


def reported_values(site: Site) -> Iterator[cst.BaseExpression]:
    """The values ``site`` reports (see the module docstring), in the scope's own code only (a
    site of an inlined helper reports to its caller, not out of the evaluation)."""
    if site.inline is not None:
        return
    if isinstance(site.node, cst.Return) and site.value is not None:
        yield from _parts(site.value)
    elif isinstance(site.augmented, cst.AddAssign) and site.value is not None:
        yield from _parts(site.value)
    elif site.call is not None:
        for arg in site.call.args:
            yield from _parts(arg.value)


def _parts(expression: cst.BaseExpression) -> Iterator[cst.BaseExpression]:
    """The values an expression carries: itself, or the items of an f-string, a dict, a tuple
    or a list."""
    if isinstance(expression, cst.FormattedString):
        for part in expression.parts:
            if isinstance(part, cst.FormattedStringExpression):
                yield part.expression
    elif isinstance(expression, cst.Dict):
        for element in expression.elements:
            if isinstance(element, cst.DictElement):
                yield element.value
    elif isinstance(expression, (cst.Tuple, cst.List)):
        for element in expression.elements:
            yield from _parts(element.value)
    else:
        yield expression
