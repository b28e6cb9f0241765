"""Consistent renaming to names that mean nothing (``v17``): the program computes the same,
only the words a reader (or a name-matching linter) relies on are gone.

Never renamed: names bound by imports, builtins, dunder names, ``self``/``cls``, names a
``global``/``nonlocal`` statement declares, parameters whose name is used as a keyword
argument anywhere in the program (a keyword call would break), the methods and attributes of
classes that inherit from anything outside the file (framework hooks such as
``training_step`` and attributes such as ``automatic_optimization`` are read by name), and
class-level variables (dataclass fields are keyword names)."""

from __future__ import annotations

from collections.abc import Iterable

import libcst as cst
from libcst.metadata import (
    Assignment,
    ClassScope,
    GlobalScope,
)

from tests.metamorphic.base import FreshNames, declared_names, parsed_with_scopes, single_file, transformation, walk

KEEP = frozenset({"self", "cls", "_"})


def _keywords(module: cst.Module) -> set[str]:
    return {node.keyword.value for node in walk(module) if isinstance(node, cst.Arg) and node.keyword is not None}


def _renamable(name: str) -> bool:
    return not (name in KEEP or (name.startswith("__") and name.endswith("__")))


class _Renamer(cst.CSTTransformer):
    """Renames the nodes whose ids are in ``names`` (Name nodes, and the name of a def, a class
    or a parameter), and attribute names in ``attributes``."""

    def __init__(self, names: dict[int, str], attributes: dict[str, str]) -> None:
        super().__init__()
        self.names = names
        self.attributes = attributes

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.Name:
        new = self.names.get(id(original_node))
        return updated_node.with_changes(value=new) if new else updated_node

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> cst.Attribute:
        new = self.attributes.get(original_node.attr.value)
        return updated_node.with_changes(attr=cst.Name(new)) if new else updated_node


def _binding_name(assignment: Assignment) -> cst.Name | None:
    """The Name node that spells a binding (a def's, a class's or a parameter's name, or the
    assigned Name itself), or None for other bindings."""
    node = assignment.node
    if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Param)):
        return node.name
    return node if isinstance(node, cst.Name) else None


def _external_classes(module: cst.Module, local: set[str]) -> set[int]:
    """ids of the classes with a base (or a keyword such as ``metaclass``) not defined here."""
    external = set()
    for node in walk(module):
        if isinstance(node, cst.ClassDef):
            for base in node.bases:
                if not (isinstance(base.value, cst.Name) and base.value.value in local and base.keyword is None):
                    external.add(id(node))
    return external


def _rename(text: str, *, everything: bool) -> str | None:
    parsed = parsed_with_scopes(text)
    if parsed is None:
        return None
    module, scopes = parsed
    if any(
        isinstance(n, cst.Call)
        and isinstance(n.func, cst.Name)
        and n.func.value in {"locals", "vars", "eval", "exec", "globals"}
        for n in walk(module)
    ):
        return None  # names are read as strings there
    fresh = FreshNames(text)
    keywords, declared = _keywords(module), declared_names(module)
    local_classes = {n.name.value for n in walk(module) if isinstance(n, cst.ClassDef)}
    external = _external_classes(module, local_classes)
    overrides = {
        id(item)
        for node in walk(module)
        if isinstance(node, cst.ClassDef) and id(node) in external
        for item in _methods(node)
    }
    names: dict[int, str] = {}
    seen_scopes = {id(scope): scope for scope in scopes.values() if scope is not None}
    for scope in seen_scopes.values():
        if isinstance(scope, ClassScope):
            continue  # class-level names are attributes: methods are handled below, fields stay
        if isinstance(scope, GlobalScope) and not everything:
            continue
        by_name: dict[str, list[Assignment]] = {}
        for assignment in scope.assignments:
            by_name.setdefault(assignment.name, []).append(assignment)  # type: ignore[arg-type]
        override = id(getattr(scope, "node", None)) in overrides
        for name, assignments in by_name.items():
            if not _renamable(name) or name in declared or any(type(a) is not Assignment for a in assignments):
                continue  # an import, a builtin or a declared name somewhere in its bindings
            if any(isinstance(a.node, cst.Param) for a in assignments) and (name in keywords or override):
                continue  # a keyword call, here or in the framework that calls the override
            spelled = [_binding_name(a) for a in assignments]
            if any(s is None for s in spelled):
                continue
            accesses = [access for a in assignments for access in a.references]
            if any(not isinstance(access.node, cst.Name) for access in accesses):
                continue  # a string annotation or `__all__` entry names it
            if any(len({id(r.scope) for r in access.referents}) > 1 for access in accesses):
                continue
            new = fresh()
            for node in [*spelled, *(access.node for access in accesses)]:
                names[id(node)] = new
    attributes = _attributes(module, external, keywords) if everything else {}
    renamed_attributes = {attribute: fresh() for attribute in sorted(attributes)}
    for node in walk(module):
        if isinstance(node, cst.ClassDef) and id(node) not in external:
            for method in _methods(node):
                if method.name.value in renamed_attributes:
                    names[id(method.name)] = renamed_attributes[method.name.value]
    if not names and not renamed_attributes:
        return None
    return module.visit(_Renamer(names, renamed_attributes)).code


