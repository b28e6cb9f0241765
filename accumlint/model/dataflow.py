"""Just enough data flow for the rules: the assignment that reaches a use (by execution
order inside one scope), and the divisions a loss went through before its backward."""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import libcst as cst

from accumlint.model.callgraph import Inline
from accumlint.model.names import dotted
from accumlint.model.scopes import Frame, FrameKind, Scope, Site, unpacked

MAX_CHAIN = 5


def reaching_assignment(scope: Scope, name: str, before: int, within: cst.CSTNode | None = None,
                        inline: Inline | None = None) -> Site | None:
    """The last plain or augmented assignment to ``name`` executed before position ``before``
    (optionally only those inside ``within``) in the namespace of ``inline`` (None: the scope's
    own code; assignments inside inlined helpers do not count there)."""
    bound = scope.assignments_to(name)
    for position in range(bisect_left(bound, before, key=_order) - 1, -1, -1):
        site = bound[position]
        if site.inline is inline and (within is None or site.inside(within)):
            return site
    return None


def _order(site: Site) -> int:
    return site.order


#: frames under which a definition may not run on the way to a use they do not also enclose
_CONDITIONAL = frozenset({FrameKind.IF, FrameKind.GUARD, FrameKind.HANDLER, FrameKind.MATCH, FrameKind.LOOP})


def reaching_definitions(scope: Scope, name: str, before: int, candidates: list[Site] | None = None,
                         inline: Inline | None = None) -> tuple[list[Site], bool]:
    """Every assignment to ``name`` that may reach execution position ``before`` (latest first),
    and whether the use may also see the value the name had on entry (a parameter, a global:
    no assignment on some path).

    A definition under a branch, handler, case or loop that does not also enclose the use may
    not run, so the earlier ones reach too; an ``if``/``else`` that assigns on every branch
    hides the earlier ones. Definitions in a branch the use cannot follow from (the other arm
    of its own ``if``, the body of an ``if cond: continue`` the use comes after) do not reach;
    only assignments in the namespace of ``inline`` count (None: the scope's own code, not the
    inlined helpers). ``candidates``: the scope's assignments to ``name`` in execution order,
    when the caller has them. Loop-carried definitions (later in
    the loop body, reaching the next pass) are not followed.
    """
    use = scope.sites[before] if before < len(scope.sites) else None
    use_frames = {id(f.node): f for f in use.frames} if use is not None else {}
    if candidates is None:
        candidates = [s for s in scope.assignments_to(name) if s.order < before and s.inline is inline]
    found: list[Site] = []
    branches: list[tuple[Site, tuple[Frame, ...]]] = []  # possible definitions with their own frames
    for site in reversed(candidates):
        if site.order >= before or site.inline is not inline or name not in site.targets:
            continue
        own = _own_frames(site, use_frames)
        if own is None:
            continue  # cannot reach the use
        if any(not site.inside(node) and _covers(node, branches) for node in _first_conditionals(branches)):
            return found, False  # an if/else that assigns on every branch lies between
        found.append(site)
        if not any(frame.kind in _CONDITIONAL for frame in own):
            return found, False
        branches.append((site, own))
    if any(_covers(node, branches) for node in _first_conditionals(branches)):
        return found, False
    return found, True


def home(scope: Scope, name: str, order: int, inline: Inline | None,
         carry: bool = False) -> tuple[str, Inline | None]:
    """The dotted name that ``name``, read at execution position ``order`` in the code of
    ``inline``, stands for in the outermost namespace it reaches, and that namespace (None: the
    scope's own code). A helper's parameter it has not rebound becomes its argument
    (``kept.append(loss)`` in ``step(loss, kept)`` called as ``step(loss, losses)`` appends to
    the caller's ``losses``), a closure's free name is the caller's; a local, or a parameter
    whose argument is no dotted name, stays in the helper's namespace. ``carry``: a parameter
    the helper rebinds and hands back to the same variable of the caller (:func:`carried`) is
    that variable too (the helper's ``step += 1`` advances the caller's ``step``)."""
    while inline is not None:
        root = _ROOT.split(name, 1)[0]
        if reaching_assignment(scope, root, order, None, inline) is not None:
            back = carried(scope, inline).get(root) if carry else None
            if back is None:
                break  # a local of the helper, or a parameter it rebinds
            name, inline = back + name[len(root):], inline.parent
            continue
        if root in inline.bindings:
            value = inline.bindings[root]
            argument = dotted(value) if value is not None else None
            if argument is None:
                break
            name = argument + name[len(root):]
        elif not inline.closure or root in inline._locals:
            break
        inline = inline.parent
    return name, inline


_ROOT = re.compile(r"[.\[]")


