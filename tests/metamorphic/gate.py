"""Gate respellings: the update gate written another way that selects the same microbatches.

Each starts from the canonical gate ``(X + 1) % A == 0`` (or ``!= 0``) on a counter ``X`` and
a divisor ``A`` that are names, attribute chains or integers (so repeating ``A`` is free of
side effects). For a counter ``X >= 0`` and ``A >= 1`` every respelling is true on exactly the
same values of ``X``."""

from __future__ import annotations

import libcst as cst

from tests.metamorphic.base import (
    FreshNames,
    block,
    body_statements,
    code,
    enumerate_loops,
    parse,
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
