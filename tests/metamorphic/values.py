"""Values (issue 31): where the loss is computed. The expression assigned to the name that a
backward of the microbatch loop takes (``loss = crit(model(x), y) / accum`` before
``loss.backward()``) moves into a function, of the same module or of ``losses.py`` beside the
script, called in its place with the names it reads. The same expression runs on the same values
at the same point, so the loss, its normalisation and what it keeps alive are unchanged.

Applies to the first such assignment (a plain ``NAME = EXPR`` in the loop's body, at any depth
but not in a nested function) whose expression calls something and holds no lambda,
comprehension, assignment expression, ``await``, ``yield`` or ``super()`` (whose meaning
depends on where they are written), and where every name it reads is bound: a local or
enclosing function's name is passed in; a module-level name is read from the module (the same
module), or passed in (``losses.py``, except the imports, which that module repeats)."""

from __future__ import annotations

import builtins

import libcst as cst
from libcst.metadata import GlobalScope

from tests.metamorphic.base import (
    FreshNames,
    Program,
    backward_loops,
    contains,
    innermost,
    insert_import,
    metadata,
    parse,
    replace_nodes,
    transformation,
    walk,
)
from tests.metamorphic.extract import _top_imports

#: nodes whose meaning depends on where they are written, or that bind names of their own
_LOCAL_MEANING = (cst.Lambda, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp, cst.NamedExpr,
                  cst.Await, cst.Yield)
_BUILTINS = frozenset(dir(builtins))


def _taken_names(loop: cst.CSTNode) -> set[str]:
    """The names the loop's backwards take: ``loss`` of ``loss.backward()``,
    ``scaler.scale(loss).backward()`` and ``accelerator.backward(loss)``."""
    names: set[str] = set()
    for node in walk(loop, into_scopes=False):
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "backward":
            for part in (node.func.value, *(arg.value for arg in node.args)):
                while isinstance(part, cst.Call) and part.args:  # `scaler.scale(loss)`
                    part = part.args[0].value
                if isinstance(part, cst.Name):
                    names.add(part.value)
    return names


def _loss_assignment(module: cst.Module) -> tuple[cst.CSTNode, cst.Assign] | None:
    """The first innermost backward loop and its first assignment to a name its backwards take."""
    loops = innermost(backward_loops(module))
    if not loops:
        return None
    loop = loops[0]
    taken = _taken_names(loop)
    for node in walk(loop, into_scopes=False):
        if isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name) \
                and node.targets[0].target.value in taken:
            value = node.value
            inside = list(walk(value))
            if not any(isinstance(n, cst.Call) for n in inside) or any(isinstance(n, _LOCAL_MEANING) for n in inside) \
                    or any(isinstance(n, cst.Name) and n.value == "super" for n in inside):
                return None
            return loop, node
    return None


def _reads(value: cst.BaseExpression) -> list[cst.Name]:
    """The names ``value`` reads, in order (not an attribute's name or a keyword's)."""
    skipped = {id(n.attr) for n in walk(value) if isinstance(n, cst.Attribute)}
    skipped |= {id(n.keyword) for n in walk(value) if isinstance(n, cst.Arg) and n.keyword is not None}
    return [n for n in walk(value) if isinstance(n, cst.Name) and id(n) not in skipped]


def _split_reads(module: cst.Module, value: cst.BaseExpression) -> tuple[list[str], list[str]] | None:
    """The names ``value`` reads: (those bound in a function, those bound at module level), each
    in order of first read; builtins are neither. None where a name is bound nowhere."""
    resolved = metadata(module)
    if resolved is None:
        return None
    scopes = resolved[0]
    local: list[str] = []
    module_level: list[str] = []
    for name in _reads(value):
        if name.value in ("True", "False", "None"):
            continue
        scope = scopes.get(name)
        if scope is None:
            return None
        assignments = list(scope[name.value]) if name.value in scope else []  # (visible from there)
        if not assignments:
            if name.value in _BUILTINS:
                continue
            return None
        into = module_level if all(isinstance(a.scope, GlobalScope) for a in assignments) else local
        if name.value not in local and name.value not in module_level:
            into.append(name.value)
    return local, module_level


def _loss_site(program: Program) -> tuple[cst.Module, cst.CSTNode, cst.Assign, list[str], list[str]] | None:
    """For a one-file program: its tree, the loop, the loss's assignment (:func:`_loss_assignment`)
    and the names its expression reads (:func:`_split_reads`), or None where it does not apply."""
    module = parse(program.text) if program.is_single else None
    found = None if module is None else _loss_assignment(module)
    if module is None or found is None:
        return None
    split = _split_reads(module, found[1].value)
    return None if split is None else (module, found[0], found[1], *split)


def _helper(name: str, params: list[str], value: cst.BaseExpression) -> cst.FunctionDef:
    return cst.FunctionDef(
        name=cst.Name(name),
        params=cst.Parameters(params=[cst.Param(cst.Name(p)) for p in params]),
        body=cst.IndentedBlock(body=[cst.SimpleStatementLine(body=[cst.Return(value=value)])]),
        leading_lines=[cst.EmptyLine(), cst.EmptyLine()],
    )


def _with_call(module: cst.Module, assignment: cst.Assign, callee: str, params: list[str]) -> cst.Module:
    call = cst.parse_expression(f"{callee}({', '.join(params)})")
    text = replace_nodes(module, {id(assignment): lambda updated: updated.with_changes(value=call)})
    return cst.parse_module(text)  # type: ignore[arg-type]


@transformation("loss_helper", "values")
def loss_helper(program: Program) -> Program | None:
    """The loss's expression → a module-level function of the same file, defined before the
    top-level statement that holds the loop and called in the expression's place with the
    function-level names it reads (see the module's docstring)."""
    site = _loss_site(program)
    if site is None:
        return None
    module, loop, assignment, params, _ = site
    name = FreshNames(program.text)("compute_loss_")
    changed = _with_call(module, assignment, name, params)
    # (the statement that holds the loop keeps its index: the call changed nothing above it)
    index = next(i for i, statement in enumerate(module.body) if contains(statement, loop))  # type: ignore[union-attr]
    body = list(changed.body)
    body.insert(index, _helper(name, params, assignment.value))
    return program.replace({program.main: changed.with_changes(body=body).code})


@transformation("loss_module", "values")
def loss_module(program: Program) -> Program | None:
    """The loss's expression → a function of ``losses.py`` beside the script (``from losses
    import f``), which repeats the script's imports; the script's other module-level names the
    expression reads are passed in with its function-level ones."""
    site = None if "losses" in FreshNames(program.text).taken else _loss_site(program)
    if site is None:
        return None
    module, _, assignment, local, module_level = site
    imports, imported = _top_imports(module)
    params = [*local, *(n for n in module_level if n not in imported)]
    name = FreshNames(program.text)("compute_loss_")
    changed = insert_import(_with_call(module, assignment, name, params), f"from losses import {name}\n")
    helper_text = cst.Module(body=[*imports, _helper(name, params, assignment.value)]).code
    return program.replace({program.main: changed.code, "losses.py": helper_text})
