"""Roles held differently: the optimizer (recognised by its construction, ``torch.optim.AdamW(...)``
and the like) kept in a dict, behind a property of a holder object, returned by a getter, or built
and prepared in an ``if/else`` whose arms are the same. The objects and the calls on them are the
same ones."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import libcst as cst
from libcst.metadata import Assignment, FunctionScope, GlobalScope, Scope

from tests.metamorphic.base import (
    FreshNames,
    after_docstring,
    declared_names,
    double_quoted_fstring_nodes,
    imports_module,
    insert_import,
    insert_statements,
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


@dataclass(frozen=True)
class _Held:
    """An optimizer built into a name: its construction line, the name, the scope that binds it,
    every binding of the name (the Name targets) and every read of it."""

    line: cst.SimpleStatementLine
    name: str
    scope: Scope
    bindings: list[cst.Name]
    reads: list[cst.Name]


def _held_optimizers(module: cst.Module, scopes: Mapping) -> Iterator[_Held]:
    """The optimizers built into a name that is bound only by plain assignments (no parameter,
    loop target, ``with`` target or ``global``) and read only as a name, one per construction
    line."""
    plain_targets = {id(t) for node in walk(module) if isinstance(node, cst.Assign) for t in _names(node)}
    declared = declared_names(module)
    for line in _constructions(module):
        target = line.body[0].targets[0].target
        scope = scopes.get(target)
        if scope is None:
            continue
        bindings = list(scope.assignments[target.value])
        if any(type(b) is not Assignment or id(b.node) not in plain_targets for b in bindings):
            continue
        reads = [a.node for b in bindings for a in b.references]
        if any(not isinstance(n, cst.Name) for n in reads) or target.value in declared:
            continue
        yield _Held(line, target.value, scope, [b.node for b in bindings], reads)


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
    for held in _held_optimizers(module, scopes):
        holder = fresh("opts_")
        for node in [*held.bindings, *held.reads]:
            quote = "'" if id(node) in in_double else '"'
            replacements[id(node)] = lambda updated, e=f"{holder}[{quote}main{quote}]": cst.parse_expression(e)
        replacements[id(held.line)] = lambda updated, h=holder: cst.FlattenSentinel(
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


# --------------------------------------------------------------------------- behind a property or a getter


def _held_once(module: cst.Module, scopes: Mapping) -> list[_Held]:
    """:func:`_held_optimizers` once per name and scope, where the scope is the module or a
    function with an indented body (so a statement can open it), and no read is a ``del``."""
    deleted = {id(n) for node in walk(module) if isinstance(node, cst.Del) for n in walk(node.target)}
    seen: set[tuple[int, str]] = set()
    found = []
    for held in _held_optimizers(module, scopes):
        key = (id(held.scope), held.name)
        if key in seen or any(id(n) in deleted for n in held.reads):
            continue
        seen.add(key)
        if isinstance(held.scope, GlobalScope) or (
            isinstance(held.scope, FunctionScope)
            and isinstance(held.scope.node, cst.FunctionDef)
            and isinstance(held.scope.node.body, cst.IndentedBlock)
        ):
            found.append(held)
    return found


def _opening(module: cst.Module, openers: dict[int, list[cst.BaseStatement]]) -> dict[int, Callable]:
    """Replacements that put ``openers[id(scope node)]`` first in that scope: after the docstring
    and the opening imports of the module (two blank lines apart), after the docstring of a
    function."""

    def open_function(updated: cst.FunctionDef, statements: list[cst.BaseStatement]) -> cst.FunctionDef:
        body = list(updated.body.body)
        index = after_docstring(body)
        body[index:index] = statements
        return updated.with_changes(body=updated.body.with_changes(body=body))

    return {
        key: (
            (lambda updated, s=statements: insert_statements(updated, _spaced(s), after_imports=True))
            if key == id(module)
            else (lambda updated, s=statements: open_function(updated, s))
        )
        for key, statements in openers.items()
    }


def _spaced(statements: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
    return [s.with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()]) for s in statements]


def _behind(text: str, hold: Callable[[_Held, FreshNames], tuple[list[str], str | None, str]]) -> str | None:
    """``text`` with each optimizer of :func:`_held_once` held as ``hold`` says: the statements
    that open its scope, what its bindings become (None: unchanged) and what its reads become."""
    parsed = parsed_with_scopes(text)
    if parsed is None:
        return None
    module, scopes = parsed
    fresh = FreshNames(text)
    openers: dict[int, list[cst.BaseStatement]] = {}
    replacements: dict[int, Callable] = {}
    for held in _held_once(module, scopes):
        statements, binding, read = hold(held, fresh)
        scope_node = module if isinstance(held.scope, GlobalScope) else held.scope.node
        openers.setdefault(id(scope_node), []).extend(stmt(s) for s in statements)
        for nodes, expression in ((held.bindings, binding), (held.reads, read)):
            new = cst.parse_expression(expression) if expression is not None else None
            for node in nodes if new is not None else []:
                replacements[id(node)] = lambda updated, e=new: e
    return replace_nodes(module, {**replacements, **_opening(module, openers)})


@transformation("property", "roles")
@per_file
def optimizer_property(text: str) -> str | None:
    """The optimizer behind a property: a holder ``holder_N = OptimizerHolder_M()`` opens the
    scope that binds the name (the module after its imports, or the function after its
    docstring) and ``class OptimizerHolder_M`` (a ``@property optimizer`` returning
    ``self._optimizer``) opens the module; each binding ``optimizer = ...`` →
    ``holder_N._optimizer = ...``, each read → ``holder_N.optimizer``. The same object is stored
    and read at the same points. Applies where :func:`optimizer_in_dict` does, in a module or
    function scope, with no ``del`` of the name."""
    fresh_class: list[str] = []

    def hold(held: _Held, fresh: FreshNames) -> tuple[list[str], str, str]:
        if not fresh_class:
            fresh_class.append(fresh("OptimizerHolder_"))
        holder = fresh("holder_")
        return [f"{holder} = {fresh_class[0]}()\n"], f"{holder}._optimizer", f"{holder}.optimizer"

    new = _behind(text, hold)
    if new is None:
        return None
    holder_class = stmt(
        f"class {fresh_class[0]}:\n    @property\n    def optimizer(self):\n        return self._optimizer\n"
    )
    return insert_statements(cst.parse_module(new), _spaced([holder_class]), after_imports=True).code


@transformation("getter", "roles")
@per_file
def optimizer_getter(text: str) -> str | None:
    """The optimizer returned by a getter: ``def get_optimizer_N(): return optimizer`` opens the
    scope that binds the name (the module after its imports, or the function after its
    docstring, as a closure): it reads the name's current binding when called. Each read of the
    name → ``get_optimizer_N()``; the bindings stay. Applies where :func:`optimizer_in_dict`
    does, in a module or function scope, with no ``del`` of the name."""

    def hold(held: _Held, fresh: FreshNames) -> tuple[list[str], None, str]:
        getter = fresh("get_optimizer_")
        return [f"def {getter}():\n    return {held.name}\n"], None, f"{getter}()"

    return _behind(text, hold)
