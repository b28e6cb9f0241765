"""Which trained models a backward reaches (ACC008): a GAN's generator loss flows through
the discriminator's forward, so its backward leaves gradients in the discriminator's ``.grad``.

A model is *trained* here when an optimizer built in view (``Adam(net_d.parameters())``) owns
its parameters. A backward *reaches* a model when a call of that model (``net_d(x)``,
``net_d.forward(x)``) feeds its loss through arguments, arithmetic and assignments of the same
scope, not cut by ``.detach()`` or an assignment under ``torch.no_grad()``; in an inlined helper
the loss is followed in the helper's names and its parameters into the caller's arguments.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from accumlint import frameworks as fw
from accumlint.model import Event, Role
from accumlint.model.callgraph import Inline
from accumlint.model.dataflow import reaching_assignment
from accumlint.model.names import dotted, keyword, method_name, positional, receiver
from accumlint.model.roles import Roles

if TYPE_CHECKING:
    from accumlint.model import FileModel, Site

#: calls whose result carries no graph to their argument
_CUTS = fw.pytorch.GRAPH_CUTTING_METHODS | {"cpu_detach"}  # (a helper name some projects define)
_MAX_DEPTH = 6


def trained_models(model: FileModel, optimizer: Event) -> tuple[str, ...]:
    """The dotted names of every model an optimizer update's optimizer was built over, when its
    constructor is visible: one model's ``parameters()``, several chained
    (``itertools.chain(a.parameters(), b.parameters())``, ``list(a.parameters()) +
    list(b.parameters())``, ``[*a.parameters(), *b.parameters()]``) or param groups
    (``[{"params": a.parameters()}, {"params": b.parameters(), "lr": ...}]``), directly or
    through a name with one assignment reaching the update. Empty where any part is something
    else (the models are then not all known)."""
    info = optimizer.role
    if info.role is not Role.OPTIMIZER or info.origin is None:
        return ()
    params = positional(info.origin, 0) or keyword(info.origin, "params")
    return _parameter_owners(model, params, optimizer, 0) or ()


#: calls that hand on the parameters of their arguments, concatenated
_CONCATENATING = frozenset({"itertools.chain", "chain", "list", "tuple"})


def _parameter_owners(model: FileModel, node: cst.BaseExpression | None, optimizer: Event,
                      depth: int) -> tuple[str, ...] | None:
    """The models whose parameters ``node`` holds (see :func:`trained_models`); None where a
    part of it is not a model's ``parameters()``."""
    if node is None or depth > _MAX_DEPTH:
        return None
    parts: list[cst.BaseExpression | None]
    if isinstance(node, cst.Call) and method_name(node) == "parameters" and not node.args:
        name = dotted(receiver(node))
        return (name,) if name else None
    if isinstance(node, cst.Call) and dotted(node.func) in _CONCATENATING:
        parts = [arg.value if arg.star != "**" else None for arg in node.args]
    elif isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add):
        parts = [node.left, node.right]
    elif isinstance(node, (cst.List, cst.Tuple)):
        parts = [_group_parameters(element) for element in node.elements]
    elif isinstance(node, cst.Name):
        definition = model.sole_reaching(node.value, optimizer.site)
        parts = [definition.value if definition is not None and definition.augmented is None else None]
    else:
        return None
    owners: list[str] = []
    for part in parts:
        found = _parameter_owners(model, part, optimizer, depth + 1)
        if found is None:
            return None
        owners.extend(name for name in found if name not in owners)
    return tuple(owners)


def _group_parameters(element: cst.BaseElement) -> cst.BaseExpression | None:
    """What one element of a list of parameters holds: a starred iterable's items, or a param
    group's ``"params"``."""
    value = element.value
    if isinstance(value, cst.Dict):
        return next((e.value for e in value.elements if isinstance(e, cst.DictElement)
                     and isinstance(e.key, cst.SimpleString) and e.key.evaluated_value == "params"), None)
    return value