@dataclass(frozen=True)
class AssignedValue:
    """Where a name got its value (:func:`origin`): ``site`` the assignment, ``name`` the name it
    assigned there, ``value`` the expression that gives the value. ``argument``: the value is an
    expression a caller passed for a helper's parameter (``log_rate(x.numel(), t0)``), evaluated
    where ``site``, the caller's call, runs."""

    site: Site
    name: str
    value: cst.BaseExpression
    argument: bool = False


def origin(scope: Scope, name: str, order: int, inline: Inline | None,
           within: cst.CSTNode | None = None) -> AssignedValue | None:
    """Where ``name``, read at execution position ``order`` in the code of ``inline``, got its
    value (optionally only an assignment inside ``within``). Followed across calls (at most
    ``MAX_CHAIN`` hops): a helper's parameter it never rebinds is the caller's argument (a name
    is followed on, an expression is the origin), and a name unpacked from a call of an inlined
    helper is what every ``return`` gives at its position (``n, seen = micro(x, seen)`` with
    ``return size, seen``). None where no assignment reaches, or the returns disagree."""
    for _ in range(MAX_CHAIN):
        definition = reaching_assignment(scope, name, order, within, inline)
        if definition is None:
            outer = _outer_value(name, inline) if inline is not None else None
            if outer is None or inline is None:
                return None
            argument = dotted(outer[0]) if isinstance(outer[0], (cst.Name, cst.Attribute)) else None
            if argument is None:
                call = next((s for s in scope.sites if s.call is inline.call and s.inline is outer[1]), None)
                return AssignedValue(call, name, outer[0], argument=True) if call is not None else None
            name, inline = argument, outer[1]  # a parameter given a name: the caller's variable
            continue
        value = definition.value
        if value is None or isinstance(definition.node, (cst.For, cst.With)):
            return None
        position = definition.targets.index(name)
        count = len(definition.targets)
        returns = scope.returns_of(value) if definition.augmented is None and type(value) is cst.Call else []
        if not returns:
            element = definition.value_of(name)
            return AssignedValue(definition, name, element) if element is not None else None
        elements = [unpacked(r.value, position, count) for r in returns]
        spelled = {dotted(e) if e is not None else None for e in elements}
        if len(returns) > 1 and (len(spelled) != 1 or None in spelled):
            return None  # the returns give different values (or not all a name)
        returned, element = returns[0], elements[0]
        if element is None:
            return None
        if not isinstance(element, (cst.Name, cst.Attribute)):
            return AssignedValue(returned, name, element)
        name, order, inline = dotted(element) or "", returned.order, returned.inline
    return None


def counter_name(site: Site, name: str | None = None) -> tuple[str, Inline | None]:
    """The counter a site's target (``name``, else its single one) is, in the namespace it lives
    in: in an inlined helper, a caller's counter given as an argument or carried through the
    call and back (:func:`home`); None: the scope's own."""
    return home(site.scope, name or site.targets[0] or "", site.order + 1, site.inline, carry=True)


def carried(scope: Scope, inline: Inline) -> dict[str, str]:
    """The parameters of an inlined helper that carry a variable of the caller through the call,
    mapped to that variable: the caller assigns what the call returns back to the argument it
    passed (``step = advance(step)``; ``seen, t0 = micro(x, seen, t0)``, position by position)
    and every ``return`` of the helper gives that parameter back in that position."""
    assignment = next((s for s in scope.sites if s.value is inline.call and s.augmented is None
                       and s.inline is inline.parent), None)
    returns = scope.returns.get(id(inline), [])
    if assignment is None or not returns:
        return {}
    positions: list[set[str | None]] = [set() for _ in assignment.targets]
    for returned in returns:
        value = returned.value
        names = ([dotted(e.value) for e in value.elements] if isinstance(value, cst.Tuple)
                 else [dotted(value)] if value is not None else [])
        if len(names) != len(positions):
            return {}
        for position, name in zip(positions, names, strict=True):
            position.add(name)
    found: dict[str, str] = {}
    for target, names in zip(assignment.targets, positions, strict=True):
        name = next(iter(names)) if len(names) == 1 else None
        argument = inline.bindings.get(name) if name is not None else None
        if target is not None and argument is not None and dotted(argument) == target:
            found[name] = target  # type: ignore[index]
    return found


def _first_conditionals(branches: list[tuple[Site, tuple[Frame, ...]]]) -> list[cst.CSTNode]:
    """The outermost conditional construct around each possible definition (once each)."""
    nodes: dict[int, cst.CSTNode] = {}
    for _, frames in branches:
        first = next((frame.node for frame in frames if frame.kind in _CONDITIONAL), None)
        if first is not None:
            nodes.setdefault(id(first), first)
    return list(nodes.values())


