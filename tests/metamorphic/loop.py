"""Loop forms: the microbatch loop written another way that visits the same microbatches with
the same index values in its body. They apply to the loops that run a backward directly."""

from __future__ import annotations

import libcst as cst

from tests.metamorphic.base import (
    FreshNames,
    backward_loops,
    code,
    enumerate_loops,
    insert_import,
    module_binds,
    parse,
    per_file,
    replace_nodes,
    stmt,
    transformation,
    walk,
)


def _stores(node: cst.CSTNode, name: str) -> bool:
    """Whether ``name`` is assigned anywhere under ``node`` (any target form)."""
    for part in walk(node):
        targets: list[cst.CSTNode] = []
        if isinstance(part, cst.Assign):
            targets = [t.target for t in part.targets]
        elif isinstance(part, (cst.AugAssign, cst.AnnAssign)):
            targets = [part.target]
        elif isinstance(part, (cst.For, cst.CompFor)):
            targets = [part.target]
        elif isinstance(part, cst.NamedExpr):
            targets = [part.target]
        elif isinstance(part, cst.WithItem) and part.asname is not None:
            targets = [part.asname.name]
        elif isinstance(part, (cst.Global, cst.Nonlocal)):
            return any(n.name.value == name for n in part.names)
        if any(isinstance(n, cst.Name) and n.value == name for t in targets for n in walk(t)):
            return True
    return False


@transformation("manual_counter", "loop")
@per_file
def manual_counter(text: str) -> str | None:
    """``for I, T in enumerate(X): BODY`` → ``I = -1`` before ``for T in X:`` whose body starts
    with ``I += 1``: the body sees the same index (a ``continue`` cannot skip the count).
    Applies to every ``enumerate`` loop (no ``start``) that runs a backward directly and does
    not assign its index in the body."""
    module = parse(text)
    if module is None:
        return None
    replacements = {}
    for loop, index, target, call in enumerate_loops(module):
        if loop.orelse is not None or _stores(loop.body, index):
            continue
        # the item target of `I, T` is never a bare tuple (a nested one has parentheses)
        replacements[id(loop)] = lambda updated, i=index, t=target, x=call.args[0].value: cst.FlattenSentinel(
            [
                stmt(f"{i} = -1\n"),
                updated.with_changes(
                    target=t, iter=x, body=updated.body.with_changes(body=[stmt(f"{i} += 1\n"), *updated.body.body])
                ),
            ]
        )
    return replace_nodes(module, replacements)


@transformation("while_next", "loop")
@per_file
def while_next(text: str) -> str | None:
    """``for T in X: BODY`` → ``it = iter(X)`` and ``while True: try: T = next(it) except
    StopIteration: break`` then BODY: the same items in the same order (a ``continue`` fetches
    the next one). Applies to every ``for`` loop without ``else`` that runs a backward
    directly."""
    module = parse(text)
    if module is None:
        return None
    fresh = FreshNames(text)
    replacements = {}
    for loop in backward_loops(module):
        if not isinstance(loop, cst.For) or loop.asynchronous is not None or loop.orelse is not None:
            continue
        if not isinstance(loop.body, cst.IndentedBlock):
            continue
        it = fresh("batch_iter_")
        source, target = code(loop.iter), code(loop.target)

        def rebuild(updated: cst.For, it: str = it, source: str = source, target: str = target) -> cst.FlattenSentinel:
            fetch = stmt(f"try:\n    {target} = next({it})\nexcept StopIteration:\n    break\n")
            head = stmt("while True:\n    pass\n")
            return cst.FlattenSentinel(
                [
                    stmt(f"{it} = iter({source})\n"),
                    head.with_changes(
                        body=updated.body.with_changes(body=[fetch, *updated.body.body]),
                        leading_lines=updated.leading_lines,
                    ),
                ]
            )

        replacements[id(loop)] = rebuild
    return replace_nodes(module, replacements)


def _shift_index(body: cst.BaseSuite, index: str) -> cst.BaseSuite:
    """``body`` with ``index + 1`` as ``index`` and every other read of ``index`` as
    ``(index - 1)`` (attribute names are not reads)."""

    class Shift(cst.CSTTransformer):
        def leave_BinaryOperation(
            self, original_node: cst.BinaryOperation, updated_node: cst.BinaryOperation
        ) -> cst.BaseExpression:
            left = original_node.left
            if (
                isinstance(left, cst.Name)
                and left.value == index
                and isinstance(original_node.operator, cst.Add)
                and isinstance(original_node.right, cst.Integer)
                and original_node.right.value == "1"
            ):
                return cst.Name(index)
            return updated_node

        def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
            return cst.parse_expression(f"({index} - 1)") if original_node.value == index else updated_node

        def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> cst.Attribute:
            return updated_node.with_changes(attr=original_node.attr)

    return body.visit(Shift())


@transformation("enumerate_start1", "loop")
@per_file
def enumerate_start1(text: str) -> str | None:
    """``for I, T in enumerate(X)`` → ``enumerate(X, start=1)`` with the body's reads of ``I``
    shifted by one (``I + 1`` → ``I``, any other ``I`` → ``(I - 1)``): the gate
    ``(I + 1) % A == 0`` becomes ``I % A == 0`` on the same microbatches. Applies to every
    ``enumerate`` loop (no ``start``) that runs a backward directly, whose index is neither
    assigned in the body, nor used as a keyword name, nor read outside the loop."""
    module = parse(text)
    if module is None:
        return None
    replacements = {}
    for loop, index, _, _ in enumerate_loops(module):
        if loop.orelse is not None:
            continue
        if _stores(loop.body, index) or any(
            isinstance(n, cst.Arg) and n.keyword is not None and n.keyword.value == index for n in walk(loop.body)
        ):
            continue
        reads_inside = sum(isinstance(n, cst.Name) and n.value == index for n in walk(loop))
        if reads_inside != sum(isinstance(n, cst.Name) and n.value == index for n in walk(module)):
            continue  # the index is read after the loop (or the name has another use): it would differ by one

        def rebuild(updated: cst.For, index: str = index) -> cst.For:
            call = updated.iter
            args = [
                call.args[0].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
                cst.Arg(
                    cst.Integer("1"),
                    keyword=cst.Name("start"),
                    equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
                ),
            ]
            return updated.with_changes(iter=call.with_changes(args=args), body=_shift_index(updated.body, index))

        replacements[id(loop)] = rebuild
    return replace_nodes(module, replacements)


@transformation("tqdm", "loop")
@per_file
def tqdm_wrap(text: str) -> str | None:
    """``for I, T in enumerate(X)`` → ``for I, T in tqdm(enumerate(X))`` (``from tqdm import
    tqdm`` added): a progress bar yields the same items. Applies to every ``enumerate`` loop that
    runs a backward directly, in a file where the name ``tqdm`` is free."""
    module = parse(text)
    if module is None or module_binds(module, "tqdm"):
        return None
    replacements = {}
    for loop, _, _, _ in enumerate_loops(module):
        replacements[id(loop)] = lambda updated: updated.with_changes(
            iter=cst.Call(cst.Name("tqdm"), [cst.Arg(updated.iter)])
        )
    new = replace_nodes(module, replacements)
    return insert_import(cst.parse_module(new), "from tqdm import tqdm\n").code if new else None