def models_reached(backward: Event, models: set[str], roles: Roles | None = None) -> tuple[set[str], set[str]]:
    """The names in ``models`` whose forward feeds the loss of ``backward`` (see the module doc;
    ``roles``: a model held by a trainer built on it counts under its constructor's argument),
    and those whose output feeds it only through a ``.detach()`` (``net_d(fake.detach())``: the
    author cut that model off this loss on purpose)."""
    if backward.loss is None:
        return set(), set()
    found: set[str] = set()
    cut: set[str] = set()
    seen: set[int] = set()
    # (node, position, depth, detached, the inlined call whose names the node is in: None, the scope's own)
    work: list[tuple[cst.CSTNode, int, int, bool, Inline | None]] = [
        (backward.loss, backward.site.order, 0, False, backward.site.inline)]
    scope = backward.site.scope
    while work:
        node, order, depth, detached, inline = work.pop()
        if isinstance(node, cst.Call):
            if method_name(node) in _CUTS:
                if isinstance(node.func, cst.Attribute):
                    work.append((node.func.value, order, depth, True, inline))
                continue
            callee = outermost_name(node.func, inline)
            if callee is not None and callee.endswith(".forward"):
                callee = callee[: -len(".forward")]
            if callee is not None and roles is not None and callee not in models:
                callee = roles.stored_name(callee, scope, order)  # `self.net_d` of a trainer built on `net_d`
            if callee in models:
                (cut if detached else found).add(callee)  # type: ignore[arg-type]
            work.extend((arg.value, order, depth, detached, inline) for arg in node.args)
            if isinstance(node.func, cst.Attribute):
                work.append((node.func.value, order, depth, detached, inline))
            continue
        name = dotted(node) if isinstance(node, (cst.Name, cst.Attribute, cst.Subscript)) else None
        if name is not None:
            definition = reaching_assignment(scope, name, order, inline=inline)
            if (definition is not None and definition.value is not None and depth < _MAX_DEPTH
                    and id(definition) not in seen and not definition.under_no_grad
                    and not isinstance(definition.node, (cst.For, cst.With))):
                seen.add(id(definition))
                work.append((definition.value, definition.order, depth + 1, detached, inline))
            elif definition is None and inline is not None:
                # a helper's parameter: its argument, read in the caller's names
                value, where = inline.resolve(node)  # type: ignore[arg-type]
                if where is not inline and depth < _MAX_DEPTH:
                    work.append((value, order, depth + 1, detached, where))
                    continue
            if isinstance(node, (cst.Attribute, cst.Subscript)):
                work.append((node.value, order, depth, detached, inline))
            continue
        if isinstance(node, cst.BinaryOperation):
            work.extend(((node.left, order, depth, detached, inline), (node.right, order, depth, detached, inline)))
        elif isinstance(node, cst.UnaryOperation):
            work.append((node.expression, order, depth, detached, inline))
        elif isinstance(node, (cst.Tuple, cst.List)):
            work.extend((element.value, order, depth, detached, inline) for element in node.elements)
        elif isinstance(node, cst.IfExp):
            work.extend(((node.body, order, depth, detached, inline), (node.orelse, order, depth, detached, inline)))
        elif isinstance(node, (cst.Subscript, cst.Attribute)):  # `text_encoder(ids)[0]`, `model(x).logits`
            work.append((node.value, order, depth, detached, inline))
    return found, cut - found


def outermost_name(func: cst.BaseExpression, inline: Inline | None) -> str | None:
    """The dotted name of a called model in the scope's own names (a helper's ``net_d`` is the
    caller's argument), or None where a parameter's value is unknown."""
    if inline is None:
        return dotted(func)
    value, where = inline.resolve(func)
    return dotted(value) if where is None else None


def switches_requires_grad(site: Site) -> bool:
    """Whether the site switches ``requires_grad`` (``net.requires_grad_(False)``,
    ``set_requires_grad(net_d, False)``, ``p.requires_grad = False``): a frozen model's gradients
    are not computed, so which model a backward reaches is then left open."""
    if site.call is not None and "requires_grad" in (dotted(site.call.func) or ""):
        return True
    return any(target and target.endswith("requires_grad") for target in site.targets)
