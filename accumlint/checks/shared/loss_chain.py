"""The multiplicative chain of a loss value (P4, P10): the terms a loss is a product or quotient
of, read back through assignments and the helpers inlined where it is used, with what the code
shows of each term — a mean-reduced torch loss, a replica count, a name of A, a literal — and
every divisor and scalar factor on the way.

``loss = F.cross_entropy(out, y) / A; (loss * world_size).backward()`` is a chain of one mean
term, one divisor (A) and one factor (the world size). A sum (``ce + aux``), a term bound on
more than one path, a call the code does not show, or a name of unknown meaning makes the
chain *opaque*: whatever reads it must then stay silent about the loss's reduction.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import libcst as cst

from accumlint import frameworks as fw
from accumlint.model.names import dotted, keyword, last_segment, method_name

if TYPE_CHECKING:
    from accumlint.model import FileModel, Site

#: the most expressions one chain reads (a bound on assignments and helper returns followed)
_MAX_TERMS = 32
#: methods that return their receiver's value as a tensor of the same meaning
_PASS_THROUGH = frozenset({"item", "detach", "float", "double", "cpu", "to", "clone", "contiguous", "squeeze"})


@dataclass
class Chain:
    """What the multiplicative chain of one loss value is made of.

    ``means``: the terms that are a mean over the microbatch's own elements (a torch loss with
    ``reduction="mean"``, its default, or ``x.mean()``); ``divisions``: ``(node, divisor, site)``
    for each division (``a / d`` or ``loss /= d``) and the site whose code computes it (a
    helper's ``return``, in the helper's names); ``products``: ``(node, factor)`` for each scalar
    factor that multiplies the chain (``a * f``, ``loss *= f``), ``factor`` being the side that
    is a named or literal scalar (a replica count, A, a number); ``opaque``: some term is none of
    these (its reduction or meaning is not in the code)."""

    means: list[cst.Call] = field(default_factory=list)
    divisions: list[tuple[cst.CSTNode, cst.BaseExpression, Site]] = field(default_factory=list)
    products: list[tuple[cst.CSTNode, cst.BaseExpression]] = field(default_factory=list)
    opaque: bool = False


def loss_chain(model: FileModel, expression: cst.BaseExpression, site: Site,
               is_scalar: Callable[[cst.BaseExpression], bool]) -> Chain:
    """The :class:`Chain` of ``expression`` as used at ``site``. ``is_scalar`` accepts the names
    and calls that are a number the caller knows (a replica count, A); integer and float literals
    always are. A name is followed to its only reaching assignment (a ``loss /= A`` or
    ``loss *= f`` on the way is a division or product of the chain); a call of a helper inlined
    at ``site`` to its ``return`` values."""
    chain = Chain()
    work: list[tuple[cst.BaseExpression, Site]] = [(expression, site)]
    seen: set[int] = set()
    while work:
        if len(seen) >= _MAX_TERMS:
            chain.opaque = True
            break
        current, at = work.pop()
        seen.add(id(current))
        _read(model, current, at, is_scalar, chain, work, seen)
    return chain


def _scalar(expression: cst.BaseExpression, is_scalar: Callable[[cst.BaseExpression], bool]) -> bool:
    return isinstance(expression, (cst.Integer, cst.Float)) or is_scalar(expression)


def _scalar_name(model: FileModel, side: cst.BaseExpression, at: Site, is_scalar) -> bool:
    """A name whose only reaching assignment gives it a scalar (``scale = A``)."""
    name = dotted(side) if isinstance(side, (cst.Name, cst.Attribute)) else None
    definition = model.sole_reaching(name, at) if name else None
    return (definition is not None and definition.augmented is None and definition.value is not None
            and not isinstance(definition.node, (cst.For, cst.With)) and _scalar(definition.value, is_scalar))


def _read(model: FileModel, node: cst.BaseExpression, at: Site, is_scalar, chain: Chain,
          work: list[tuple[cst.BaseExpression, Site]], seen: set[int]) -> None:
    """Add what ``node`` (one term of the chain) shows to ``chain``; queue the terms it is made of."""
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Divide):
        chain.divisions.append((node, node.right, at))
        work.append((node.left, at))
    elif isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply):
        for side, other in ((node.right, node.left), (node.left, node.right)):
            if _scalar(side, is_scalar) or _scalar_name(model, side, at, is_scalar):
                chain.products.append((node, side))
                work.append((other, at))
                return
        work.extend(((node.left, at), (node.right, at)))
    elif isinstance(node, cst.UnaryOperation):
        work.append((node.expression, at))
    elif isinstance(node, (cst.Integer, cst.Float)) or is_scalar(node):
        return
    elif isinstance(node, cst.Call):
        _read_call(model, node, at, chain, work, seen)
    elif isinstance(node, (cst.Name, cst.Attribute)) and dotted(node) is not None:
        _read_name(model, dotted(node), at, is_scalar, chain, work, seen)  # type: ignore[arg-type]
    else:
        chain.opaque = True


def _read_call(model: FileModel, call: cst.Call, at: Site, chain: Chain,
               work: list[tuple[cst.BaseExpression, Site]], seen: set[int]) -> None:
    method = method_name(call)
    if method == "mean" and not call.args:
        chain.means.append(call)
        return
    if method in _PASS_THROUGH and isinstance(call.func, cst.Attribute):
        work.append((call.func.value, at))
        return
    if mean_reduced_loss(model, call, at):
        chain.means.append(call)
        return
    returns = [r for r in at.scope.returns_of(call) if r.value is not None and id(r) not in seen]
    if not returns:
        chain.opaque = True  # a call whose result the code does not show
    for returned in returns:
        seen.add(id(returned))
        work.append((returned.value, returned))  # type: ignore[arg-type]


def _read_name(model: FileModel, name: str, at: Site, is_scalar, chain: Chain,
               work: list[tuple[cst.BaseExpression, Site]], seen: set[int]) -> None:
    """Follow ``name`` back through its assignments: augmented ones are divisions or products of
    the chain; the first plain one gives its value. Two assignments that may reach (an ``if``)
    or one that is no assignment of a value (a loop target) make the chain opaque."""
    definition = model.sole_reaching(name, at)
    while definition is not None and id(definition) not in seen and definition.value is not None:
        seen.add(id(definition))
        operator = definition.augmented
        if operator is None:
            if isinstance(definition.node, (cst.For, cst.With)):
                break
            work.append((definition.value, definition))
            return
        if isinstance(operator, cst.DivideAssign):
            chain.divisions.append((definition.node, definition.value, definition))
        elif isinstance(operator, cst.MultiplyAssign) and _scalar(definition.value, is_scalar):
            chain.products.append((definition.node, definition.value))
        else:
            break  # `loss += other`: a sum, not one chain
        definition = model.sole_reaching(name, definition)
    chain.opaque = True



def mean_reduced_loss(model: FileModel, call: cst.Call, site: Site) -> bool:
    """Whether ``call`` computes a torch loss that averages over the elements it is given: a
    function of ``torch.nn.functional`` or an instance of a ``torch.nn`` loss class
    (:data:`accumlint.frameworks.pytorch.MEAN_DEFAULT_LOSSES`, resolved through the imports; a
    criterion name bound to one) whose ``reduction`` is ``"mean"`` or left at its default. A
    project's own loss function, or a ``reduction`` the code does not spell, is no evidence."""
    name = dotted(call.func)
    constructor = call
    if name is None:
        return False
    qualified = model.imports.qualify(name)
    if not _torch_loss(qualified):
        value = _bound_value(model, name, site)  # criterion = nn.CrossEntropyLoss(...)
        if not isinstance(value, cst.Call) or not _torch_loss(model.imports.qualify(dotted(value.func))):
            return False
        constructor = value
    reduction = keyword(constructor, "reduction") or keyword(call, "reduction")
    return reduction is None or (isinstance(reduction, cst.SimpleString) and reduction.evaluated_value == "mean")


