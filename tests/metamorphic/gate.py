"""Gate respellings: the update gate written another way that selects the same microbatches.

Each starts from the canonical gate ``(X + 1) % A == 0`` (or ``!= 0``) on a counter ``X`` and
a divisor ``A`` that are names, attribute chains or integers (so repeating ``A`` is free of
side effects). For a counter ``X >= 0`` and ``A >= 1`` every respelling is true on exactly the
same values of ``X``. Beyond respelling the test: the gated update moved into a function whose
boolean parameter the caller computes, and a counter of the loop's own bumped in the body."""

from __future__ import annotations

from collections.abc import Mapping

import libcst as cst
from libcst.metadata import Assignment, BuiltinScope, ClassScope, FunctionScope, GlobalScope, Scope

from tests.metamorphic.base import (
    FreshNames,
    ReplaceNodes,
    backward_loops,
    block,
    body_statements,
    code,
    contains,
    enclosing_method,
    enumerate_loops,
    enumerate_target,
    imports_module,
    insert_import,
    metadata,
    module_binds,
    one_argument_call,
    own_control,
    parse,
    parsed_with_scopes,
    per_file,
    replace_nodes,
    stmt,
    transformation,
    walk,
)


def _pure(node: cst.BaseExpression) -> bool:
    """A name, an attribute chain on a name, or an integer: evaluating it twice is harmless."""
    if isinstance(node, (cst.Name, cst.Integer)):
        return True
    return isinstance(node, cst.Attribute) and _pure(node.value)


def canonical_gate(node: cst.CSTNode) -> tuple[cst.BaseExpression, cst.BaseExpression, bool] | None:
    """For ``(X + 1) % A == 0`` / ``!= 0``: (X, A, whether it is ``==``), else None."""
    if not (isinstance(node, cst.Comparison) and len(node.comparisons) == 1):
        return None
    target = node.comparisons[0]
    if not (
        isinstance(target.operator, (cst.Equal, cst.NotEqual))
        and isinstance(target.comparator, cst.Integer)
        and target.comparator.value == "0"
    ):
        return None
    mod = node.left
    if not (isinstance(mod, cst.BinaryOperation) and isinstance(mod.operator, cst.Modulo) and _pure(mod.right)):
        return None
    plus = mod.left
    if not (
        isinstance(plus, cst.BinaryOperation)
        and isinstance(plus.operator, cst.Add)
        and isinstance(plus.right, cst.Integer)
        and plus.right.value == "1"
        and _pure(plus.left)
        and not isinstance(plus.left, cst.Integer)
    ):
        return None
    return plus.left, mod.right, isinstance(target.operator, cst.Equal)


def _gates(module: cst.Module) -> list[cst.Comparison]:
    return [node for node in walk(module) if canonical_gate(node) is not None]  # type: ignore[misc]


def _respell(text: str, spell) -> str | None:
    module = parse(text)
    if module is None:
        return None
    replacements = {}
    for gate in _gates(module):
        counter, divisor, equal = canonical_gate(gate)  # type: ignore[misc]
        new = spell(code(counter), code(divisor), equal)
        if new is not None:
            expression = cst.parse_expression(new)
            replacements[id(gate)] = lambda updated, e=expression: e.with_changes(lpar=updated.lpar, rpar=updated.rpar)
    return replace_nodes(module, replacements)


@transformation("remainder_last", "gate")
@per_file
def remainder_last(text: str) -> str | None:
    """``(X + 1) % A == 0`` → ``X % A == A - 1`` (and ``!= 0`` → ``!= A - 1``): the same
    microbatches close a group. Applies to every canonical gate of a file."""
    return _respell(text, lambda x, a, equal: f"({x} % {a} {'==' if equal else '!='} {a} - 1)")


@transformation("not_remainder", "gate")
@per_file
def not_remainder(text: str) -> str | None:
    """``(X + 1) % A == 0`` → ``not (X + 1) % A``: the same truth value (a bool either way).
    Applies to every canonical ``== 0`` gate of a file."""
    return _respell(text, lambda x, a, equal: f"(not ({x} + 1) % {a})" if equal else None)