def _own_frames(site: Site, use_frames: dict[int, Frame]) -> tuple[Frame, ...] | None:
    """The frames around a definition that do not also enclose the use (None: the definition
    sits where the use cannot follow from: the other arm of a shared ``if``, or the body of a
    ``continue`` guard the use comes after)."""
    own: list[Frame] = []
    for frame in site.frames:
        shared = use_frames.get(id(frame.node))
        if shared is None:
            own.append(frame)
        elif shared.kind is not frame.kind or shared.branch != frame.branch:
            return None
    return tuple(own)


def _covers(node: cst.CSTNode, branches: list[tuple[Site, tuple[Frame, ...]]],
            memo: dict[int, bool] | None = None) -> bool:
    """Whether an ``if`` with an ``else`` assigns on each of its branches: a definition in each
    arm that runs whenever the arm does (or an inner ``if`` that covers in turn, ``elif``).
    ``memo``: the answers for the ``if``s already asked about these ``branches`` (an ``elif``
    chain with many definitions asks of the same inner ``if`` once per definition inside it)."""
    if not isinstance(node, cst.If) or node.orelse is None:
        return False
    memo = {} if memo is None else memo
    if id(node) not in memo:
        memo[id(node)] = all(any(_settled(rest, branches, memo) for rest in _arm_rests(node, branch, branches))
                             for branch in ("body", "orelse"))
    return memo[id(node)]


def _arm_rests(node: cst.If, branch: str,
               branches: list[tuple[Site, tuple[Frame, ...]]]) -> Iterator[tuple[Frame, ...]]:
    """The frames inside ``node``'s arm ``branch`` around each definition there (once each)."""
    seen: set[tuple[int, ...]] = set()
    for _, frames in branches:
        for index, frame in enumerate(frames):
            if frame.node is node and frame.kind is FrameKind.IF and frame.branch == branch:
                rest = frames[index + 1:]
                key = tuple(id(f.node) for f in rest)
                if key not in seen:
                    seen.add(key)
                    yield rest


def _settled(frames: tuple[Frame, ...], branches: list[tuple[Site, tuple[Frame, ...]]],
             memo: dict[int, bool]) -> bool:
    conditional = [frame for frame in frames if frame.kind in _CONDITIONAL]
    return not conditional or _covers(conditional[0].node, branches, memo)


def arithmetic(expression: cst.BaseExpression) -> Iterator[cst.BinaryOperation]:
    """The binary operations of ``expression``'s arithmetic, not looking into call arguments
    (``model(x / 255)`` is not a loss normalization)."""
    stack: list[cst.CSTNode] = [expression]
    while stack:
        node = stack.pop()
        kind = type(node)  # exact types: isinstance on LibCST's (ABC) node classes is slow
        if kind is cst.BinaryOperation:
            yield node
            stack.extend((node.left, node.right))
        elif kind is cst.UnaryOperation:
            stack.append(node.expression)
        elif kind is cst.Call:
            if isinstance(node.func, cst.Attribute):
                stack.append(node.func.value)  # (loss / A).mean()
        elif kind is cst.Attribute or kind is cst.Subscript:
            stack.append(node.value)


def _divisions_in(expression: cst.BaseExpression) -> Iterator[tuple[cst.CSTNode, cst.BaseExpression]]:
    """(node, divisor) for every ``x / d`` and ``x * (1 / d)`` in the arithmetic of ``expression``;
    not the divisions inside a divisor (``loss / (n / A)`` multiplies by A). A sum of terms each
    divided (``sum((1 / A) * parts[k] * w[k] for k in parts)``) is divided too."""
    if type(expression) is cst.Call and type(expression.func) is cst.Name and expression.func.value == "sum" \
            and len(expression.args) == 1 and type(expression.args[0].value) in (cst.GeneratorExp, cst.ListComp):
        yield from _divisions_in(expression.args[0].value.elt)
        return
    in_divisor: set[int] = set()
    for node in arithmetic(expression):
        if id(node) in in_divisor:
            continue
        if isinstance(node.operator, cst.Divide):
            in_divisor.update(id(inner) for inner in arithmetic(node.right))
            yield node, node.right
        elif isinstance(node.operator, cst.Multiply):
            for side in (node.left, node.right):
                if isinstance(side, cst.BinaryOperation) and isinstance(side.operator, cst.Divide):
                    yield node, side.right


