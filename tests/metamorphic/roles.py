"""Roles held differently: the optimizer (recognised by its construction, ``torch.optim.AdamW(...)``
and the like) kept in a dict, or built and prepared in an ``if/else`` whose arms are the same.
The objects and the calls on them are the same ones."""

from __future__ import annotations

import libcst as cst
from libcst.metadata import Assignment

from tests.metamorphic.base import (
    FreshNames,
    double_quoted_fstring_nodes,
    imports_module,
    insert_import,
    module_binds,
    parse,
    parsed_with_scopes,
    per_file,
    replace_nodes,
    stmt,
    transformation,
    walk,
)

#: Optimizer classes, by the last name of the call that builds one.
OPTIMIZERS = frozenset(
    "SGD Adam AdamW RMSprop Adagrad Adadelta Adamax NAdam RAdam LBFGS SparseAdam Adafactor Lion Lamb LAMB "
    "FusedAdam AdamW8bit".split()
)


def _callee(node: cst.BaseExpression) -> str | None:
    if not isinstance(node, cst.Call):
        return None
    func = node.func
    return func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else None


def _constructions(module: cst.Module) -> list[cst.SimpleStatementLine]:
    """Lines ``NAME = <optimizer class>(...)`` (one statement, one Name target)."""
    found = []
    for line in walk(module):
        if isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1 and isinstance(line.body[0], cst.Assign):
            assign = line.body[0]
            if (
                len(assign.targets) == 1
                and isinstance(assign.targets[0].target, cst.Name)
                and _callee(assign.value) in OPTIMIZERS
            ):
                found.append(line)
    return found


@transformation("dict", "roles")
@per_file
def optimizer_in_dict(text: str) -> str | None:
    """``optimizer = torch.optim.X(...)`` → ``opts = {}`` then ``opts["main"] = torch.optim.X(...)``,
    and every other binding and read of the name (``a, optimizer = prepare(...)`` included) →
    ``opts["main"]``. Applies to an optimizer built into a name that is bound only by plain
    assignments (no parameter, loop target, ``with`` target or ``global``)."""
    parsed = parsed_with_scopes(text)
    if parsed is None:
        return None
    module, scopes = parsed
    fresh = FreshNames(text)
    in_double = double_quoted_fstring_nodes(module)
    replacements = {}
    for line in _constructions(module):
        target = line.body[0].targets[0].target
        scope = scopes.get(target)
        if scope is None:
            continue
        bindings = list(scope.assignments[target.value])
        plain_targets = {id(t) for node in walk(module) if isinstance(node, cst.Assign) for t in _names(node)}
        if any(type(b) is not Assignment or id(b.node) not in plain_targets for b in bindings):
            continue
        accesses = [a.node for b in bindings for a in b.references]
        if any(not isinstance(n, cst.Name) for n in accesses) or target.value in _declared(module):
            continue
        holder = fresh("opts_")
        for node in [*(b.node for b in bindings), *accesses]:
            quote = "'" if id(node) in in_double else '"'
            replacements[id(node)] = lambda updated, e=f"{holder}[{quote}main{quote}]": cst.parse_expression(e)
        replacements[id(line)] = lambda updated, h=holder: cst.FlattenSentinel(
            [
                stmt(f"{h} = {{}}\n").with_changes(leading_lines=updated.leading_lines),
                updated.with_changes(leading_lines=[]),
            ]
        )
    return replace_nodes(module, replacements)


def _names(assign: cst.Assign) -> list[cst.Name]:
    """The Name nodes an assignment binds (in tuples and lists too, not in attributes or subscripts)."""
    found = []
    for target in assign.targets:
        stack = [target.target]
        while stack:
            node = stack.pop()
            if isinstance(node, cst.Name):
                found.append(node)
            elif isinstance(node, (cst.Tuple, cst.List)):
                stack.extend(e.value for e in node.elements)
            elif isinstance(node, cst.StarredElement):
                stack.append(node.value)
    return found


def _declared(module: cst.Module) -> set[str]:
    return {n.name.value for node in walk(module) if isinstance(node, (cst.Global, cst.Nonlocal)) for n in node.names}


@transformation("same_arms", "roles")
@per_file
def same_arms(text: str) -> str | None:
    """Each line that builds the optimizer or prepares objects (``x = <optimizer class>(...)``,
    ``a, b = accelerator.prepare(...)``, ``deepspeed.initialize(...)``) → ``if
    os.environ.get("ACCUMLINT_ARM"): LINE else: LINE``: an unknown run-level condition whose
    arms are the same (``import os`` added where missing). Applies to a file with such a line,
    where ``os`` is free or the ``os`` module."""
    module = parse(text)
    if module is None or (module_binds(module, "os") and not imports_module(module, "os")):
        return None
    lines = set(map(id, _constructions(module)))
    for line in walk(module):
        if isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1 and isinstance(line.body[0], cst.Assign):
            if _callee(line.body[0].value) in {"prepare", "initialize"}:
                lines.add(id(line))
    replacements = {}
    for line_id in lines:
        replacements[line_id] = lambda updated: _both_arms(updated)
    new = replace_nodes(module, replacements)
    if new is None or imports_module(module, "os"):
        return new
    return insert_import(cst.parse_module(new), "import os\n").code


def _both_arms(line: cst.SimpleStatementLine) -> cst.If:
    template = stmt('if os.environ.get("ACCUMLINT_ARM"):\n    pass\nelse:\n    pass\n')
    arm = cst.IndentedBlock(body=[line.with_changes(leading_lines=[])])
    return template.with_changes(
        body=arm, orelse=template.orelse.with_changes(body=arm), leading_lines=line.leading_lines
    )