def _methods(node: cst.ClassDef) -> list[cst.FunctionDef]:
    body = node.body.body if isinstance(node.body, cst.IndentedBlock) else []
    return [item for item in body if isinstance(item, cst.FunctionDef)]


def _imported(module: cst.Module) -> set[str]:
    """Names that imports bind anywhere in the file."""
    names = set()
    for node in walk(module):
        if isinstance(node, (cst.Import, cst.ImportFrom)) and not isinstance(node.names, cst.ImportStar):
            for alias in node.names:
                bound = alias.asname.name if alias.asname else alias.name
                while isinstance(bound, cst.Attribute):
                    bound = bound.value
                if isinstance(bound, cst.Name):
                    names.add(bound.value)
    return names


def _root(node: cst.BaseExpression) -> str | None:
    while isinstance(node, (cst.Attribute, cst.Call, cst.Subscript)):
        node = node.value if not isinstance(node, cst.Call) else node.func
    return node.value if isinstance(node, cst.Name) else None


def _attributes(module: cst.Module, external: set[int], keywords: set[str]) -> set[str]:
    """Attribute names that belong to the file's own classes only: methods of classes with no
    outside base and attributes assigned as ``self.X`` in them, where every ``.X`` in the file
    is on ``self`` (methods: on anything, but the name is no method of another class here) and
    ``X`` is not a keyword name."""
    own_methods: set[str] = set()
    other_methods: set[str] = set()
    own_fields: set[str] = set()
    for node in walk(module):
        if not isinstance(node, cst.ClassDef):
            continue
        target = other_methods if id(node) in external else own_methods
        for item in _methods(node):
            target.add(item.name.value)
            if id(node) not in external:
                own_fields |= _self_fields(item)
    uses: dict[str, list[cst.Attribute]] = {}
    for node in walk(module):
        if isinstance(node, cst.Attribute):
            uses.setdefault(node.attr.value, []).append(node)
    class_level = {t.value for node in walk(module) if isinstance(node, cst.ClassDef) for t in _class_level_names(node)}
    fields = {
        name
        for name in own_fields
        if all(isinstance(u.value, cst.Name) and u.value.value == "self" for u in uses.get(name, []))
    }
    imported = _imported(module)
    methods = {
        name for name in own_methods - other_methods if not any(_root(u.value) in imported for u in uses.get(name, []))
    }  # `wandb.log` is not ours
    chosen = (fields | methods) - keywords - class_level.difference(methods)
    return {name for name in chosen if _renamable(name) and name not in FRAMEWORK_API}


def _self_fields(method: cst.FunctionDef) -> set[str]:
    fields = set()
    for node in walk(method):
        targets: Iterable[cst.CSTNode] = ()
        if isinstance(node, cst.Assign):
            targets = [t.target for t in node.targets]
        elif isinstance(node, (cst.AugAssign, cst.AnnAssign)):
            targets = [node.target]
        for target in targets:
            for part in walk(target):
                if isinstance(part, cst.Attribute) and isinstance(part.value, cst.Name) and part.value.value == "self":
                    fields.add(part.attr.value)
    return fields


def _class_level_names(node: cst.ClassDef) -> list[cst.Name]:
    found = []
    for item in node.body.body if isinstance(node.body, cst.IndentedBlock) else []:
        if isinstance(item, cst.SimpleStatementLine):
            for small in item.body:
                targets = (
                    [t.target for t in small.targets]
                    if isinstance(small, cst.Assign)
                    else ([small.target] if isinstance(small, cst.AnnAssign) else [])
                )
                found += [t for t in targets if isinstance(t, cst.Name)]
    return found


#: Method names that frameworks call by name or that objects of the standard library and of
#: torch answer to: an own class's method with one of these names may be someone's API.
FRAMEWORK_API = frozenset(
    (
        "backward step zero_grad forward train eval state_dict load_state_dict parameters named_parameters to "
        "cuda cpu update scale unscale_ item detach get keys values items run fit prepare accumulate no_sync "
        "sync_gradients close write read append extend pop log info warning error debug save load add apply "
        "format copy clone mean sum reset setup start stop send put set clear remove insert index count sort "
        "flush join split strip replace lower upper compute reset_parameters register_hook add_scalar report "
        "record predict evaluate"
    ).split()
)


@transformation("locals", "rename")
@single_file
def rename_locals(text: str) -> str | None:
    """Every local variable and parameter of every function (comprehension and lambda names
    too) → ``vN``, consistently per scope. Applies to a one-file program with such a name (see
    the module's docstring for what is never renamed)."""
    return _rename(text, everything=False)


@transformation("meaningless", "rename")
@single_file
def rename_all(text: str) -> str | None:
    """Locals, parameters, module-level names (functions, classes, constants, variables) and
    the file's own classes' methods and ``self`` attributes → ``vN``, consistently. Applies to
    a one-file program with such a name (see the module's docstring for what is never
    renamed)."""
    return _rename(text, everything=True)
