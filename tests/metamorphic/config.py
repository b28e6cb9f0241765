"""Where the run's sizes live: A (the accumulation count: a module constant ``NAME = 4`` that the
file uses as a gate's divisor ``... % NAME`` or passes as an accumulation keyword
``gradient_accumulation_steps=NAME``), m (the microbatch size: passed as ``batch_size=NAME``) and
D (the data-parallel replicas: passed as ``world_size=``/``num_replicas=NAME``), each moved into an
argparse default, a dataclass config, a dict config, a class attribute, or inlined as the literal.
Every read of a constant gets the same integer. Each applies to a one-file program with such a
constant, bound once at module level to an integer and never declared ``global``."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping

import libcst as cst
from libcst.metadata import Assignment, GlobalScope

from tests.metamorphic.base import (
    FreshNames,
    double_quoted_fstring_nodes,
    insert_import,
    module_binds,
    parsed_with_scopes,
    single_file,
    stmt,
    transformation,
    walk,
)

#: keywords that pass m (the microbatch size) or D (the data-parallel replicas) to a library call
_SIZE_KEYWORDS = frozenset({"batch_size", "world_size", "num_replicas"})


#: a constant: its name, its integer's source, its defining line, the Name nodes that read it
_Constant = tuple[str, str, cst.SimpleStatementLine, list[cst.Name]]


def _run_constants(module: cst.Module, scopes: Mapping) -> list[_Constant]:
    """Each of A, m and D held in a module constant, in order of first use; ``scopes`` are the
    module's."""
    used: list[str] = []
    for node in walk(module):
        if (
            isinstance(node, cst.BinaryOperation)
            and isinstance(node.operator, cst.Modulo)
            and isinstance(node.right, cst.Name)
        ):
            used.append(node.right.value)
        elif (
            isinstance(node, cst.Arg)
            and node.keyword is not None
            and ("accum" in node.keyword.value or node.keyword.value in _SIZE_KEYWORDS)
            and isinstance(node.value, cst.Name)
        ):
            used.append(node.value.value)
    global_scope = next((s for s in scopes.values() if isinstance(s, GlobalScope)), None)
    if global_scope is None:
        return []
    declared = {
        n.name.value for node in walk(module) if isinstance(node, (cst.Global, cst.Nonlocal)) for n in node.names
    }
    found = []
    for name in dict.fromkeys(used):
        if name in declared:
            continue
        bindings = list(global_scope.assignments[name])
        if len(bindings) != 1 or type(bindings[0]) is not Assignment:
            continue
        line = next(
            (
                s
                for s in module.body
                if isinstance(s, cst.SimpleStatementLine)
                and len(s.body) == 1
                and isinstance(s.body[0], cst.Assign)
                and len(s.body[0].targets) == 1
                and s.body[0].targets[0].target is bindings[0].node
            ),
            None,
        )
        if line is None or not isinstance(line.body[0].value, cst.Integer):
            continue
        reads = [access.node for access in bindings[0].references]
        if not reads or any(not isinstance(n, cst.Name) for n in reads):
            continue
        found.append((name, line.body[0].value.value, line, reads))
    return found


#: ``define(name, value, fresh)``: the statements that replace the constant's line, the expression
#: every read becomes, and the imports it needs
_Define = Callable[[str, str, FreshNames], tuple[list[str], str, list[str]]]


def _moving(define: _Define) -> Callable[[str], str | None]:
    """The edit that moves the A, m and D constants as ``define`` says (its name and docstring)."""

    @functools.wraps(define)
    def edit(text: str) -> str | None:
        return _move(text, define)

    return edit


