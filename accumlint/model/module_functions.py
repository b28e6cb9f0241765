"""A module's functions, methods and classes by the names a call can use, with what the
statement walk asks of them (bases, attributes bound on ``self``, who calls whom), and through
the project index the functions and classes of other modules."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import libcst as cst

from accumlint import frameworks as fw
from accumlint.frameworks import stdlib
from accumlint.model.callgraph import bind, local_names, parameters
from accumlint.model.names import (
    Branches,
    ImportMap,
    calls_with_branches,
    children,
    derives,
    dotted,
    exact_kinds,
    walk,
)
from accumlint.model.scopes import Frame

#: the targets that bind element-wise (``a, (b, c) = ...``): exact types, as the hot paths test
#: them (isinstance on LibCST's ABC node classes is slow)
_SEQUENCES = exact_kinds(cst.Tuple, cst.List)


def target_names(target: cst.BaseExpression) -> tuple[str | None, ...]:
    """The dotted names an assignment target binds, element-wise (``a, (b, c.d)`` ->
    ``("a", "b", "c.d")``; ``None`` for an element that is no name)."""
    if type(target) in _SEQUENCES:
        names: list[str | None] = []
        for element in target.elements:
            value = element.value
            names.extend(target_names(value) if type(value) in _SEQUENCES else (dotted(value),))
        return tuple(names)
    return (dotted(target),)


def _is_code(kind: type) -> bool:
    """Whether a node type is an expression or a small statement: no ``def`` or ``class`` is inside one."""
    return derives(kind, cst.BaseExpression) or derives(kind, cst.BaseSmallStatement)


@dataclass(frozen=True, eq=False)
class Callee:
    """A function a call may reach: ``function`` of ``owner`` (this module's or a project
    module's functions), as a method of ``class_def`` when bound (``self_value``: what its first
    parameter is, an expression of the caller; None: unknown), under ``frame`` when it is one of
    several candidates (the IF frame of its branch of ``f = a if cond else b``); ``leading``: the
    arguments a ``functools.partial`` fixed, bound before the call's own."""

    function: cst.FunctionDef
    owner: ModuleFunctions
    class_def: cst.ClassDef | None = None
    bound: bool = False
    self_value: cst.BaseExpression | None = None
    frame: Frame | None = None
    leading: tuple[cst.Arg, ...] = ()