def _bound_value(model: FileModel, name: str, site: Site) -> cst.BaseExpression | None:
    """The value ``name`` is bound to where ``site`` reads it: its reaching assignment, or for
    ``self.<attr>`` in a method (inlined or not) what the class's ``__init__`` alone stores."""
    binding = model.reaching(name, site)
    if binding is not None:
        return binding.value if binding.augmented is None else None
    owner = site.inline.class_def if site.inline is not None else site.scope.class_def
    if owner is None or not name.startswith("self.") or name.count(".") != 1:
        return None
    return model.roles.init_value(owner, name)


def constant(model: FileModel, expression: cst.BaseExpression) -> bool:
    """Whether ``expression`` is a number fixed when the module is written: a literal, or a
    module-level name every assignment of which is a literal (``SCALE = 4``)."""
    if isinstance(expression, (cst.Integer, cst.Float)):
        return True
    if not isinstance(expression, cst.Name):
        return False
    assigned = [site.value for scope in model.scopes for site in scope.sites if expression.value in site.targets]
    top = [site for site in model.scopes[0].sites if expression.value in site.targets]
    return bool(top) and len(assigned) == len(top) and all(
        isinstance(value, (cst.Integer, cst.Float)) for value in assigned)


def _torch_loss(qualified: str | None) -> bool:
    return (qualified is not None and qualified.startswith("torch.")
            and last_segment(qualified) in fw.pytorch.MEAN_DEFAULT_LOSSES)