def _gated_ifs(module: cst.Module) -> list[cst.If]:
    """``if`` statements (not ``elif`` arms) whose test holds a canonical gate."""
    arms = {id(node.orelse) for node in walk(module) if isinstance(node, cst.If) and isinstance(node.orelse, cst.If)}
    return [
        node
        for node in walk(module)
        if isinstance(node, cst.If) and id(node) not in arms and any(canonical_gate(part) for part in walk(node.test))
    ]


@transformation("flag_first", "gate")
@per_file
def flag_first(text: str) -> str | None:
    """``if GATE_TEST: ...`` → ``is_update_N = GATE_TEST`` then ``if is_update_N: ...``: the
    test is evaluated once, at the same point. Applies to every ``if`` (not ``elif``) whose test
    holds a canonical gate."""
    module = parse(text)
    if module is None:
        return None
    fresh = FreshNames(text)
    replacements = {}
    for node in _gated_ifs(module):
        flag = fresh("is_update_")
        assign = stmt(f"{flag} = {code(node.test)}\n")
        replacements[id(node)] = lambda updated, a=assign, f=flag: cst.FlattenSentinel(
            [a, updated.with_changes(test=cst.Name(f))]
        )
    return replace_nodes(module, replacements)


@transformation("continue_early", "gate")
@per_file
def continue_early(text: str) -> str | None:
    """A loop body ending ``if GATE: UPDATE`` (no ``else``) → ``if not GATE: continue`` then
    ``UPDATE`` unindented: the update runs on the same iterations, nothing follows it. The
    canonical ``(X + 1) % A == 0`` becomes ``if (X + 1) % A: continue``. Applies where a loop
    body's last statement is such an ``if``."""
    module = parse(text)
    if module is None:
        return None
    replacements = {}
    for loop in walk(module):
        if not isinstance(loop, (cst.For, cst.While)) or not isinstance(loop.body, cst.IndentedBlock):
            continue
        last = loop.body.body[-1]
        if not (isinstance(last, cst.If) and last.orelse is None and any(canonical_gate(p) for p in walk(last.test))):
            continue
        gate = canonical_gate(last.test)
        if gate is not None and gate[2]:
            skip = f"if ({code(gate[0])} + 1) % {code(gate[1])}:\n    continue\n"
        else:
            skip = f"if not ({code(last.test)}):\n    continue\n"

        def rebuild(updated: cst.For | cst.While, skip: str = skip) -> cst.CSTNode:
            *before, gated = updated.body.body
            return updated.with_changes(
                body=updated.body.with_changes(body=[*before, stmt(skip), *body_statements(gated.body)])
            )

        replacements[id(loop)] = rebuild
    return replace_nodes(module, replacements)


@transformation("last_update", "gate")
@per_file
def last_update(text: str) -> str | None:
    """In ``for I, T in enumerate(X)``, ``if (I + 1) % A == 0: UPDATE`` → ``last_N = 0`` before
    the loop and ``if I + 1 - last_N >= A: last_N = I + 1; UPDATE``: a counter of the last
    update closes the same groups (it moves by exactly A each time). Applies to such an ``if``
    directly in the body of an ``enumerate`` loop (no ``start``) that runs a backward, whose
    counter is the loop's index."""
    module = parse(text)
    if module is None:
        return None
    fresh = FreshNames(text)
    replacements = {}
    for loop, index, _, _ in enumerate_loops(module):
        if not isinstance(loop.body, cst.IndentedBlock):
            continue
        gated = []
        for statement in loop.body.body:
            gate = canonical_gate(statement.test) if isinstance(statement, cst.If) else None
            if gate and gate[2] and isinstance(gate[0], cst.Name) and gate[0].value == index:
                gated.append((statement, code(gate[1])))
        if not gated:
            continue
        last = fresh("last_update_")
        for statement, divisor in gated:
            replacements[id(statement)] = lambda updated, d=divisor, i=index, n=last: updated.with_changes(
                test=cst.parse_expression(f"{i} + 1 - {n} >= {d}"),
                body=block([stmt(f"{n} = {i} + 1\n"), *body_statements(updated.body)]),
            )
        replacements[id(loop)] = lambda updated, n=last: cst.FlattenSentinel([stmt(f"{n} = 0\n"), updated])
    return replace_nodes(module, replacements)


