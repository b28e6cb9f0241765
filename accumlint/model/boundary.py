"""Boundary tests: the conditions that decide on which microbatch the optimizer update runs.

Recognized forms: a modulo on the microbatch index or a counter (``(i + 1) % A == 0``,
``i % A``, ``not i % A``, ``i % A == A - 1``), with or without a tail clause
(``or i + 1 == len(loader)``); flags computed from one (``is_last = …``; ``if is_last:``);
framework flags (Accelerate ``sync_gradients``, DeepSpeed
``is_gradient_accumulation_boundary()``); counters compared with A (``count == A``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace

import libcst as cst

from accumlint import frameworks as fw
from accumlint.model import conventions
from accumlint.model.names import children, dotted, int_value, method_name, names_in

_TAIL_NAME = re.compile(r"(last|end|final|len|total|num_batch|n_batch|steps_per_epoch|max_|remain)", re.I)


@dataclass(frozen=True)
class BoundaryTest:
    """A recognized boundary test.

    ``kind``: ``"modulo"``, ``"framework"`` or ``"counter"``. ``polarity``: True when the
    test is true on the microbatch the modulo selects (remainder equals ``residue``) or on
    the framework's boundary; False when it is true on the *other* microbatches (``i % A``,
    ``i % A != 0``, ``not accelerator.sync_gradients``). ``residue``: 0 for ``== 0``, -1 for
    ``== A - 1``. ``extra``: joined with other conditions by ``and``/``or`` that are not a
    tail clause. ``report``: the node to point at (the modulo, or the flag's assignment).
    """

    kind: str
    polarity: bool
    dividend: cst.BaseExpression | None = None
    divisor: cst.BaseExpression | None = None
    residue: int | None = 0
    tail: bool = False
    extra: bool = False
    report: cst.CSTNode | None = None
    flag: str | None = None  # the flag variable the test went through, if any
    samples: bool = False  # a counter of samples compared with the group's size in samples


#: Resolves a flag name to the expression last assigned to it inside the loop (or None).
FlagResolver = Callable[[str], "tuple[cst.BaseExpression, cst.CSTNode] | None"]


def analyze(test: cst.BaseExpression, resolve_flag: FlagResolver, depth: int = 0) -> BoundaryTest | None:
    """The boundary test ``test`` expresses, or ``None`` when it is not one we recognize."""
    if depth > 4:
        return None
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        inner = analyze(test.expression, resolve_flag, depth + 1)
        return replace(inner, polarity=not inner.polarity) if inner else None
    if isinstance(test, cst.IfExp):
        # `True if i % A == 0 else False` (and the reverse) is the condition itself
        arms = (_bool_literal(test.body), _bool_literal(test.orelse))
        if arms not in ((True, False), (False, True)):
            return None
        inner = analyze(test.test, resolve_flag, depth + 1)
        return replace(inner, polarity=inner.polarity == arms[0]) if inner else None
    if isinstance(test, cst.BooleanOperation):
        left = analyze(test.left, resolve_flag, depth + 1)
        right = analyze(test.right, resolve_flag, depth + 1)
        main, other = (left, test.right) if left is not None else (right, test.left)
        if main is None or (left is not None and right is not None):
            return None
        if isinstance(test.operator, cst.Or) and _is_tail_clause(other):
            return replace(main, tail=True)
        return replace(main, extra=True)
    if isinstance(test, (cst.Name, cst.Attribute, cst.Subscript)):
        text = dotted(test) or ""
        if isinstance(test, cst.Attribute) and test.attr.value in fw.accelerate.BOUNDARY_ATTRS:
            return BoundaryTest("framework", True, report=test)
        resolved = resolve_flag(text) if text else None
        if resolved is not None:
            value, where = resolved
            inner = analyze(value, resolve_flag, depth + 1)
            if inner is None:
                return None
            return replace(inner, report=where if inner.kind == "modulo" else inner.report, flag=text)
        return None
    if isinstance(test, cst.Call):
        if method_name(test) in fw.deepspeed.BOUNDARY_CALLS:
            return BoundaryTest("framework", True, report=test)
        return None
    if isinstance(test, cst.BinaryOperation) and isinstance(test.operator, cst.Modulo):
        return BoundaryTest("modulo", False, test.left, test.right, 0, report=test)
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        found = _comparison(test)
        return found if found is not None else _wrapped_counter(test, resolve_flag)
    return None


def _wrapped_counter(test: cst.Comparison, resolve_flag: FlagResolver) -> BoundaryTest | None:
    """``acc == 0`` on a counter the loop wraps itself (``acc += 1; acc = acc % A``): the
    comparison of the modulo it was last assigned (lingua's ``train_state.acc_step``)."""
    target = test.comparisons[0]
    for side, other in ((test.left, target.comparator), (target.comparator, test.left)):
        if not isinstance(side, (cst.Name, cst.Attribute)) or int_value(other) is None:
            continue
        text = dotted(side) or ""
        resolved = resolve_flag(text) if text else None
        if resolved is None or not _is_modulo(resolved[0]):
            continue
        value, where = resolved
        rewritten = test.with_changes(left=value) if side is test.left else test.with_changes(
            comparisons=[target.with_changes(comparator=value)])
        found = _comparison(rewritten)
        return replace(found, report=where, flag=text) if found is not None else None
    return None


def _bool_literal(node: cst.BaseExpression) -> bool | None:
    if isinstance(node, cst.Name) and node.value in ("True", "False"):
        return node.value == "True"
    return None


def _comparison(test: cst.Comparison) -> BoundaryTest | None:
    target = test.comparisons[0]
    operator, left, right = target.operator, test.left, target.comparator
    if _is_modulo(right) and not _is_modulo(left):
        left, right = right, left
    if _is_modulo(left):
        assert isinstance(left, cst.BinaryOperation)
        residue = _residue(right, left.right)
        if residue is None:
            return None
        if isinstance(operator, cst.Equal):
            return BoundaryTest("modulo", True, left.left, left.right, residue, report=left)
        if isinstance(operator, cst.NotEqual):
            return BoundaryTest("modulo", False, left.left, left.right, residue, report=left)
        if isinstance(operator, cst.GreaterThan) and residue == 0:
            return BoundaryTest("modulo", False, left.left, left.right, 0, report=left)
        return None
    if isinstance(operator, (cst.Equal, cst.GreaterThanEqual, cst.GreaterThan)):
        names = [dotted(side) or "" for side in (left, right)]
        if any(conventions.ACCUMULATION_NAME.search(name) for name in names):
            return BoundaryTest("counter", True, left, right, None, report=test)
        if isinstance(operator, cst.GreaterThanEqual) and _sample_gate(*names):
            return BoundaryTest("counter", True, left, right, None, report=test, samples=True)
    return None


def _sample_gate(counter: str, target: str) -> bool:
    """``seen >= global_batch_size``: a count of samples compared with the group's size in samples."""
    tail = target.rpartition(".")[2]
    return bool(conventions.SAMPLE_COUNT_NAME.match(counter.rpartition(".")[2]) and (
        conventions.SAMPLE_TARGET_NAME.match(tail) or conventions.GLOBAL_BATCH_NAME.match(tail)))


def _is_modulo(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Modulo)


def _residue(value: cst.BaseExpression, divisor: cst.BaseExpression) -> int | None:
    literal = int_value(value)
    if literal == 0:
        return 0
    if (
        isinstance(value, cst.BinaryOperation)
        and isinstance(value.operator, cst.Subtract)
        and int_value(value.right) == 1
        and dotted(value.left) is not None
        and dotted(value.left) == dotted(divisor)
    ):
        return -1
    return None


def _is_tail_clause(node: cst.BaseExpression) -> bool:
    for name in names_in(node):
        if _TAIL_NAME.search(name):
            return True
    stack: list[cst.CSTNode] = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Call) and dotted(current.func) == "len":
            return True
        stack.extend(children(current))
    return False


def index_offset(dividend: cst.BaseExpression | None) -> tuple[str, int] | None:
    """Split a dividend into (index name, constant offset): ``i + 1`` → ``("i", 1)``."""
    if dividend is None:
        return None
    name = dotted(dividend)
    if name is not None:
        return name, 0
    if isinstance(dividend, cst.BinaryOperation) and isinstance(dividend.operator, (cst.Add, cst.Subtract)):
        left_name, right_value = dotted(dividend.left), int_value(dividend.right)
        if left_name is not None and right_value is not None:
            return left_name, right_value if isinstance(dividend.operator, cst.Add) else -right_value
        right_name, left_value = dotted(dividend.right), int_value(dividend.left)
        if right_name is not None and left_value is not None and isinstance(dividend.operator, cst.Add):
            return right_name, left_value
    return None


def first_value(
    dividend: cst.BaseExpression | None, loop: cst.For | cst.While, sites: list, test_order: int
) -> int | None:
    """The value the dividend of a modulo takes on the loop's first microbatch, when the code shows it.

    Handles the index of ``enumerate(it, start=s)`` / ``range(a, …)`` driving ``loop``, and
    counters set to an integer before the loop and incremented by 1 inside it (before the
    test: first value init + 1; after it: init). ``None`` when undecidable.
    """
    split = index_offset(dividend)
    if split is None:
        return None
    name, offset = split
    counters = sites[0].scope.counter_starts if sites else {}
    if name in counters and isinstance(loop, cst.FunctionDef):  # a framework-owned loop's counter
        return counters[name] + offset
    if isinstance(loop, cst.For):
        start = _loop_index_start(loop, name)
        if start is not None:
            return start + offset
    increments = [s for s in sites if s.inside(loop) and not s.in_helper and name in s.targets]
    if len(increments) != 1 or not isinstance(increments[0].augmented, cst.AddAssign):
        return None
    if int_value(increments[0].value) != 1:
        return None
    start_order = min(s.order for s in sites if s.inside(loop))
    inits = [s for s in sites if s.targets == (name,) and s.augmented is None and not s.inside(loop)
             and s.order < start_order and not s.in_helper]
    if not inits:
        return None
    init = int_value(inits[-1].value)
    if init is None:
        return None
    before_test = increments[0].order < test_order
    return init + (1 if before_test else 0) + offset


def _loop_index_start(loop: cst.For, name: str) -> int | None:
    iterator = loop.iter
    if not isinstance(iterator, cst.Call):
        return None
    callee = dotted(iterator.func)
    target = loop.target
    if callee == "enumerate" and isinstance(target, (cst.Tuple, cst.List)) and target.elements:
        if dotted(target.elements[0].value) != name:
            return None
        start = iterator.args[1].value if len(iterator.args) > 1 and iterator.args[1].keyword is None else None
        for arg in iterator.args:
            if arg.keyword is not None and arg.keyword.value == "start":
                start = arg.value
        return 0 if start is None else int_value(start)
    if callee == "range" and dotted(target) == name:
        if len(iterator.args) == 1:
            return 0
        return int_value(iterator.args[0].value)
    return None