def names_feeding(expression: cst.BaseExpression) -> list[str]:
    """Dotted names whose value flows arithmetically into ``expression`` (same limits as above)."""
    names: list[str] = []
    stack: list[cst.CSTNode] = [expression]
    while stack:
        node = stack.pop()
        kind = type(node)  # exact types: isinstance on LibCST's (ABC) node classes is slow
        text = dotted(node) if kind is cst.Name or kind is cst.Attribute or kind is cst.Subscript else None
        if text is not None:
            names.append(text)
            if kind is cst.Attribute or kind is cst.Subscript:
                stack.append(node.value)
            continue
        if kind is cst.BinaryOperation:
            # the divisor is not part of the loss's value history
            stack.extend((node.left,) if isinstance(node.operator, cst.Divide) else (node.left, node.right))
        elif kind is cst.UnaryOperation:
            stack.append(node.expression)
        elif kind is cst.Call and isinstance(node.func, cst.Attribute):
            stack.append(node.func.value)
        elif kind is cst.Subscript or kind is cst.Attribute:
            stack.append(node.value)  # `targets[..., 1:]`, `f(x).loss`: the value sliced or read
        elif kind is cst.IfExp:
            stack.extend((node.body, node.orelse))  # `(loss, out) if return_outputs else loss`
        elif isinstance(node, cst.Tuple):
            stack.extend(element.value for element in node.elements)
    return names


def value_history(
    expression: cst.BaseExpression, site: Site,
) -> Iterator[tuple[cst.BaseExpression, cst.BaseAugOp | None, cst.CSTNode | None]]:
    """The expressions the value of ``expression`` (used at ``site``) was computed from, following
    assignments back through the scope (at most ``MAX_CHAIN`` deep): ``(expression, None, None)``
    for the expression itself and each reaching assignment's value; ``(operand, operator,
    statement)`` for an augmented assignment (``loss /= A`` → ``(A, DivideAssign, statement)``).

    Across calls: in an inlined helper a parameter's value is the caller's argument, a closure's
    free name the caller's; a call of a helper that was inlined here has the values its
    ``return`` statements give (in the helper's names)."""
    for value, operator, statement, _ in located_value_history(expression, site):
        yield value, operator, statement


def located_value_history(
    expression: cst.BaseExpression, site: Site,
) -> Iterator[tuple[cst.BaseExpression, cst.BaseAugOp | None, cst.CSTNode | None, Site]]:
    """:func:`value_history` with, for each expression, the site its names are read at (the
    helper's, for a value a helper returned: its parameters are then the caller's arguments)."""
    scope = site.scope
    seen: set[int] = set()
    work: list[tuple[cst.BaseExpression, int, Inline | None, int]] = [(expression, site.order, site.inline, 0)]
    while work:
        current, order, inline, depth = work.pop()
        at = site if order == site.order and inline is site.inline else replace(site, order=order,
                                                                                               inline=inline)
        yield current, None, None, at
        if depth >= MAX_CHAIN:
            continue
        if type(current) is cst.Call:
            for returned in scope.returns_of(current):
                if id(returned) not in seen and returned.value is not None:
                    seen.add(id(returned))
                    work.append((returned.value, returned.order, returned.inline, depth + 1))
        for name in names_feeding(current):
            definition = reaching_assignment(scope, name, order, None, inline)
            if definition is None and inline is not None:
                outer = _outer_value(name, inline)
                if outer is not None:
                    work.append((outer[0], order, outer[1], depth + 1))
                continue
            if definition is None or id(definition) in seen or definition.value is None:
                continue
            seen.add(id(definition))
            if definition.augmented is not None:
                yield definition.value, definition.augmented, definition.node, at
                previous = reaching_assignment(scope, name, definition.order, None, inline)
                if previous is not None and previous.value is not None and id(previous) not in seen:
                    seen.add(id(previous))
                    work.append((previous.value, previous.order, inline, depth + 1))
                continue
            if isinstance(definition.node, (cst.For, cst.With)):
                continue
            # (`ids, mask = b["ids"], b["mask"]`: the name's own element, not the whole tuple)
            value = definition.value_of(name) if len(definition.targets) > 1 else None
            work.append((definition.value if value is None else value, definition.order, inline, depth + 1))


def _outer_value(name: str, inline: Inline) -> tuple[cst.BaseExpression, Inline | None] | None:
    """A helper's parameter (its argument) or a closure's free name, read in the caller."""
    if "." in name or "[" in name:
        return None
    if name in inline.bindings:
        value = inline.bindings[name]
        return (value, inline.parent) if value is not None else None
    if inline.closure and name not in inline._locals:
        return cst.Name(name), inline.parent
    return None


def loss_divisions(
    expression: cst.BaseExpression | None, site: Site, is_divisor: Callable[[cst.BaseExpression], bool],
) -> list[cst.CSTNode]:
    """The statements or nodes where the value of ``expression`` (used at ``site``) was divided
    by a divisor that ``is_divisor`` accepts, following assignments back through the scope."""
    if expression is None:
        return []
    found: list[cst.CSTNode] = []
    for value, operator, statement in value_history(expression, site):
        if operator is None:
            found.extend(node for node, divisor in _divisions_in(value) if is_divisor(divisor))
        elif isinstance(operator, cst.DivideAssign) and is_divisor(value):
            found.append(statement)  # type: ignore[arg-type]
    return found