# --------------------------------------------------------------------------- the gate as a parameter


def _outer_scopes(scope: Scope) -> list[Scope]:
    """``scope`` and the scopes its names can resolve to: its enclosing scopes up to the global one."""
    chain = []
    while scope is not None and not isinstance(scope, BuiltinScope):
        chain.append(scope)
        scope = scope.parent if scope.parent is not scope else None
    return chain


def _at(positions: Mapping, node: cst.CSTNode) -> tuple[int, int]:
    start = positions[node].start
    return start.line, start.column


def _moved_names(
    gated: cst.If, scope: Scope, scopes: Mapping, positions: Mapping
) -> tuple[list[str], list[str]] | None:
    """What the update of ``gated`` needs once it is a module-level function: the names it
    takes in (the enclosing function's values it reads or rebinds; at module level, the
    assigned variables) and those it gives back (rebound there and seen outside it), each in
    order of first use; None where one it takes in may be unbound at the ``if``, or it reads a
    class body's name."""
    inside = {id(n) for n in walk(gated.body)}
    start = _at(positions, gated)
    chain = _outer_scopes(scope)
    at_module = isinstance(scope, GlobalScope)
    taken: dict[str, tuple[int, int]] = {}
    given: set[str] = set()

    def plain(assignment: object) -> bool:
        return type(assignment) is Assignment and not isinstance(assignment.node, (cst.FunctionDef, cst.ClassDef))

    def bound_before(assignments: list) -> bool:
        return any(
            isinstance(a.node, cst.Param) or (id(a.node) not in inside and _at(positions, a.node) < start)
            for a in assignments
            if isinstance(a, Assignment)
        )

    augmented = {id(n.target) for n in walk(gated.body) if isinstance(n, cst.AugAssign)}  # `x += 1` reads x
    for node in walk(gated.body):
        if not isinstance(node, cst.Name) or scopes.get(node) is None:
            continue
        key = _at(positions, node)
        for access in scopes[node].accesses[node.value]:
            if access.node is not node:
                continue
            outside = [r for r in access.referents if isinstance(r, Assignment) and id(r.node) not in inside]
            if any(isinstance(r.scope, ClassScope) for r in outside):
                return None
            local = [r for r in outside if not isinstance(r.scope, GlobalScope)]
            if local or (at_module and outside and all(plain(r) for r in outside)):
                if not bound_before(outside):
                    return None
                taken.setdefault(node.value, key)
    for outer in chain:
        for assignment in outer.assignments:
            if id(assignment.node) not in inside:
                continue
            name = assignment.name
            others = list(outer.assignments[name])
            reads = [r.node for a in others for r in a.references]
            seen_outside = any(id(a.node) not in inside for a in others) or any(id(n) not in inside for n in reads)
            if not seen_outside and not any(id(a.node) in augmented for a in others):
                continue  # a temporary of the update: stays local to the function
            if not bound_before(others):
                return None
            taken.setdefault(name, _at(positions, assignment.node))
            given.add(name)
    order = sorted(taken, key=taken.__getitem__)
    return order, [name for name in order if name in given]


def _bound_to_place(body: cst.BaseSuite) -> bool:
    """Whether the body means something else in a module-level plain function: a private
    ``__name`` (mangled inside a class only) or an ``async for``/``async with`` (async only)."""
    return any(
        (isinstance(n, cst.Name) and n.value.startswith("__") and not n.value.endswith("__"))
        or (isinstance(n, (cst.For, cst.With, cst.CompFor)) and n.asynchronous is not None)
        for n in walk(body, into_scopes=False)
    )


