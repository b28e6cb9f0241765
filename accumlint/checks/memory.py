"""Graph lifetime: nothing that holds a microbatch's autograd graph may outlive it (P5)."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from accumlint import frameworks as fw
from accumlint.checks.base import Hit, Rule
from accumlint.checks.shared.forward_sums import graphless_outputs
from accumlint.checks.shared.losses import retained_in_group, retains_graph
from accumlint.model import Cadence, EventKind, FileModel, LoopStyle, conventions
from accumlint.model.callgraph import Inline, parameters
from accumlint.model.dataflow import home, names_feeding, reaching_assignment, reaching_definitions
from accumlint.model.names import calls_in, dotted, method_name, names_in, positional, walk
from accumlint.model.scopes import FrameKind, Site

_ACCUMULATING = (LoopStyle.GATED, LoopStyle.MICRO_LOOP, LoopStyle.ACCELERATE, LoopStyle.DEEPSPEED)


class LossKeptWithGraph(Rule):
    """ACC201: a loss (or its graph-holding parts) stored across microbatches."""

    code = "ACC201"

    def check(self, model: FileModel) -> Iterator[Hit]:
        yield from _forward_only_loops(model)
        for group in model.loops:
            if (group.style not in _ACCUMULATING or group.accumulates is False
                    or model.frameworks.accumulation_unset(group)):
                continue  # a loop that updates every microbatch has no group to keep alive
            # a helper's names are read in its own namespace (:func:`home`): its backwards count too
            backwards = [b for b in group.of_kind(EventKind.BACKWARD) if group.in_loop(b)
                         and group.cadence(b) in (Cadence.MICROBATCH, Cadence.UNKNOWN)]
            holders = _graph_bindings(backwards)
            objects = _loss_objects(backwards)
            for key, bindings in _forward_outputs(model, group).items():
                holders.setdefault(key, set()).update(bindings)
            deferred = _deferred_containers(group)
            # each microbatch backpropagated at once, keeping its graph for a later backward over the
            # kept values (a batch-coupled loss over the whole group): those graphs are kept on purpose
            retained = bool(backwards) and all(retains_graph(b) for b in backwards)
            for site in group.loop_sites:
                if site.under_no_grad:
                    continue
                stored, container = _stored_value(site)
                if stored is None or container is None or _detached(stored):
                    continue
                container, namespace = home(site.scope, container, site.order, site.inline)
                if (container, namespace) in deferred and retained:
                    continue
                if (container, namespace) in deferred and not (group.gate and site.inside(group.gate.frame_node)):
                    yield Hit(
                        site.statement,
                        f"`{container}` keeps every microbatch's loss with its graph until the group's single "
                        "backward: the activations of all A microbatches are alive at once, so memory grows "
                        "with A and accumulation saves nothing",
                        _DEFERRED_FIX,
                    )
                    continue
                if _overwritten_slot(site, group) or not _holds_graph(stored, site, holders, group.loop, objects):
                    continue
                if not container.startswith("self."):
                    definition = reaching_assignment(site.scope, container.split("[", 1)[0], site.order, None,
                                                     namespace)
                    if definition is not None and definition.inside(group.loop):
                        continue  # a fresh container every microbatch
                yield Hit(
                    site.statement,
                    f"`{container}` keeps the loss with its autograd graph beyond its microbatch: the graph of "
                    f"every microbatch stays referenced for as long as `{container}` lives, so memory grows "
                    "with each microbatch",
                )


_DEFERRED_MESSAGE = ("`{}` keeps every microbatch's loss with its graph until the group's single backward: the "
                     "activations of all A microbatches are alive at once, so memory grows with A and "
                     "accumulation saves nothing")
_DEFERRED_FIX = "backpropagate each microbatch as it comes (`(loss / A).backward()`) and keep only `loss.detach()`"


def _forward_only_loops(model: FileModel) -> Iterator[Hit]:
    """Loops that only run forwards and keep their losses (``losses.append(crit(model(x), y))``,
    ``total = total + loss``) for one backward right after the loop: a deferred group whose
    graphs are all alive at once."""
    for scope in model.scopes:
        backwards = [e for e in model.events[scope] if e.kind is EventKind.BACKWARD and not e.site.in_helper]
        reported: set[str] = set()
        for backward in backwards:
            if backward.loss is None:
                continue
            used = set(names_in(backward.loss))
            for name in list(used):
                definition = reaching_assignment(scope, name, backward.order)
                if definition is not None and definition.value is not None and definition.augmented is None:
                    used.update(names_in(definition.value))
            used.update(prefix for name in list(used) for prefix in _prefixes(name))  # `kept.values()` reads `kept`
            for loop, (start, end) in scope.loop_spans.items():
                if end > backward.order or backward.site.inside(loop) or not isinstance(loop, (cst.For, cst.While)):
                    continue
                inside = scope.sites[start:end]
                if not inside or any(e.kind is EventKind.BACKWARD and start <= e.order < end for e in backwards):
                    continue
                enclosing = {id(f.node) for f in inside[0].frames if f.node is not loop}
                if not enclosing <= {id(f.node) for f in backward.site.frames}:
                    continue  # the loop sits in another branch or loop than the backward
                if {id(f.node) for f in backward.site.frames if f.kind is FrameKind.LOOP} - enclosing:
                    continue  # a backward per kept loss in a later loop: a two-phase schedule needs the graphs
                for site in inside:
                    if site.in_helper or site.under_no_grad:
                        continue
                    stored, container = _stored_value(site)
                    if (stored is None or container not in used or container in reported or _detached(stored)
                            or not _runs_forward(model, stored, site, loop)):
                        continue
                    reported.add(container)
                    yield Hit(site.statement, _DEFERRED_MESSAGE.format(container), _DEFERRED_FIX)


def _runs_forward(model: FileModel, stored: cst.BaseExpression, site, loop: cst.CSTNode) -> bool:
    """Whether a stored value comes from a model's forward in the loop (``crit(model(x), y)``,
    or a name assigned one there): a regularizer summed over parameters is no microbatch."""
    values = [stored]
    for name in names_in(stored):  # `crit(out, y)` with `out = model(x)` earlier in the loop
        definition = reaching_assignment(site.scope, name, site.order, loop)
        if (definition is not None and definition.value is not None and definition.augmented is None
                and not isinstance(definition.node, (cst.For, cst.With)) and not _detached(definition.value)):
            values.append(definition.value)
    return any(model.roles.of(call.func, site).role in conventions.MODEL_ROLES
               for value in values for call in calls_in(value))


def _prefixes(name: str) -> list[str]:
    """``a.b.c`` → ``a``, ``a.b``."""
    parts = name.split(".")
    return [".".join(parts[:index]) for index in range(1, len(parts))]


def _deferred_containers(group) -> set[Key]:
    """Containers whose contents are backpropagated once at the group boundary
    (``sum(group_losses).backward()``, ``torch.stack(losses).mean().backward()``), each in the
    namespace it lives in: a helper's local of the same name is another variable, bound afresh
    on every call (``total += penalty`` in the loss function the boundary calls)."""
    names: set[Key] = set()
    for backward in group.of_kind(EventKind.BACKWARD):
        if backward.loss is None or group.cadence(backward) is not Cadence.UPDATE or backward.site.in_helper:
            continue
        used = set(names_in(backward.loss))
        for name in list(used):
            definition = reaching_assignment(backward.site.scope, name, backward.order, group.loop)
            if definition is not None and definition.value is not None and definition.augmented is None:
                used.update(names_in(definition.value))
        names.update(home(backward.site.scope, name, backward.order, backward.site.inline) for name in used)
    return names


#: a graph-holding binding of a name: the assignment (a site), or ``None`` for the value the name
#: had on entry to the function (a parameter, a global)
Binding = Site | None
#: a name and the namespace it is bound in (:func:`home`; None: the scope's own code)
Key = tuple[str, Inline | None]


def _graph_bindings(backwards) -> dict[Key, set[Binding]]:
    """The bindings that hold the graph a microbatch's backward goes through: for each name
    feeding a backward's loss, the assignments to it reaching the backward (and, through a
    rename or a division, those of the names they read). Keyed by name in its namespace: a
    store of that name keeps the graph only where one of these bindings reaches it
    (:func:`_holds_graph`)."""
    holders: dict[Key, set[Binding]] = {}
    for backward in backwards:
        if backward.loss is None:
            continue
        for name in names_feeding(backward.loss):
            _add_holders(holders, name, backward.site, backward.order, follow=_FOLLOW_DEPTH)
    return holders


def _loss_objects(backwards) -> frozenset[Key]:
    """The objects whose attribute a backward differentiates (``result`` of
    ``result.loss.backward()``), keyed as :func:`_graph_bindings` keys names."""
    found: set[Key] = set()
    for backward in backwards:
        name = dotted(backward.loss) if backward.loss is not None else None
        if name is not None and "." in name:
            found.add(home(backward.site.scope, name.rsplit(".", 1)[0], backward.order, backward.site.inline))
    return frozenset(found)


#: how many assignments back from a backward's loss its graph-holding names are followed
_FOLLOW_DEPTH = 4


def _add_holders(holders: dict[Key, set[Binding]], name: str, use: Site, order: int, follow: int) -> None:
    """Record the bindings of ``name`` (read at ``use``) reaching ``order`` that hold a graph
    (``follow`` > 0: also those of the names a rename, a division or a sum reads, that many
    assignments back: the terms of ``loss = hinge + penalty`` hold the graph the backward goes
    through)."""
    scope = use.scope
    if _receiver(use, name):
        return  # `self` of `self.loss_fn(out, y)`: the object whose method computes the loss holds no graph
    key = name, namespace = home(scope, name, order, use.inline)
    definitions, on_entry = reaching_definitions(scope, name, order, inline=namespace)
    found = holders.setdefault(key, set())
    if on_entry:
        found.add(None)
    for definition in definitions:
        if _graph_free(definition.value, definition):
            continue  # a token count weighting the loss (`(loss * n_tok).backward()`)
        found.add(definition)
        value = definition.value
        if not follow or value is None or isinstance(definition.node, (cst.For, cst.With)):
            continue
        # a rename or a division keeps the graph-holding value; a product's factors need not. The
        # container a loss is read out of (`loss = outputs["loss"]`) holds it only where the
        # backward's own loss is read out of it: further back, a dict of outputs kept for the
        # group's callbacks is another object than the loss divided from its entry
        container = isinstance(value, (cst.Attribute, cst.Subscript)) or isinstance(value, cst.BinaryOperation) \
            and isinstance(value.left, (cst.Attribute, cst.Subscript))
        if container and follow < _FOLLOW_DEPTH:
            continue
        if isinstance(value, (cst.Name, cst.Attribute, cst.Subscript)) or (
                isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Divide)):
            for fed in names_feeding(value):
                _add_holders(holders, fed, definition, definition.order, follow - 1)
        elif isinstance(value, cst.BinaryOperation) and isinstance(value.operator, (cst.Add, cst.Subtract)):
            for term in (value.left, value.right):  # a plain name summed into the loss
                if isinstance(term, (cst.Name, cst.Attribute)) and dotted(term) is not None:
                    _add_holders(holders, dotted(term), definition, definition.order, follow - 1)
    if found:
        holders[key] = found  # a nested visit of the same name may have dropped the shared entry
    else:
        holders.pop(key, None)


def _receiver(site: Site, name: str) -> bool:
    """Whether ``name`` is, bare, the receiver of the method whose code ``site`` is part of (the
    first parameter of a method of a class: an inlined one's, or the scope's own)."""
    function = site.inline.function if site.inline is not None else site.scope.node
    class_def = site.inline.class_def if site.inline is not None else site.scope.class_def
    if class_def is None or not isinstance(function, cst.FunctionDef):
        return False
    params = parameters(function)
    return bool(params) and params[0].name.value == name


#: calls whose result holds no graph: functions (``len(x)``) and methods (``mask.numel()``)
_GRAPH_FREE_FUNCTIONS = frozenset({"len", "int", "float", "str"})
_GRAPH_FREE_METHODS = fw.pytorch.GRAPH_CUTTING_METHODS | fw.pytorch.NON_DIFFERENTIABLE_RESULTS


def _graph_free(value: cst.BaseExpression | None, site, depth: int = 0) -> bool:
    """Whether a value can hold no autograd graph: a comparison (a boolean mask), a count of one
    (``(labels != -100).sum()``, ``mask.long().sum()``), ``len``/``numel``, a literal, a detached
    value; a name is followed to its assignment."""
    if value is None or depth > 4:
        return False
    if isinstance(value, (cst.Comparison, cst.Integer, cst.Float)):
        return True
    if isinstance(value, cst.Call):
        if method_name(value) in _GRAPH_FREE_METHODS or dotted(value.func) in _GRAPH_FREE_FUNCTIONS:
            return True
        if isinstance(value.func, cst.Attribute):  # mask.sum(), mask.float().sum()
            return _graph_free(value.func.value, site, depth + 1)
        return False
    name = dotted(value) if isinstance(value, (cst.Name, cst.Attribute)) else None
    if name is None:
        return False
    definition = reaching_assignment(site.scope, name, site.order, None, site.inline)
    return (definition is not None and definition.augmented is None
            and not isinstance(definition.node, (cst.For, cst.With)) and _graph_free(definition.value, definition,
                                                                                      depth + 1))


def _holds_graph(stored: cst.BaseExpression, site, holders: dict[Key, set[Binding]], loop: cst.CSTNode,
                 objects: frozenset[Key] = frozenset()) -> bool:
    """Whether a graph-holding binding (``holders``) reaches the stored value: a name is judged
    by the assignment that reaches the store, not by any of its bindings (``x = next(it);
    kept.append(x); x = augment(x)`` keeps the raw batch; a name re-bound to ``loss.item()``
    earlier in the iteration no longer holds the graph). Where the value the name had before
    the loop reaches the store, so does the binding of the previous pass. A method's result on
    one of ``objects`` (objects whose attribute is a backpropagated loss) is not judged."""
    method_of = home(site.scope, dotted(stored.func.value) or "", site.order, site.inline) \
        if isinstance(stored, cst.Call) and isinstance(stored.func, cst.Attribute) else None
    for name in set(names_feeding(stored)):
        name, namespace = home(site.scope, name, site.order, site.inline)
        held = holders.get((name, namespace))
        if held is None:
            continue
        if (name, namespace) == method_of and method_of in objects:
            continue  # `result.snapshot()` where `result.loss` is the loss: what the object's method keeps is unknown
        definitions, on_entry = reaching_definitions(site.scope, name, site.order, inline=namespace)
        if any(d in held and (d.value is None or not _detached(d.value)) for d in definitions):
            return True
        if (on_entry or any(not d.inside(loop) for d in definitions)) and any(
                h is None or h.inside(loop) for h in held):
            return True  # the value of the previous pass (or from before the loop) is kept
    return False


def _forward_outputs(model: FileModel, group) -> dict[Key, set[Binding]]:
    """The bindings of names to a model's output in the loop (``output = model(x)``): they hold the graph."""
    names: dict[Key, set[Binding]] = {}
    for site in group.loop_sites:
        value = site.value
        if (site.augmented is None and site.call is None
                and isinstance(value, cst.Call) and not isinstance(site.node, (cst.For, cst.With))
                and model.roles.of(value.func, site).role in conventions.MODEL_ROLES):
            # `loss, shown = model(x)` where forward returns `loss, loss.item()`: only the loss holds a graph
            free = graphless_outputs(model.functions, value, site, model.reaching, len(site.targets)) \
                if len(site.targets) > 1 else ()
            for position, name in enumerate(site.targets):
                if name and position not in free:
                    # the target as bound by this assignment (order + 1: a parameter it rebinds is local)
                    names.setdefault(home(site.scope, name, site.order + 1, site.inline), set()).add(site)
    return names