class ModuleFunctions:
    """Functions of the module by the names a call can use: ``f`` (module level) and ``Class.m``,
    classes with their bases, what methods assign to ``self`` attributes, and (through
    ``project``) the functions and classes other modules of the project define."""

    def __init__(self, module: cst.Module, project: object | None = None, name: str = "") -> None:
        self.functions: dict[str, cst.FunctionDef] = {}
        self.methods: dict[tuple[cst.ClassDef, str], cst.FunctionDef] = {}
        self.class_of: dict[cst.FunctionDef, cst.ClassDef | None] = {}
        self.enclosing: dict[cst.FunctionDef, cst.FunctionDef | None] = {}  # nested def → its def
        self.classes: dict[str, cst.ClassDef] = {}
        self.project = project  # a ProjectIndex view (accumlint.project), or None: this module alone
        self.name = name  # dotted module name in its project ("" unknown)
        self._module = module
        self._imports: ImportMap | None = None
        # id(expression) → its calls and their conditional-expression arms (the tree outlives this)
        self._calls: dict[int, tuple[list[cst.Call], dict[int, Branches]]] = {}
        self._attributes: dict[cst.ClassDef, dict[str, list[cst.BaseExpression]]] | None = None
        self._backward: dict[cst.FunctionDef, bool] = {}
        self._receivers: dict[cst.FunctionDef, dict[str, set[str]]] = {}
        self._locals: dict[cst.FunctionDef, set[str]] = {}
        #: function (None: the module's own statements) → each plain name's assigned values
        self._assigned: dict[cst.FunctionDef | None, dict[str, list[cst.BaseExpression]]] = {}
        self._method_names: set[str] | None = None
        self._base_names: frozenset[str] | None = None
        self._fixed: dict[tuple[cst.ClassDef, str], int | None | bool] = {}
        self._declared: dict[tuple[cst.ClassDef, str], str | None] = {}  # (:meth:`declared_attribute`)
        self._module_values: dict[str, cst.BaseExpression | None] | None = None
        self._option_defaults: dict[str, int] | None = None
        self._built_methods: dict[str, list[tuple[cst.FunctionDef, ModuleFunctions]]] = {}
        self._callers: dict[str, list[tuple[cst.Call, cst.FunctionDef | None]]] | None = None
        # every def at any depth (nested helpers, defs under `if __name__ == ...`); a method
        # is a def directly in a class body
        stack: list[tuple[cst.CSTNode, cst.ClassDef | None, cst.FunctionDef | None]] = [(module, None, None)]
        while stack:
            node, owner, outer = stack.pop()
            for child in reversed(children(node)):
                kind = type(child)  # exact types: isinstance on LibCST's (ABC) node classes is slow here
                if kind is cst.FunctionDef:
                    self.class_of[child] = owner
                    self.enclosing[child] = outer if owner is None else None
                    if owner is not None:
                        self.methods.setdefault((owner, child.name.value), child)
                    else:
                        self.functions.setdefault(child.name.value, child)
                    stack.append((child, None, child))
                elif kind is cst.ClassDef:
                    self.classes.setdefault(child.name.value, child)
                    stack.append((child.body, child, None))
                elif (kind is cst.IndentedBlock or kind is cst.SimpleStatementSuite) and owner is not None:
                    stack.append((child, owner, outer))
                elif not _is_code(kind):
                    stack.append((child, None if type(node) is not cst.IndentedBlock else owner, outer))

    @property
    def imports(self) -> ImportMap:
        if self._imports is None:
            self._imports = ImportMap(self._module)
        return self._imports

    def resolve(self, call: cst.Call, class_def: cst.ClassDef | None) -> cst.FunctionDef | None:
        """The same-module function a call reaches, if it is ``f(...)`` or ``self.m(...)``."""
        func = call.func
        if isinstance(func, cst.Name):
            return self.functions.get(func.value)
        if (
            class_def is not None
            and isinstance(func, cst.Attribute)
            and isinstance(func.value, cst.Name)
            and func.value.value == "self"
        ):
            found = self.method(class_def, func.attr.value)
            return found[0] if found is not None else None
        return None

    # --- classes ------------------------------------------------------------------------------
    def bases(self, class_def: cst.ClassDef) -> list[tuple[ModuleFunctions, cst.ClassDef]]:
        """The base classes of ``class_def`` that this module or the project defines, in any
        project module: a base is part of every instance of its subclasses (a base trainer's
        ``__init__`` builds what the subclass's loop uses), though its module may perform no
        training event itself."""
        found = []
        for base in class_def.bases:
            located = self.class_named(dotted(base.value), any_module=True)
            if located is not None:
                found.append(located)
        return found

    @property
    def base_names(self) -> frozenset[str]:
        """The (dotted) names this module's class headers derive from: a class imported under one
        of them is followed wherever it lives (:meth:`bases`), ``Base.__init__(self, ...)`` too."""
        if self._base_names is None:
            self._base_names = frozenset(name for class_def in self.classes.values() for base in class_def.bases
                                         if (name := dotted(base.value)))
        return self._base_names

    def class_named(self, name: str | None, any_module: bool = False) -> tuple[ModuleFunctions, cst.ClassDef] | None:
        """The class a (dotted) name refers to here: this module's, or one imported from the project
        (``any_module``: from a module that performs no training event too)."""
        if not name:
            return None
        local = self.classes.get(name)
        if local is not None:
            return self, local
        found = self.imported(name, any_module)
        return found if found is not None and isinstance(found[1], cst.ClassDef) else None  # type: ignore[return-value]

    def partial_of(self, call: cst.Call) -> cst.BaseExpression | None:
        """What ``call`` fixes arguments of when it is ``functools.partial(f, ...)`` (under any
        import spelling, ``partial`` by that name included): ``f``; else None."""
        name = dotted(call.func) or ""
        if not (name == "partial" or name.endswith(".partial") or self.imports.qualify(name) == "functools.partial"):
            return None
        first = call.args[0] if call.args else None
        return first.value if first is not None and first.keyword is None and not first.star else None

    def imported(self, name: str,
                 any_module: bool = False) -> tuple[ModuleFunctions, cst.FunctionDef | cst.ClassDef] | None:
        """A project module's top-level function or class that ``name`` refers to through this
        module's imports (None: not imported, not a project module, or not found); ``any_module``:
        see :meth:`ProjectView.lookup`."""
        if self.project is None:
            return None
        qualified = self.imports.qualify(name)
        if qualified is None:
            return None
        return self.project.lookup(self, qualified, any_module=any_module)  # type: ignore[attr-defined]

    def imported_class_methods(self, name: str) -> list[tuple[cst.FunctionDef, ModuleFunctions]]:
        """The methods called ``name`` of the classes this module imports from the project (at most
        32 imported names are followed)."""
        found = []
        for local in list(self.imports.names)[:32]:
            imported = self.imported(local)
            if imported is not None and isinstance(imported[1], cst.ClassDef):
                method = imported[0].method(imported[1], name)
                if method is not None:
                    found.append((method[0], method[1]))
        return found

    def methods_of_built_classes(self, name: str) -> list[tuple[cst.FunctionDef, ModuleFunctions]]:
        """The methods called ``name`` of the classes that the project functions this module imports
        can build: those their modules define or import from the project (``model, optim =
        get_model(cfg)``, then ``optim.step_and_update_lr()``, the class named only where ``get_model``
        lives). At most 32 imported names per module are followed."""
        found = self._built_methods.get(name)
        if found is not None:
            return found
        found = []
        for local in list(self.imports.names)[:32]:
            imported = self.imported(local)
            if imported is None or not isinstance(imported[1], cst.FunctionDef):
                continue
            module = imported[0]
            found.extend(module.imported_class_methods(name))
            found.extend((method[0], method[1]) for class_def in module.classes.values()
                         if (method := module.method(class_def, name)) is not None)
        self._built_methods[name] = found
        return found

    def lineage(self, class_def: cst.ClassDef) -> Iterator[tuple[ModuleFunctions, cst.ClassDef]]:
        """``class_def`` (with this module) and then its project bases with theirs, depth first and
        left to right (Python's lookup order for single inheritance and the usual mixins), each
        once; a hierarchy with a cycle is cut, and the walk stops after 64 classes."""
        seen: set[int] = set()
        stack: list[tuple[ModuleFunctions, cst.ClassDef]] = [(self, class_def)]
        while stack and len(seen) < 64:
            owner, current = stack.pop(0)
            if id(current) in seen:
                continue
            seen.add(id(current))
            yield owner, current
            stack[0:0] = owner.bases(current)

    def method(self, class_def: cst.ClassDef, name: str,
               skip_own: bool = False) -> tuple[cst.FunctionDef, ModuleFunctions, cst.ClassDef] | None:
        """``name`` looked up on ``class_def`` and then its bases (:meth:`lineage`); ``skip_own``:
        start at the bases (``super().name``)."""
        for owner, current in self.lineage(class_def):
            if skip_own and current is class_def:
                continue
            found = owner.methods.get((current, name))
            if found is not None:
                return found, owner, current
        return None

    def subclass_method(self, class_def: cst.ClassDef,
                        name: str) -> tuple[cst.FunctionDef, ModuleFunctions, cst.ClassDef] | None:
        """``name`` defined by exactly one class of this module that derives from ``class_def``
        (directly or not) when ``class_def`` and its bases do not define it."""
        if self.method(class_def, name) is not None:
            return None
        found = []
        for other in self.classes.values():
            if other is class_def or (other, name) not in self.methods:
                continue
            if self._derives(other, class_def):
                found.append(other)
        return (self.methods[(found[0], name)], self, found[0]) if len(found) == 1 else None

    def subclasses(self, class_def: cst.ClassDef) -> list[cst.ClassDef]:
        """The classes of this module that derive from ``class_def``, directly or not."""
        return [other for other in self.classes.values() if other is not class_def and self._derives(other, class_def)]

    def _derives(self, class_def: cst.ClassDef, base: cst.ClassDef) -> bool:
        return any(parent is base for _, parent in self.lineage(class_def) if parent is not class_def)

    def attributes(self, class_def: cst.ClassDef) -> dict[str, list[cst.BaseExpression]]:
        """``self.x`` → the values its methods assign to it (``self.model, self.opt = m, o`` too)."""
        if self._attributes is None:
            self._attributes = {}
        table = self._attributes.get(class_def)
        if table is None:
            table = self._attributes[class_def] = {}
            for (owner, _), function in self.methods.items():
                if owner is not class_def:
                    continue
                for statement in _statements(function.body):
                    if isinstance(statement, cst.Assign) and len(statement.targets) == 1:
                        pair_values(statement.targets[0].target, statement.value, table)
        return table

    def declared_attribute(self, class_def: cst.ClassDef, name: str) -> str | None:
        """The class that the methods of ``class_def`` declare ``self.<name>`` to hold: each write
        stores a parameter of its method annotated with the same dotted name (``def setup(self,
        strategy: EngineStrategy): self.strategy = strategy``); None where a write stores
        anything else, or none does."""
        if (class_def, name) in self._declared:
            return self._declared[(class_def, name)]
        declared: set[str | None] = set()
        for function, owner in self.class_of.items():
            if owner is not class_def:
                continue
            annotations = {p.name.value: dotted(p.annotation.annotation) for p in function.params.params
                           if p.annotation is not None}
            for statement in _statements(function.body):
                if not isinstance(statement, (cst.Assign, cst.AugAssign, cst.AnnAssign)):
                    continue
                targets = [t.target for t in statement.targets] if isinstance(statement, cst.Assign) \
                    else [statement.target]
                if not any(isinstance(t, cst.Attribute) and t.attr.value == name and dotted(t.value) == "self"
                           for t in targets):
                    continue
                value = statement.value if isinstance(statement, cst.Assign) else None
                declared.add(annotations.get(value.value) if isinstance(value, cst.Name) else None)
        found = self._declared[(class_def, name)] = next(iter(declared)) if len(declared) == 1 else None
        return found

    def fixed_attribute(self, class_def: cst.ClassDef, name: str) -> int | None | bool:
        """What the methods of ``class_def`` write to ``self.<name>``: the one whole number every
        write of theirs sets (``self.first_update = 0`` in a ``setup`` its caller runs before the
        loop), False where they write it no other way and none at all, None where some write is
        not that number (another number, a resumed value, ``+=``) or where code of this module
        writes ``<name>`` on another object (``runner.first_update = 5``): open."""
        found = self._fixed.get((class_def, name), _UNSEEN)
        if found is not _UNSEEN:
            return found  # type: ignore[return-value]
        numbers: set[int] = set()
        open_write = False
        for function, owner in self.class_of.items():  # (every def: a script's `main` writes too)
            own = owner is class_def
            for statement in _statements(function.body):
                targets: list[cst.BaseExpression] = []
                if isinstance(statement, cst.Assign):
                    targets = [t.target for t in statement.targets]
                elif isinstance(statement, (cst.AugAssign, cst.AnnAssign)):
                    targets = [statement.target]
                for target in targets:
                    written = [n for n in walk(target) if isinstance(n, cst.Attribute) and n.attr.value == name]
                    if not written:
                        continue
                    plain = isinstance(statement, cst.Assign) and target is written[0] and own \
                        and dotted(target.value) == "self" and isinstance(statement.value, cst.Integer)
                    if plain:
                        numbers.add(int(statement.value.evaluated_value))  # type: ignore[union-attr]
                    elif own or any(dotted(n.value) != "self" for n in written):
                        open_write = True
        found = None if open_write or len(numbers) > 1 else next(iter(numbers)) if numbers else False
        self._fixed[(class_def, name)] = found
        return found

    def performs_backward(self, function: cst.FunctionDef) -> bool:
        """Whether ``function``'s body (not its nested defs) calls a backward (textually)."""
        found = self._backward.get(function)
        if found is None:
            found = self._backward[function] = any(
                isinstance(call.func, cst.Attribute) and call.func.attr.value in _BACKWARD_NAMES
                or dotted(call.func) in ("torch.autograd.backward", "autograd.backward")
                for call in self.calls_in(function.body))
        return found

    def receivers(self, function: cst.FunctionDef) -> dict[str, set[str]]:
        """Dotted receiver → the methods ``function`` calls on it (``trainer`` → {accumulate, update})."""
        table = self._receivers.get(function)
        if table is None:
            table = self._receivers[function] = {}
            for call in self.calls_in(function.body):
                if isinstance(call.func, cst.Attribute):
                    name = dotted(call.func.value)
                    if name:
                        table.setdefault(name, set()).add(call.func.attr.value)
        return table

    def passed_class(self, function: cst.FunctionDef, name: str) -> tuple[ModuleFunctions, cst.ClassDef] | None:
        """The project class of the instance every call of ``function`` in this module passes
        as its parameter ``name`` (``train(..., scaler, ...)`` called as ``train(..., AmpScaler(),
        ...)`` or with a name assigned one); None when a call passes something else or none."""
        if self.class_of.get(function) is not None or self.enclosing.get(function) is not None:
            return None
        if not any(p.name.value == name for p in parameters(function)):
            return None
        found: tuple[ModuleFunctions, cst.ClassDef] | None = None
        calls = self.callers().get(function.name.value, [])
        for call, caller in calls:
            value = bind(function, call, None, False).get(name)
            if isinstance(value, cst.Name) and caller is not None:
                assigned = self.values_assigned(caller, value.value)
                value = assigned[0] if len(assigned) == 1 else None
            located = self.class_named(dotted(value.func)) if isinstance(value, cst.Call) else None
            if located is None or (found is not None and located[1] is not found[1]):
                return None
            found = located
        return found

    def annotated_class(self, function: cst.FunctionDef,
                        name: str) -> tuple[ModuleFunctions, cst.ClassDef] | None:
        """The project class that ``function``'s parameter ``name`` is annotated with
        (``trainer: PriorTrainer``, or the same as a string); None without such an annotation."""
        for param in parameters(function):
            if param.name.value != name or param.annotation is None:
                continue
            annotation = param.annotation.annotation
            if isinstance(annotation, cst.SimpleString):
                text = annotation.evaluated_value
                return self.class_named(text) if isinstance(text, str) else None
            return self.class_named(dotted(annotation))
        return None

    def callers(self) -> dict[str, list[tuple[cst.Call, cst.FunctionDef | None]]]:
        """Function name → the calls of it by name in this module, with the function they are in."""
        if self._callers is None:
            self._callers = {}
            for function in self.class_of:
                for call in self.calls_in(function.body):
                    if isinstance(call.func, cst.Name):
                        self._callers.setdefault(call.func.value, []).append((call, function))
        return self._callers

    def duck_class(self, methods: set[str]) -> tuple[ModuleFunctions, cst.ClassDef] | None:
        """The one class of this module that defines every method of ``methods`` (at least two:
        one common name such as ``update`` or ``step`` proves nothing)."""
        if len(methods) < 2:
            return None
        if self._method_names is None:
            self._method_names = {name for _, name in self.methods}
        if not methods <= self._method_names:
            return None
        found = [c for c in self.classes.values() if all(self.method(c, m) for m in methods)]
        return (self, found[0]) if len(found) == 1 else None

    def option_defaults(self) -> dict[str, int]:
        """The whole-number defaults of the command-line options this module declares
        (``parser.add_argument("--grad-accum", type=int, default=4)``: ``{"grad_accum": 4}``), by
        their namespace attribute (:func:`accumlint.frameworks.stdlib.option_attribute`). An
        attribute declared twice with different defaults is left out."""
        if self._option_defaults is None:
            found: dict[str, int | None] = {}
            for node in walk(self._module):
                if type(node) is not cst.Call or type(node.func) is not cst.Attribute \
                        or node.func.attr.value != stdlib.ADD_OPTION:
                    continue
                keywords = {arg.keyword.value: arg.value for arg in node.args if arg.keyword is not None}
                default = keywords.get(stdlib.DEFAULT)
                if type(default) is not cst.Integer or not stdlib.NOT_AS_GIVEN.isdisjoint(keywords):
                    continue
                flags = [arg.value.evaluated_value for arg in node.args if arg.keyword is None
                         and type(arg.value) is cst.SimpleString and isinstance(arg.value.evaluated_value, str)]
                dest = keywords.get(stdlib.DEST)
                name = stdlib.option_attribute(flags, dest.evaluated_value if type(dest) is cst.SimpleString
                                               and isinstance(dest.evaluated_value, str) else None)
                if name is not None:
                    number = int(default.evaluated_value)
                    found[name] = number if found.get(name, number) == number else None
            self._option_defaults = {name: number for name, number in found.items() if number is not None}
        return self._option_defaults

    def module_value(self, name: str) -> cst.BaseExpression | None:
        """The value of the one module-level assignment of ``name`` (under ``if``/``try`` at the
        top level too); None when the module binds it otherwise or more than once."""
        if self._module_values is None:
            table: dict[str, list[cst.BaseExpression | None]] = {}
            for statement in _statements(self._module):
                if isinstance(statement, cst.Assign) and len(statement.targets) == 1:
                    pairs: dict[str, list[cst.BaseExpression]] = {}
                    pair_values(statement.targets[0].target, statement.value, pairs)
                    for target, values in pairs.items():
                        table.setdefault(target, []).extend(values)
                    for target in target_names(statement.targets[0].target):
                        if target and target not in pairs:
                            table.setdefault(target, []).append(None)  # `a, b = f()`: not one value
                elif isinstance(statement, (cst.AugAssign, cst.AnnAssign)):
                    target = dotted(statement.target)
                    if target:
                        table.setdefault(target, []).append(
                            statement.value if isinstance(statement, cst.AnnAssign) else None)
            self._module_values = {target: values[0] for target, values in table.items() if len(values) == 1}
            names = self._module_bound_otherwise()
            for target in names:
                self._module_values.pop(target, None)
        return self._module_values.get(name)

    def _module_bound_otherwise(self) -> set[str]:
        """Names the module's top level binds by a loop or ``with ... as``, or a function
        declares ``global`` (it may rebind them)."""
        names: set[str] = set()
        stack: list[tuple[cst.CSTNode, bool]] = [(self._module, False)]
        while stack:
            node, in_function = stack.pop()
            kind = type(node)
            if kind is cst.For and not in_function:
                names.update(n for n in target_names(node.target) if n)  # type: ignore[attr-defined]
            elif kind is cst.AsName and not in_function:
                names.update(n for n in target_names(node.name) if n)  # type: ignore[attr-defined]
            elif kind is cst.Global:
                names.update(item.name.value for item in node.names)  # type: ignore[attr-defined]
            elif derives(kind, cst.BaseExpression):
                continue  # no statement inside an expression
            stack.extend((child, in_function or kind is cst.FunctionDef) for child in children(node))
        return names

    def values_assigned(self, function: cst.FunctionDef | None, name: str) -> list[cst.BaseExpression]:
        """What ``name = ...`` assigns to a plain name in ``function`` (its nested blocks, not its
        nested defs), or in the module's own statements when ``function`` is ``None``."""
        return list(self._assignments(function).get(name, ()))

    def _assignments(self, function: cst.FunctionDef | None) -> dict[str, list[cst.BaseExpression]]:
        """Every plain name's assigned values in ``function`` (:meth:`values_assigned`), once per
        function: each run asks again for each name a condition reads."""
        found = self._assigned.get(function)
        if found is None:
            found = self._assigned[function] = {}
            for statement in _statements(function.body if function is not None else self._module):
                if isinstance(statement, cst.Assign) and len(statement.targets) == 1:
                    pair_values(statement.targets[0].target, statement.value, found)
        return found

    def local_names(self, function: cst.FunctionDef) -> set[str]:
        """:func:`~accumlint.model.callgraph.local_names`, once per closure (it is entered at
        each of its calls; read only)."""
        found = self._locals.get(function)
        if found is None:
            found = self._locals[function] = local_names(function)
        return found

    def calls_in(self, expression: cst.CSTNode) -> list[cst.Call]:
        """:func:`~accumlint.model.names.calls_in`, computed once per expression: a helper's
        body is walked again at each call of the helper."""
        return self.calls_and_branches(expression)[0]

    def calls_and_branches(self, expression: cst.CSTNode) -> tuple[list[cst.Call], dict[int, Branches]]:
        """:func:`~accumlint.model.names.calls_with_branches`, once per expression."""
        found = self._calls.get(id(expression))
        if found is None:
            found = self._calls[id(expression)] = calls_with_branches(expression)
        return found

    def plain_functions(self) -> list[cst.FunctionDef]:
        """The defs outside class bodies: each name's def that calls by that name reach
        (:attr:`functions`), then every nested def that a namesake hides there (a factory's own
        ``train`` beside another factory's), each a function of its own."""
        named = list(self.functions.values())
        seen = {id(f) for f in named}
        return named + [f for f, owner in self.class_of.items()
                        if owner is None and self.enclosing.get(f) is not None and id(f) not in seen]

    def scopes(self) -> list[tuple[cst.FunctionDef, cst.ClassDef | None]]:
        """Every module-level function and method, in source order."""
        return list(self.class_of.items())