@transformation("bool_parameter", "gate")
@per_file
def bool_parameter(text: str) -> str | None:
    """``if GATE_TEST: UPDATE`` → ``update_if_N(GATE_TEST, a, b)`` and, before the module-level
    statement that holds it, ``def update_if_N(is_update_M, a, b): if is_update_M: UPDATE``:
    the caller computes the boolean, the function updates only when it is true. The names
    ``a, b`` are the enclosing functions' values (at module level, the assigned variables) that
    UPDATE reads or rebinds; those it rebinds and that are seen outside it are returned and
    assigned back (``a, b = update_if_N(...)``), unchanged where the test is false. Applies to
    each outermost ``if`` (not ``elif``, no ``else``) whose test holds a canonical gate, in a
    function or at module level (not in a class body), whose UPDATE has no ``return``,
    ``yield``, ``await``, ``break``/``continue`` of the loop, ``global``, ``nonlocal``,
    ``super()``, private ``__name`` or ``async`` loop, where every name passed in is bound
    before the ``if``."""
    parsed = parsed_with_scopes(text)
    if parsed is None:
        return None
    module, scopes = parsed
    positions = metadata(module)[1]  # type: ignore[index]
    fresh = FreshNames(text)
    chosen: list[cst.If] = []
    helpers: dict[int, list[cst.FunctionDef]] = {}
    replacements = {}
    for gated in _gated_ifs(module):
        if gated.orelse is not None or any(contains(c, gated) for c in chosen):
            continue
        scope = scopes.get(gated)
        if (
            not isinstance(scope, (GlobalScope, FunctionScope))
            or own_control(gated.body)
            or _bound_to_place(gated.body)
        ):
            continue
        moved = _moved_names(gated, scope, scopes, positions)
        if moved is None:
            continue
        params, returns = moved
        name, flag = fresh("update_if_"), fresh("is_update_")
        template = stmt(f"def {name}({', '.join([flag, *params])}):\n    if {flag}:\n        pass\n")
        inner = template.body.body[0]
        inner = inner.with_changes(body=block(body_statements(gated.body)))
        tail = [stmt(f"return {', '.join(returns)}\n")] if returns else []
        helper = template.with_changes(
            body=template.body.with_changes(body=[inner, *tail]), leading_lines=[cst.EmptyLine(), cst.EmptyLine()]
        )
        top = next(s for s in module.body if contains(s, gated))
        helpers.setdefault(id(top), []).append(helper)
        call = f"{name}({', '.join([code(gated.test), *params])})"
        line = stmt(f"{', '.join(returns)} = {call}\n" if returns else f"{call}\n")
        header = gated.body.header if isinstance(gated.body, cst.IndentedBlock) else cst.TrailingWhitespace()
        replacements[id(gated)] = lambda updated, line=line, header=header: line.with_changes(
            leading_lines=updated.leading_lines, trailing_whitespace=header
        )
        chosen.append(gated)
    for top_id, defs in helpers.items():
        change = replacements.get(top_id)  # the `if` itself may be the module-level statement
        replacements[top_id] = lambda updated, defs=defs, change=change: _after_helpers(
            defs, change(updated) if change else updated
        )
    return replace_nodes(module, replacements)


def _after_helpers(helpers: list[cst.FunctionDef], top: cst.BaseStatement) -> cst.FlattenSentinel:
    """The module-level statement ``top`` with ``helpers`` before it, two blank lines apart."""
    lines = list(top.leading_lines)
    while lines and lines[0].comment is None:
        lines.pop(0)
    return cst.FlattenSentinel([*helpers, top.with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine(), *lines])])


# --------------------------------------------------------------------------- a counter of its own


def _zero_based_index(loop: cst.CSTNode, module: cst.Module) -> str | None:
    """The name of the loop's own 0-based, step-1 index: ``I`` of ``for I, T in enumerate(X)``
    (no ``start``) or of ``for I in range(N)`` (one argument, ``range`` not rebound)."""
    found = enumerate_target(loop)
    if found is not None:
        return found[0].value
    if not (isinstance(loop, cst.For) and loop.asynchronous is None and isinstance(loop.target, cst.Name)):
        return None
    call = loop.iter
    if (
        one_argument_call(call, "range")
        and not any(isinstance(n, cst.Name) and n.value == "range" for n in _stores(module))
    ):
        return loop.target.value
    return None