def _stored_value(site) -> tuple[cst.BaseExpression | None, str | None]:
    """(value, container) when the site keeps a value beyond the statement."""
    if site.augmented is not None and isinstance(site.augmented, (cst.AddAssign, cst.SubtractAssign)):
        target = site.targets[0] if site.targets else None
        return site.value, target
    if site.call is not None and method_name(site.call) in ("append", "extend", "insert"):
        value = positional(site.call, 1 if method_name(site.call) == "insert" else 0)
        return value, dotted(site.call.func.value)  # type: ignore[attr-defined]
    if site.augmented is None and site.value is not None and len(site.targets) == 1 and site.call is None:
        statement = site.statement
        if isinstance(statement, cst.Assign) and isinstance(statement.targets[0].target, cst.Subscript):
            return site.value, dotted(statement.targets[0].target.value)
        value = site.value
        if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Add):
            # `total = total + loss`: the running sum keeps what it adds
            if dotted(value.left) == site.targets[0]:
                return value.right, site.targets[0]
            if dotted(value.right) == site.targets[0]:
                return value.left, site.targets[0]
    return None, None


def _overwritten_slot(site: Site, group) -> bool:
    """Whether a store into a subscript (``stats["loss"] = loss``, ``self.log[key] = loss``)
    writes the same slot on every microbatch: a literal key, or (in the loop's own code) names
    the loop never rebinds. The slot then holds one microbatch's value at a time, as a plain
    name does; a key that changes (``history[i]``) keeps them all."""
    statement = site.statement
    if not (isinstance(statement, cst.Assign) and len(statement.targets) == 1
            and isinstance(statement.targets[0].target, cst.Subscript)):
        return False
    for element in statement.targets[0].target.slice:
        key = element.slice.value if isinstance(element.slice, cst.Index) else None
        if isinstance(key, (cst.SimpleString, cst.ConcatenatedString, cst.Integer)):
            continue
        if key is None or site.inline is not None or any(isinstance(n, cst.Call) for n in walk(key)):
            return False  # a helper's key is its caller's argument; a call may differ each time
        if any(name in group.assigned for name in names_in(key)):
            return False
    return True


def _detached(value: cst.BaseExpression) -> bool:
    for call in calls_in(value):
        if (method_name(call) or dotted(call.func) or "") in conventions.DETACHING_CALLS:
            return True
    # `loss.data` (`loss.data.mean()`, `loss.data[0]`): the same storage without autograd history
    while isinstance(value, (cst.Call, cst.Subscript, cst.Attribute)):
        if isinstance(value, cst.Attribute) and value.attr.value == "data":
            return True
        value = value.func if isinstance(value, cst.Call) else value.value
    return False



class RetainGraphInLoop(Rule):
    """ACC202: ``backward(retain_graph=True)`` with no later backward through that graph."""

    code = "ACC202"

    def check(self, model: FileModel) -> Iterator[Hit]:
        for group in model.loops:
            for event in retained_in_group(model, group):
                yield Hit(
                    event.node,
                    "`retain_graph=True` keeps this microbatch's saved activations after its backward, and "
                    "no later backward of this microbatch goes through them: they stay alive until the loss "
                    "is rebound (or, if it is stored, for the whole group), raising peak memory for nothing",
                )