def _move(text: str, define: _Define) -> str | None:
    """``text`` with its A, m and D constants moved as ``define`` says, or None where it has none."""
    parsed = parsed_with_scopes(text)
    if parsed is None:
        return None
    module, scopes = parsed
    constants = _run_constants(module, scopes)
    if not constants:
        return None
    fresh = FreshNames(text)
    expressions: dict[int, str] = {}  # id of a read → the expression it becomes
    definitions: dict[int, list[str]] = {}  # id of a constant's line → the statements replacing it
    imports: list[str] = []
    for name, value, line, reads in constants:
        statements, expression, needed = define(name, value, fresh)
        definitions[id(line)] = statements
        expressions.update((id(n), expression) for n in reads)
        imports += [i for i in needed if i not in text and i not in imports]  # already imported as written
    if any(module_binds(module, line.split()[-1]) for line in imports):
        return None  # the name an import would bind is taken
    in_double = double_quoted_fstring_nodes(module)

    class Move(cst.CSTTransformer):
        def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
            expression = expressions.get(id(original_node))
            if expression is None:
                return updated_node
            quoted = expression.replace('"', "'") if id(original_node) in in_double else expression
            return cst.parse_expression(quoted)

        def leave_SimpleStatementLine(
            self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
        ):  # type: ignore[no-untyped-def]
            statements = definitions.get(id(original_node))
            if statements is None:
                return updated_node
            new = [stmt(s) for s in statements]
            if not new:
                return cst.RemoveFromParent()
            new[0] = new[0].with_changes(leading_lines=original_node.leading_lines)
            return cst.FlattenSentinel(new)

    moved = module.visit(Move())
    for imported in imports:
        moved = insert_import(moved, imported + "\n")
    return moved.code


@transformation("argparse", "config")
@single_file
@_moving
def to_argparse(name: str, value: str, fresh: FreshNames) -> tuple[list[str], str, list[str]]:
    """``NAME = 4`` → an ``argparse`` option ``--name`` with ``default=4`` parsed at import time
    (``parse_known_args``: the script's own options pass), every read → ``args.name``."""
    parser, args = fresh("parser_"), fresh("args_")
    option = name.lower()
    return (
        [
            f"{parser} = argparse.ArgumentParser()\n",
            f'{parser}.add_argument("--{option.replace("_", "-")}", type=int, default={value})\n',
            f"{args} = {parser}.parse_known_args()[0]\n",
        ],
        f"{args}.{option}",
        ["import argparse"],
    )


@transformation("dataclass", "config")
@single_file
@_moving
def to_dataclass(name: str, value: str, fresh: FreshNames) -> tuple[list[str], str, list[str]]:
    """``NAME = 4`` → a field ``name: int = 4`` of a ``@dataclass`` config, one instance at module
    level, every read → ``config.name``."""
    cls, instance = fresh("TrainConfig"), fresh("config_")
    return (
        [f"@dataclass\nclass {cls}:\n    {name.lower()}: int = {value}\n", f"{instance} = {cls}()\n"],
        f"{instance}.{name.lower()}",
        ["from dataclasses import dataclass"],
    )


@transformation("dict", "config")
@single_file
@_moving
def to_dict(name: str, value: str, fresh: FreshNames) -> tuple[list[str], str, list[str]]:
    """``NAME = 4`` → ``config = {"name": 4}``, every read → ``config["name"]``."""
    instance = fresh("config_")
    return [f'{instance} = {{"{name.lower()}": {value}}}\n'], f'{instance}["{name.lower()}"]', []


@transformation("inline", "config")
@single_file
@_moving
def inline(name: str, value: str, fresh: FreshNames) -> tuple[list[str], str, list[str]]:
    """``NAME = 4`` removed, every read → ``4``: the literal in place of the constant."""
    return [], value, []


@transformation("attribute", "config")
@single_file
@_moving
def to_class_attribute(name: str, value: str, fresh: FreshNames) -> tuple[list[str], str, list[str]]:
    """``NAME = 4`` → a class attribute ``name = 4`` of a plain settings class (never
    instantiated), every read → ``TrainSettings_N.name``."""
    cls = fresh("TrainSettings_")
    return [f"class {cls}:\n    {name.lower()} = {value}\n"], f"{cls}.{name.lower()}", []