_BACKWARD_NAMES = frozenset({"backward", fw.lightning.MANUAL_BACKWARD})


#: not looked up yet (:meth:`ModuleFunctions.fixed_attribute`)
_UNSEEN = object()


def _statements(body: cst.CSTNode) -> list[cst.BaseSmallStatement]:
    """The small statements of a function body, nested blocks included (not nested defs)."""
    found: list[cst.BaseSmallStatement] = []
    stack: list[cst.CSTNode] = [body]
    while stack:
        node = stack.pop()
        kind = type(node)
        if kind is cst.SimpleStatementLine or kind is cst.SimpleStatementSuite:
            found.extend(node.body)  # type: ignore[attr-defined]
        elif kind in (cst.FunctionDef, cst.ClassDef) or _is_code(kind):
            continue
        else:
            stack.extend(children(node))
    return found


def pair_values(target: cst.BaseExpression, value: cst.BaseExpression,
                table: dict[str, list[cst.BaseExpression]]) -> None:
    """Record ``target = value`` element-wise (``a, b = x, y``; ``a, b = prepare(x, y)`` keeps
    the call: its position decides the role)."""
    if type(target) in _SEQUENCES:
        if type(value) in _SEQUENCES and len(value.elements) == len(target.elements):
            for element, item in zip(target.elements, value.elements, strict=True):
                pair_values(element.value, item.value, table)
        return
    name = dotted(target)
    if name:
        table.setdefault(name, []).append(value)