def _stores(node: cst.CSTNode) -> list[cst.CSTNode]:
    """The names and parameters bound under ``node`` (assignment, ``for`` and ``with`` targets,
    ``:=``, ``def``/``class``/``import`` names, parameters)."""
    found: list[cst.CSTNode] = []
    for n in walk(node):
        if isinstance(n, (cst.AssignTarget, cst.AnnAssign, cst.AugAssign, cst.NamedExpr, cst.For, cst.CompFor)):
            found.extend(walk(n.target))
        elif isinstance(n, cst.AsName):
            found.extend(walk(n.name))
        elif isinstance(n, cst.ImportAlias) and n.asname is None:
            found.append(n.name)
        elif isinstance(n, (cst.FunctionDef, cst.ClassDef, cst.Param)):
            found.append(n.name)
    return found


def _settable_self(module: cst.Module, loop: cst.CSTNode) -> bool:
    """Whether the loop lies directly in a method whose ``self`` takes a new attribute as written
    (its class has no ``__slots__``, ``__setattr__`` or decorator such as a frozen dataclass's,
    and the method never rebinds ``self``)."""
    found = enclosing_method(module, loop)
    if found is None:
        return False
    owner, method = found
    special = {"__slots__", "__setattr__"}
    return (
        not owner.decorators
        and not any(isinstance(n, cst.Name) and n.value in special for n in walk(owner))
        and not any(isinstance(n, cst.Name) and n.value == "self" for n in _stores(method.body))
    )


@transformation("counter_attribute", "gate")
@per_file
def counter_attribute(text: str) -> str | None:
    """In a loop over its 0-based index ``I`` (``enumerate`` without ``start``, or ``range(N)``),
    the gate ``(I + 1) % A == 0`` (or ``!= 0``) → ``C % A == 0`` on a counter attribute ``C``
    set to 0 right before the loop and bumped by 1 as the body's first statement, so that it is
    ``I + 1`` wherever the body tests it (a ``continue`` cannot skip the bump). In a method
    whose ``self`` can take a new attribute, ``C`` is ``self.microbatches_seen_N``; elsewhere
    (module level, plain functions: most of the catalogue) it is the attribute of a state object,
    ``state_N = types.SimpleNamespace(microbatches_seen=0)`` (``import types`` added where
    missing). Applies to gates directly in such a backward-running loop's body (not in a nested
    function), whose index the body never rebinds."""
    module = parse(text)
    if module is None:
        return None
    fresh = FreshNames(text)
    needs_types = False
    replacements = {}
    for loop in backward_loops(module):
        index = _zero_based_index(loop, module)
        if index is None or not isinstance(loop.body, cst.IndentedBlock):
            continue
        if any(isinstance(n, cst.Name) and n.value == index for n in _stores(loop.body)):
            continue
        gates = []
        for node in walk(loop.body, into_scopes=False):
            gate = canonical_gate(node)
            if gate is not None and isinstance(gate[0], cst.Name) and gate[0].value == index:
                gates.append((node, gate))
        if not gates:
            continue
        if _settable_self(module, loop):
            counter = f"self.{fresh('microbatches_seen_')}"
            setup = f"{counter} = 0\n"
        else:
            if module_binds(module, "types") and not imports_module(module, "types"):
                continue
            state = fresh("state_")
            counter, setup = f"{state}.microbatches_seen", f"{state} = types.SimpleNamespace(microbatches_seen=0)\n"
            needs_types = True
        for node, (_, divisor, equal) in gates:
            test = cst.parse_expression(f"({counter} % {code(divisor)} {'==' if equal else '!='} 0)")
            replacements[id(node)] = lambda updated, e=test: e.with_changes(lpar=updated.lpar, rpar=updated.rpar)

        def bump(updated: cst.For, setup: str = setup, counter: str = counter) -> cst.FlattenSentinel:
            body = updated.body.with_changes(body=[stmt(f"{counter} += 1\n"), *updated.body.body])
            return cst.FlattenSentinel(
                [
                    stmt(setup).with_changes(leading_lines=updated.leading_lines),
                    updated.with_changes(body=body, leading_lines=[]),
                ]
            )

        replacements[id(loop)] = bump
    if not replacements:
        return None
    moved = module.visit(ReplaceNodes(replacements))
    if needs_types and not imports_module(module, "types"):
        moved = insert_import(moved, "import types\n")
    return moved.code
