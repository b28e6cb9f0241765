"""One pass over a scope's statements: every call and assignment, in execution order, with
the control-flow frames (loops, branches, contexts, inlined helpers) that enclose it.

This is the only place that walks statements; roles, events and groups read its output.
Calls of functions and methods defined in the same module are followed (inlined) so that
a backward or a reset done in a helper counts where the helper is called.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import libcst as cst

from accumlint import frameworks as fw
from accumlint.frameworks.loops import MICROBATCH_PHASES, Phase
from accumlint.model import owned_loops, summaries
from accumlint.model.callgraph import Inline, bind, local_names, parameters
from accumlint.model.names import (
    Branches,
    ImportMap,
    calls_with_branches,
    children,
    derives,
    dotted,
    last_segment,
)

MAX_HELPER_DEPTH = 4
#: at most this many candidate callees of one call are followed (``step_fn = a if x else b``)
MAX_CANDIDATES = 4


class FrameKind(str, Enum):
    LOOP = "loop"
    IF = "if"  # branch "body" or "orelse"
    GUARD = "guard"  # statements after `if cond: continue` run only when cond is false
    WITH = "with"
    HANDLER = "except handler"
    HELPER = "helper call"
    MATCH = "match case"


@dataclass(frozen=True, eq=False)
class Frame:
    """A control construct around a site. ``node`` is the loop / if / with / try / call node
    (for IF, also a conditional expression ``a if cond else b`` around a call in one arm)."""

    kind: FrameKind
    node: cst.CSTNode
    branch: str = ""  # for IF: "body" or "orelse"
    #: in an inlined helper: the condition rewritten into the caller's names (``if update_grad:``
    #: in ``scaler(loss, opt, update_grad=(i + 1) % A == 0)`` tests the caller's boundary)
    bound: cst.BaseExpression | None = None
    #: the inlined call whose names ``bound`` is rewritten from, on first use (rewriting costs)
    binder: Inline | None = None

    @property
    def test(self) -> cst.BaseExpression | None:
        """The condition of an IF or GUARD frame, or a while loop's test; for the IF frame of
        one candidate of ``f = a if cond else b``, ``cond``."""
        if self.binder is not None:
            source = self.node.test if isinstance(self.node, (cst.If, cst.IfExp)) else None
            object.__setattr__(self, "bound", self.binder.rewrite(source) if source is not None else None)
            object.__setattr__(self, "binder", None)
        if self.bound is not None:
            return self.bound
        if isinstance(self.node, (cst.If, cst.While, cst.IfExp)):
            return self.node.test
        return None


@dataclass(eq=False)
class Scope:
    """A function (or the module's top level) whose statements were walked."""

    node: cst.FunctionDef | cst.Module
    class_def: cst.ClassDef | None
    sites: list[Site] = field(default_factory=list)
    loop_spans: dict[cst.CSTNode, tuple[int, int]] = field(default_factory=dict)  # loop → (first, end) order
    statement_orders: dict[int, int] = field(default_factory=dict)  # id(compound statement) → its first order
    #: id(call) → the inlined calls of it; id(inlined call) → the `return` sites of its body
    inlined: dict[int, list[Inline]] = field(default_factory=dict)
    returns: dict[int, list[Site]] = field(default_factory=dict)
    #: in a framework-owned loop: dotted counter name → its value on the first microbatch
    #: (``engine.state.iteration`` → 1; :mod:`accumlint.model.owned_loops`)
    counter_starts: dict[str, int] = field(default_factory=dict)
    #: in a framework-owned loop: dotted names the framework binds → their role's value (``"optimizer"``)
    framework_roles: dict[str, str] = field(default_factory=dict)

    def returns_of(self, call: cst.Call) -> list[Site]:
        """The ``return`` sites (in the helper's names) of the helpers ``call`` was inlined to."""
        found: list[Site] = []
        for inline in self.inlined.get(id(call), ()):
            found.extend(self.returns.get(id(inline), ()))
        return found

    def bound_value(self, expression: cst.BaseExpression, call: cst.Call) -> cst.BaseExpression:
        """``expression``, read in the code around ``call`` (a call in an inlined helper's body),
        rewritten into the scope's own names: a parameter becomes its argument, or its literal
        default when the caller does not pass it (``reduction=loss_reduction`` in a forward called
        as ``model(x, y)`` → ``"mean"``). Unchanged when ``call`` is the scope's own code or the
        value is unknown (``*args``, a parameter the helper reassigns)."""
        site = next((s for s in self.sites if s.call is call), None)
        if site is None or site.inline is None:
            return expression
        root = (dotted(expression) or "").split(".", 1)[0]
        if any(s.inline is site.inline and root in s.targets and s.order < site.order for s in self.sites):
            return expression  # the helper rebinds the parameter before the call
        value, where = site.inline.resolve(expression)
        return value if where is None else expression

    def within(self, loop: cst.CSTNode) -> list[Site]:
        """The sites inside one of this scope's own loops, in execution order."""
        start, end = self.loop_spans[loop]
        return self.sites[start:end]

    @property
    def name(self) -> str:
        return self.node.name.value if isinstance(self.node, cst.FunctionDef) else "<module>"


class _WeakScope:
    """A dataclass field that holds its :class:`Scope` by weak reference.

    A scope lists its sites and each site names its scope: held strongly, that cycle keeps
    the file's whole LibCST tree alive until the garbage collector's next full pass, so the
    memory of a large file is not given back before the next file is parsed. The model's
    scope list owns the scopes; a site read after its model is gone has no scope (None).
    """

    def __set_name__(self, owner: type, name: str) -> None:
        self.attribute = f"_{name}_ref"

    def __get__(self, site: Any, owner: type | None = None) -> Scope:
        if site is None:
            raise AttributeError("no default")  # the dataclass field is required
        return site.__dict__[self.attribute]()

    def __set__(self, site: Any, scope: Scope) -> None:
        site.__dict__[self.attribute] = weakref.ref(scope)


@dataclass(eq=False)
class Site:
    """A call or an assignment at one place of a scope.

    ``order`` is the execution order inside the scope (inlined helper sites included);
    ``frames`` go from the outermost to the innermost construct.
    """

    node: cst.CSTNode  # the Call, or the assignment statement, or the Return
    statement: cst.BaseSmallStatement
    frames: tuple[Frame, ...]
    order: int
    scope: Scope = _WeakScope()  # type: ignore[assignment]  # required: the descriptor has no default
    call: cst.Call | None = None
    targets: tuple[str | None, ...] = ()  # dotted names bound by an assignment (None: not a name)
    value: cst.BaseExpression | None = None  # the assigned value (for an AugAssign: the operand)
    augmented: cst.BaseAugOp | None = None
    is_return: bool = False
    helper: cst.FunctionDef | None = None  # set on sites that came from an inlined helper
    #: the inlined call this site is part of (its bindings and the calls around it)
    inline: Inline | None = None
    #: the library function a call stands for (``self.clip_fn = partial(clip_grad_norm_, ...)``)
    alias: str | None = None
    #: the call was followed into a function of the project (it is no library call of that name)
    followed: bool = False
    #: the framework event this site stands for in a framework-owned loop (``"backward"``: the
    #: framework's backward, or an inherited framework method that runs it)
    framework: str | None = None

    @property
    def in_helper(self) -> bool:
        return self.helper is not None

    @property
    def report(self) -> cst.CSTNode:
        """The node a finding about this site is reported at: the site itself, or the call of
        the helper it is part of when the helper is another module's (the finding belongs in the
        file that calls it) or performs no backward (a clip or update wrapper, correct where it
        is written: the call in the microbatch loop is what runs too often)."""
        if self.inline is None:
            return self.node
        node: cst.CSTNode = self.node
        outside = self.inline.foreign is not None  # `node` is in another module's code
        for inline in self.inline.chain():
            if outside or inline.foreign is not None or not inline.performs_backward:
                node = inline.call
                outside = inline.parent is not None and inline.parent.foreign is not None
            else:
                break
        return node

    @property
    def under_no_grad(self) -> bool:
        """Whether the site runs inside ``with torch.no_grad()`` / ``torch.inference_mode()``
        (no graph is built there)."""
        for frame in self.frames:
            if isinstance(frame.node, cst.With):
                for item in frame.node.items:
                    callee = dotted(item.item.func) if isinstance(item.item, cst.Call) else None
                    if callee and callee.rsplit(".", 1)[-1] in ("no_grad", "inference_mode"):
                        return True
        return False

    def inside(self, node: cst.CSTNode) -> bool:
        """Whether ``node`` (a loop, with, if …) encloses this site."""
        return any(frame.node is node for frame in self.frames)

    def excludes(self, other: Site) -> bool:
        """Whether this site and ``other`` never run in the same pass: they sit in different
        branches of one ``if``, or one is in the body of an ``if cond: continue`` and the other
        after it."""
        mine = {id(frame.node): frame for frame in self.frames}
        for frame in other.frames:
            own = mine.get(id(frame.node))
            if own is None or own.kind is frame.kind is FrameKind.GUARD:
                continue
            if own.kind is frame.kind is FrameKind.IF and own.branch != frame.branch:
                return True
            if {own.kind, frame.kind} == {FrameKind.IF, FrameKind.GUARD}:
                return True
        return False

    def frames_inside(self, node: cst.CSTNode) -> tuple[Frame, ...]:
        """The frames nested inside ``node`` (empty when ``node`` does not enclose the site)."""
        for index, frame in enumerate(self.frames):
            if frame.node is node:
                return self.frames[index + 1 :]
        return ()


def _target_names(target: cst.BaseExpression) -> tuple[str | None, ...]:
    if isinstance(target, (cst.Tuple, cst.List)):
        names: list[str | None] = []
        for element in target.elements:
            value = element.value
            names.extend(_target_names(value) if isinstance(value, (cst.Tuple, cst.List)) else (dotted(value),))
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
    several candidates (the IF frame of its branch of ``f = a if cond else b``)."""

    function: cst.FunctionDef
    owner: ModuleFunctions
    class_def: cst.ClassDef | None = None
    bound: bool = False
    self_value: cst.BaseExpression | None = None
    frame: Frame | None = None


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
        self._method_names: set[str] | None = None
        self._module_values: dict[str, cst.BaseExpression | None] | None = None
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
        """The base classes of ``class_def`` that this module or the project defines."""
        found = []
        for base in class_def.bases:
            located = self.class_named(dotted(base.value))
            if located is not None:
                found.append(located)
        return found

    def class_named(self, name: str | None) -> tuple[ModuleFunctions, cst.ClassDef] | None:
        """The class a (dotted) name refers to here: this module's, or one imported from the project."""
        if not name:
            return None
        local = self.classes.get(name)
        if local is not None:
            return self, local
        found = self.imported(name)
        return found if found is not None and isinstance(found[1], cst.ClassDef) else None  # type: ignore[return-value]

    def imported(self, name: str) -> tuple[ModuleFunctions, cst.FunctionDef | cst.ClassDef] | None:
        """A project module's top-level function or class that ``name`` refers to through this
        module's imports (None: not imported, not a project module, or not found)."""
        if self.project is None:
            return None
        qualified = self.imports.qualify(name)
        if qualified is None:
            return None
        return self.project.lookup(self, qualified)  # type: ignore[attr-defined]

    def method(self, class_def: cst.ClassDef, name: str,
               skip_own: bool = False) -> tuple[cst.FunctionDef, ModuleFunctions, cst.ClassDef] | None:
        """``name`` looked up on ``class_def`` and then its bases, depth first (a class hierarchy
        with a cycle is cut); ``skip_own``: start at the bases (``super().name``)."""
        seen: set[int] = set()
        stack: list[tuple[ModuleFunctions, cst.ClassDef, bool]] = [(self, class_def, skip_own)]
        while stack and len(seen) < 64:
            owner, current, skip = stack.pop(0)
            if id(current) in seen:
                continue
            seen.add(id(current))
            if not skip:
                found = owner.methods.get((current, name))
                if found is not None:
                    return found, owner, current
            stack[0:0] = [(o, c, False) for o, c in owner.bases(current)]
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

    def _derives(self, class_def: cst.ClassDef, base: cst.ClassDef) -> bool:
        seen: set[int] = set()
        stack = [class_def]
        while stack and len(seen) < 64:
            current = stack.pop()
            if id(current) in seen:
                continue
            seen.add(id(current))
            for _, parent in self.bases(current):
                if parent is base:
                    return True
                stack.append(parent)
        return False

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
                        _pair(statement.targets[0].target, statement.value, table)
        return table

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
                assigned = [v for (target, v) in _assignments(caller) if target == value.value]
                value = assigned[0] if len(assigned) == 1 else None
            located = self.class_named(dotted(value.func)) if isinstance(value, cst.Call) else None
            if located is None or (found is not None and located[1] is not found[1]):
                return None
            found = located
        return found

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

    def module_value(self, name: str) -> cst.BaseExpression | None:
        """The value of the one module-level assignment of ``name`` (under ``if``/``try`` at the
        top level too); None when the module binds it otherwise or more than once."""
        if self._module_values is None:
            table: dict[str, list[cst.BaseExpression | None]] = {}
            for statement in _statements(self._module):
                if isinstance(statement, cst.Assign) and len(statement.targets) == 1:
                    pairs: dict[str, list[cst.BaseExpression]] = {}
                    _pair(statement.targets[0].target, statement.value, pairs)
                    for target, values in pairs.items():
                        table.setdefault(target, []).extend(values)
                    for target in _target_names(statement.targets[0].target):
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
                names.update(n for n in _target_names(node.target) if n)  # type: ignore[attr-defined]
            elif kind is cst.AsName and not in_function:
                names.update(n for n in _target_names(node.name) if n)  # type: ignore[attr-defined]
            elif kind is cst.Global:
                names.update(item.name.value for item in node.names)  # type: ignore[attr-defined]
            elif derives(kind, cst.BaseExpression):
                continue  # no statement inside an expression
            stack.extend((child, in_function or kind is cst.FunctionDef) for child in children(node))
        return names

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

    def scopes(self) -> list[tuple[cst.FunctionDef, cst.ClassDef | None]]:
        """Every module-level function and method, in source order."""
        return list(self.class_of.items())


_BACKWARD_NAMES = frozenset({"backward", fw.lightning.MANUAL_BACKWARD})


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


def _assignments(function: cst.FunctionDef) -> list[tuple[str, cst.BaseExpression]]:
    """(name, value) of every single-target assignment to a plain name in ``function``."""
    found: list[tuple[str, cst.BaseExpression]] = []
    for statement in _statements(function.body):
        if isinstance(statement, cst.Assign) and len(statement.targets) == 1:
            pairs: dict[str, list[cst.BaseExpression]] = {}
            _pair(statement.targets[0].target, statement.value, pairs)
            found.extend((name, value) for name, values in pairs.items() for value in values if "." not in name)
    return found


def _pair(target: cst.BaseExpression, value: cst.BaseExpression, table: dict[str, list[cst.BaseExpression]]) -> None:
    """Record ``target = value`` element-wise (``a, b = x, y``; ``a, b = prepare(x, y)`` keeps
    the call: its position decides the role)."""
    if isinstance(target, (cst.Tuple, cst.List)):
        if isinstance(value, (cst.Tuple, cst.List)) and len(value.elements) == len(target.elements):
            for element, item in zip(target.elements, value.elements, strict=True):
                _pair(element.value, item.value, table)
        return
    name = dotted(target)
    if name:
        table.setdefault(name, []).append(value)


class _Walker:
    def __init__(self, scope: Scope, functions: ModuleFunctions) -> None:
        self.scope = scope
        self.functions = functions
        self.order = 0
        self.helper_stack: list[cst.FunctionDef] = []
        self.inline: Inline | None = None  # the inlined call being walked (None: the scope's own code)
        self.owner = functions  # the module whose code is being walked (another one inside a project helper)
        #: (id of the inlined call or 0, name) → the value last assigned to it (function-valued names)
        self.values: dict[tuple[int, str], cst.BaseExpression] = {}

    # --- statements -----------------------------------------------------------------------
    def block(self, statements: tuple[cst.BaseStatement, ...] | list[cst.BaseStatement],
              frames: tuple[Frame, ...]) -> None:
        guards: tuple[Frame, ...] = ()
        for statement in statements:
            self.statement(statement, frames + guards)
            guards = guards + tuple(
                Frame(FrameKind.GUARD, guard, "", None, self._binder(guard.test))
                for guard in _continue_guards(statement))

    def _binder(self, test: cst.BaseExpression) -> Inline | None:
        """The inlined call whose names a helper's condition is read through (None: the scope's
        own code, or a condition that reads none of the helper's parameters)."""
        if self.inline is None or not self.inline.reads_outer(test):
            return None
        return self.inline

    def suite(self, body: cst.BaseSuite, frames: tuple[Frame, ...]) -> None:
        if isinstance(body, cst.IndentedBlock):
            self.block(body.body, frames)
        else:  # SimpleStatementSuite: `if x: a(); b()`
            for small in body.body:
                self.small(small, frames)

    def statement(self, statement: cst.BaseStatement, frames: tuple[Frame, ...]) -> None:
        if not self.helper_stack:
            self.scope.statement_orders.setdefault(id(statement), self.order)
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                self.small(small, frames)
        elif isinstance(statement, cst.If):
            self.expression(statement.test, statement, frames)
            binder = self._binder(statement.test)
            self.suite(statement.body, frames + (Frame(FrameKind.IF, statement, "body", None, binder),))
            if statement.orelse is not None:
                inner = frames + (Frame(FrameKind.IF, statement, "orelse", None, binder),)
                if isinstance(statement.orelse, cst.If):
                    self.statement(statement.orelse, inner)
                else:
                    self.suite(statement.orelse.body, inner)
        elif isinstance(statement, (cst.For, cst.While)):
            loop = frames + (Frame(FrameKind.LOOP, statement),)
            if isinstance(statement, cst.For):
                self.expression(statement.iter, statement, frames)
                start = self.order
                self.record_assign(statement, (statement.target,), statement.iter, None, loop)
            else:
                start = self.order
                self.expression(statement.test, statement, loop)
            self.suite(statement.body, loop)
            # sites[start:end] are exactly the sites inside the loop (order == index); a helper's
            # loop counts at its first inlined call (a micro-loop whose update is the caller's)
            if not self.helper_stack:
                self.scope.loop_spans[statement] = (start, self.order)
            else:
                self.scope.loop_spans.setdefault(statement, (start, self.order))
            if statement.orelse is not None:
                self.suite(statement.orelse.body, frames)
        elif isinstance(statement, cst.With):
            for item in statement.items:
                self.expression(item.item, statement, frames)
                if item.asname is not None:
                    self.record_assign(statement, (item.asname.name,), item.item, None, frames)
            self.suite(statement.body, frames + (Frame(FrameKind.WITH, statement),))
        elif isinstance(statement, cst.Try):
            self.suite(statement.body, frames)
            for handler in statement.handlers:
                self.suite(handler.body, frames + (Frame(FrameKind.HANDLER, handler),))
            if statement.orelse is not None:
                self.suite(statement.orelse.body, frames)
            if statement.finalbody is not None:
                self.suite(statement.finalbody.body, frames)
        elif isinstance(statement, cst.Match):
            self.expression(statement.subject, statement, frames)
            for case in statement.cases:
                self.suite(case.body, frames + (Frame(FrameKind.MATCH, case),))
        # nested FunctionDef / ClassDef: separate scopes, not walked here

    def small(self, small: cst.BaseSmallStatement, frames: tuple[Frame, ...]) -> None:
        kind = type(small)
        if kind is cst.Assign:
            self.expression(small.value, small, frames)
            self.record_assign(small, tuple(t.target for t in small.targets), small.value, None, frames)
        elif kind is cst.AnnAssign:
            if small.value is not None:
                self.expression(small.value, small, frames)
                self.record_assign(small, (small.target,), small.value, None, frames)
        elif kind is cst.AugAssign:
            self.expression(small.value, small, frames)
            self.record_assign(small, (small.target,), small.value, small.operator, frames)
        elif kind is cst.Return:
            if small.value is not None:
                self.expression(small.value, small, frames)
                self.add(Site(small, small, frames, self.order, self.scope, value=small.value, is_return=True))
        elif kind is cst.Expr:
            self.expression(small.value, small, frames)

    # --- expressions ------------------------------------------------------------------------
    def expression(self, expression: cst.CSTNode, statement: cst.CSTNode, frames: tuple[Frame, ...]) -> None:
        calls, branches = self.owner.calls_and_branches(expression)
        for call in calls:
            arms = branches.get(id(call))
            if arms:  # an arm of `a if cond else b` runs like a branch of `if cond:`
                frames_here = frames + tuple(Frame(FrameKind.IF, node, branch) for node, branch in arms)
            else:
                frames_here = frames
            site = Site(call, statement, frames_here, self.order, self.scope, call=call)  # type: ignore[arg-type]
            self.add(site)
            if len(self.helper_stack) >= MAX_HELPER_DEPTH:
                continue
            for callee in self.callees(call):
                if isinstance(callee, str):
                    site.alias = callee
                    continue
                function = callee.function
                site.followed = True
                if function in self.helper_stack or function is self.scope.node:
                    continue  # recursion: cut
                self.enter(call, callee, frames_here + ((callee.frame,) if callee.frame is not None else ()))

    def from_outside(self, func: cst.BaseExpression) -> bool:
        """Whether the root name of ``func`` is a parameter of the code being walked (``self``
        included): an object its caller passed in, whose class this code does not show."""
        function = self.inline.function if self.inline is not None else self.scope.node
        if not isinstance(function, cst.FunctionDef):
            return False
        root = (dotted(func) or "").split(".", 1)[0]
        return bool(root) and any(param.name.value == root for param in parameters(function))

    def enter(self, call: cst.Call, callee: Callee, frames: tuple[Frame, ...]) -> None:
        """Walk ``callee``'s body as part of this scope, its parameters bound to ``call``'s arguments."""
        function = callee.function
        closure = callee.owner.enclosing.get(function) is not None and not callee.bound
        inline = Inline(call, function, self.inline, bind(function, call, callee.self_value, callee.bound),
                        callee.class_def, callee.owner if callee.owner is not self.functions else None,
                        callee.owner.performs_backward(function), closure)
        if closure:
            inline._locals = callee.owner.local_names(function)
        self.scope.inlined.setdefault(id(call), []).append(inline)
        saved = self.inline, self.owner
        self.inline, self.owner = inline, callee.owner
        self.helper_stack.append(function)
        try:
            self.suite(function.body, frames + (Frame(FrameKind.HELPER, call),))
        finally:
            self.helper_stack.pop()
            self.inline, self.owner = saved

    # --- call resolution ----------------------------------------------------------------------
    def callees(self, call: cst.Call) -> list[Callee | str]:
        """The functions ``call`` may reach (several for a function-valued name with several
        values), or the dotted name of the library function it stands for (a ``partial``)."""
        found = self.callable_of(call.func, self.inline, 0)
        if not found and self.from_outside(call.func):
            row = _loss_scaler_convention(call)
            if row is not None:  # a timm-style scaler whose class the project does not show
                return [Callee(summaries.function(row), summaries.owner_of(row), None, True, None)]  # type: ignore[arg-type]
        return found[:MAX_CANDIDATES]

    def current_class(self, inline: Inline | None) -> tuple[ModuleFunctions, cst.ClassDef] | None:
        if inline is not None:
            owner = inline.foreign if inline.foreign is not None else self.functions
            if inline.class_def is not None:
                return owner, inline.class_def  # type: ignore[return-value]
            if not inline.closure:
                return None
            inline = inline.parent
            return self.current_class(inline)
        return (self.functions, self.scope.class_def) if self.scope.class_def is not None else None

    def module_of(self, inline: Inline | None) -> ModuleFunctions:
        while inline is not None and inline.closure and inline.foreign is None:
            inline = inline.parent
        if inline is not None and inline.foreign is not None:
            return inline.foreign  # type: ignore[return-value]
        return self.functions

    def callable_of(self, func: cst.BaseExpression, inline: Inline | None, depth: int) -> list[Callee | str]:
        if depth > 4:
            return []
        if inline is not None:
            value, where = inline.resolve(func)
            if where is not inline or value is not func:
                return self.callable_of(value, where, depth + 1)
        owner = self.module_of(inline)
        row = summaries.lookup(owner.imports.qualify(dotted(func))) if summaries.LIBRARY_SUMMARIES else None
        if row is not None:  # a library function described by a table row
            return [Callee(summaries.function(row), summaries.owner_of(row), None, row.method,  # type: ignore[arg-type]
                           None)]
        if isinstance(func, cst.Name):
            name = func.value
            value = self.values.get((id(inline) if inline is not None else 0, name))
            if value is not None:
                return self.value_callable(value, inline, depth)
            function = owner.functions.get(name)
            if function is not None and owner.class_of.get(function) is None:
                return [Callee(function, owner)]
            found = owner.imported(name) if name not in owner.classes else None
            if found is not None and isinstance(found[1], cst.FunctionDef):
                return [Callee(found[1], found[0])]
            if found is None and name not in owner.classes:
                located = self.class_of_value(func, inline, depth + 1)  # an instance called
                if located is not None:
                    method = located[0].method(located[1], "__call__") or located[0].method(located[1], "forward")
                    return [Callee(method[0], method[1], located[1], True, func)] if method else []
            return []
        if isinstance(func, cst.Attribute):
            method = func.attr.value
            receiver = func.value
            if (isinstance(receiver, cst.Call) and isinstance(receiver.func, cst.Name)
                    and receiver.func.value == "super"):
                current = self.current_class(inline)
                if current is None:
                    return []
                found = current[0].method(current[1], method, skip_own=True)
                return [Callee(found[0], found[1], current[1], True, cst.Name("self"))] if found else []
            located = self.class_of_value(receiver, inline, depth)
            if located is not None:
                found = located[0].method(located[1], method)
                if found is not None:
                    self_value = receiver if isinstance(receiver, (cst.Name, cst.Attribute)) else None
                    return [Callee(found[0], found[1], located[1], True, self_value)]
            if located is not None and dotted(receiver) == "self":
                below = located[0].subclass_method(located[1], method)  # a mixin calls what a subclass defines
                if below is not None:
                    return [Callee(below[0], below[1], below[2], True, cst.Name("self"))]
            name = dotted(receiver)
            if located is None and name and name.split(".", 1)[0] in owner.imports.names:
                # `import utils` ... `utils.train_micro(...)`: a function of an imported project module
                found = owner.imported(f"{name}.{method}")
                if found is not None and isinstance(found[1], cst.FunctionDef):
                    return [Callee(found[1], found[0])]
            if name == "self" or (name and name.startswith("self.")):
                current = self.current_class(inline)
                if current is not None and name != "self":
                    attribute = f"{name}.{method}"
                    values = current[0].attributes(current[1]).get(attribute, [])
                    if len(values) == 1:
                        return self.value_callable(values[0], inline, depth)
                elif current is not None:
                    values = current[0].attributes(current[1]).get(f"self.{method}", [])
                    if len(values) == 1:
                        return self.value_callable(values[0], inline, depth)
            return []
        return []

    def value_callable(self, value: cst.BaseExpression, inline: Inline | None, depth: int) -> list[Callee | str]:
        """What calling a name bound to ``value`` reaches."""
        if isinstance(value, cst.IfExp):
            found: list[Callee | str] = []
            bound = inline.rewrite(value.test) if inline is not None else None
            for branch, arm in (("body", value.body), ("orelse", value.orelse)):
                frame = Frame(FrameKind.IF, value, branch, bound)
                for callee in self.callable_of(arm, inline, depth + 1):
                    found.append(Callee(callee.function, callee.owner, callee.class_def, callee.bound,
                                        callee.self_value, frame) if isinstance(callee, Callee) else callee)
            return found
        if isinstance(value, cst.Call):
            name = dotted(value.func) or ""
            if last_segment(name) == "partial" and value.args and value.args[0].keyword is None:
                target = value.args[0].value
                found = self.callable_of(target, inline, depth + 1)
                if found:
                    return []  # a partial of a project function: its bindings are shifted, not followed
                text = dotted(target)
                return [text] if text else []
            row = summaries.lookup(f"{self.module_of(inline).imports.qualify(dotted(value.func))}.__call__") if (
                summaries.LIBRARY_SUMMARIES) else None
            if row is not None:  # an instance of a library class whose __call__ a table row describes
                return [Callee(summaries.function(row), summaries.owner_of(row), None, True,  # type: ignore[arg-type]
                               None)]
            located = self.class_of_value(value, inline, depth)
            if located is not None:  # an instance called: its __call__ (an nn.Module's: forward)
                method = located[0].method(located[1], "__call__") or located[0].method(located[1], "forward")
                return [Callee(method[0], method[1], located[1], True, None)] if method else []
            return []
        if isinstance(value, (cst.Name, cst.Attribute)):
            return self.callable_of(value, inline, depth + 1)
        return []

    def class_of_value(self, value: cst.BaseExpression, inline: Inline | None,
                       depth: int) -> tuple[ModuleFunctions, cst.ClassDef] | None:
        """The project class whose instance ``value`` is, when the code shows it: a constructor
        call, a name or ``self`` attribute assigned one, the class of ``self``, or the one class
        that defines every method the function calls on the name."""
        if depth > 4:
            return None
        owner = self.module_of(inline)
        if isinstance(value, cst.Call):
            return owner.class_named(dotted(value.func))
        name = dotted(value)
        if not name:
            return None
        if name == "self":
            return self.current_class(inline)
        if inline is not None:
            resolved, where = inline.resolve(value)
            if where is not inline or resolved is not value:
                return self.class_of_value(resolved, where, depth + 1)
        bound = self.values.get((id(inline) if inline is not None else 0, name))
        if bound is not None:
            return self.class_of_value(bound, inline, depth + 1)
        if name.startswith("self."):
            current = self.current_class(inline)
            if current is not None:
                values = current[0].attributes(current[1]).get(name, [])
                if len(values) == 1 and isinstance(values[0], cst.Call):
                    return current[0].class_named(dotted(values[0].func))
            return None
        function = inline.function if inline is not None else self.scope.node
        if isinstance(function, cst.FunctionDef) and "." not in name:
            passed = owner.passed_class(function, name) if inline is None else None
            value = owner.module_value(name) if passed is None else None
            if isinstance(value, cst.Call) and name not in owner.local_names(function):
                # a module-level object the function reads as a global (`manager = Manager(model)`)
                passed = owner.class_named(dotted(value.func))
            return passed or owner.duck_class(owner.receivers(function).get(name, set()))
        return None

    def record_assign(self, statement: cst.CSTNode, targets: tuple[cst.BaseExpression, ...],
                      value: cst.BaseExpression, operator: cst.BaseAugOp | None,
                      frames: tuple[Frame, ...]) -> None:
        names: list[str | None] = []
        for target in targets:
            names.extend(_target_names(target))
        if operator is None and len(targets) == 1 and value is not None:
            key = id(self.inline) if self.inline is not None else 0
            pairs: dict[str, list[cst.BaseExpression]] = {}
            _pair(targets[0], value, pairs)
            for name, values in pairs.items():
                if not self._wraps_itself(name, values[-1]):
                    self.values[(key, name)] = values[-1]
        self.add(Site(statement, statement, frames, self.order, self.scope,  # type: ignore[arg-type]
                      targets=tuple(names), value=value, augmented=operator))

    def _wraps_itself(self, name: str, value: cst.BaseExpression) -> bool:
        """``model = torch.compile(model)``, ``model = DistributedDataParallel(model, ...)``, or a
        project helper that returns such a wrapper of its argument (``model = wrap(model)``):
        calling the result runs the same module, so the name keeps the value it had."""
        if not isinstance(value, cst.Call):
            return False
        qualified = self.module_of(self.inline).imports.qualify(dotted(value.func))
        first = value.args[0].value if value.args and value.args[0].keyword is None else None
        if qualified in fw.pytorch.FORWARD_WRAPPERS:
            return first is not None and dotted(first) == name
        inlined = self.scope.inlined.get(id(value), [])
        if len(inlined) != 1:
            return False
        returns = self.scope.returns.get(id(inlined[0]), [])
        return bool(returns) and all(self._returns_argument(site, name) for site in returns)

    def _returns_argument(self, site: Site, name: str) -> bool:
        """Whether a helper's ``return`` gives back the caller's ``name`` (the parameter bound to
        it), wrapped or not (``return DistributedDataParallel(model, ...)``)."""
        value = site.value
        inline = site.inline
        if isinstance(value, cst.Call) and inline is not None:
            owner = inline.foreign if inline.foreign is not None else self.functions
            if owner.imports.qualify(dotted(value.func)) not in fw.pytorch.FORWARD_WRAPPERS:  # type: ignore[attr-defined]
                return False
            value = value.args[0].value if value.args and value.args[0].keyword is None else None
        if not isinstance(value, cst.Name) or inline is None or inline.parent is not None:
            return False
        bound = inline.bindings.get(value.value)
        return bound is not None and dotted(bound) == name

    def hook(self, function: cst.FunctionDef) -> None:
        """Walk a framework hook's body as the body of the loop that calls it: the function node
        stands for that loop, its parameters (batch, batch_idx) for the loop's targets."""
        loop = (Frame(FrameKind.LOOP, function),)
        start = self.order
        params = function.params
        names = [cst.Name(p.name.value) for p in (*params.posonly_params, *params.params, *params.kwonly_params)
                 if p.name.value != "self"]
        self.add(Site(function, function, loop, self.order, self.scope,  # type: ignore[arg-type]
                      targets=tuple(n.value for n in names), value=None))
        self.suite(function.body, loop)
        self.scope.loop_spans[function] = (start, self.order)

    def owned(self, loop: owned_loops.OwnedLoop) -> None:
        """Walk a framework-owned loop (:mod:`accumlint.model.owned_loops`): its epoch hooks in
        a loop standing for the epochs, its per-batch functions in the framework's order inside
        the loop the per-batch function's node stands for, the framework's backward (a site on
        that node) where the framework runs it."""
        outer: tuple[Frame, ...] = ()
        epoch_start = self.order
        if loop.epoch_node is not None:
            outer = (Frame(FrameKind.LOOP, loop.epoch_node),)
        for function, owner in loop.functions(Phase.EPOCH_START):
            self._part(function, owner, outer)
        frames = outer + (Frame(FrameKind.LOOP, loop.body),)
        start = self.order
        params = loop.body.params
        names = [p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)
                 if p.name.value != "self"]
        self.add(Site(loop.body, loop.body, frames, self.order, self.scope,  # type: ignore[arg-type]
                      targets=tuple(names), value=None))
        for phase in MICROBATCH_PHASES:
            if phase is Phase.AFTER_BACKWARD and loop.framework_backward:
                self.add(Site(loop.body, loop.body, frames, self.order, self.scope,  # type: ignore[arg-type]
                              framework="backward"))
            for function, owner in loop.functions(phase):
                self._part(function, owner, frames)
        self.scope.loop_spans[loop.body] = (start, self.order)
        for function, owner in loop.functions(Phase.EPOCH_END):
            self._part(function, owner, outer)
        if loop.epoch_node is not None:
            self.scope.loop_spans[loop.epoch_node] = (epoch_start, self.order)
        self.scope.counter_starts = dict(loop.counters)
        self.scope.framework_roles = dict(getattr(loop.row, "attributes", {}))
        for site in self.scope.sites[start:]:
            if (site.call is not None and site.framework is None and not site.followed and site.inline is None
                    and owned_loops.is_inherited_backward(self.functions, site.call, loop.body_class,
                                                          loop.backward_methods, loop.backward_pattern)):
                site.framework = "backward"

    def _part(self, function: cst.FunctionDef, owner: cst.ClassDef | None, frames: tuple[Frame, ...]) -> None:
        """One user function of an owned loop, walked with ``self`` meaning its own class."""
        own = self.scope.class_def
        self.scope.class_def = owner
        try:
            self.suite(function.body, frames)
        finally:
            self.scope.class_def = own

    def add(self, site: Site) -> None:
        if self.helper_stack:
            site.helper = self.helper_stack[-1]
            site.inline = self.inline
            if site.is_return:
                self.scope.returns.setdefault(id(self.inline), []).append(site)
        self.scope.sites.append(site)
        self.order += 1


_GUARD_CONTAINERS = frozenset({cst.If, cst.With, cst.Try})


def _continue_guards(statement: cst.BaseStatement) -> list[cst.If]:
    """The `if cond: continue` statements in ``statement`` (itself, or nested in its branches,
    contexts and try blocks, not in inner loops) after which the rest of the loop body runs
    only when ``cond`` was false: `if A > 1: if (i + 1) % A: continue` gates what follows."""
    if _is_continue_guard(statement):
        return [statement]  # type: ignore[list-item]
    found: list[cst.If] = []
    if type(statement) in _GUARD_CONTAINERS:
        for inner in _blocks_of(statement):
            found.extend(_continue_guards(inner))
    return found


def _blocks_of(statement: cst.BaseCompoundStatement) -> list[cst.BaseStatement]:
    suites: list[cst.BaseSuite] = [statement.body]
    orelse = getattr(statement, "orelse", None)
    if isinstance(orelse, cst.If):
        return [*_suite_statements(statement.body), orelse]
    if orelse is not None:
        suites.append(orelse.body)
    for handler in getattr(statement, "handlers", ()):
        suites.append(handler.body)
    finalbody = getattr(statement, "finalbody", None)
    if finalbody is not None:
        suites.append(finalbody.body)
    return [inner for suite in suites for inner in _suite_statements(suite)]


def _suite_statements(suite: cst.BaseSuite) -> list[cst.BaseStatement]:
    return list(suite.body) if isinstance(suite, cst.IndentedBlock) else []


def _is_continue_guard(statement: cst.BaseStatement) -> bool:
    """`if cond: continue` (no else): the rest of the loop body runs only when cond is false."""
    if type(statement) is not cst.If or statement.orelse is not None:
        return False
    body = statement.body
    last: cst.CSTNode | None = None
    if isinstance(body, cst.IndentedBlock) and body.body:
        final = body.body[-1]
        if isinstance(final, cst.SimpleStatementLine) and final.body:
            last = final.body[-1]
    elif isinstance(body, cst.SimpleStatementSuite) and body.body:
        last = body.body[-1]
    return isinstance(last, cst.Continue)


def walk_scopes(module: cst.Module, project: object | None = None,
                name: str = "") -> tuple[list[Scope], ModuleFunctions]:
    """Walk the module's top level and every module-level function and method; ``project``
    (an :class:`accumlint.project.ProjectView`) lets calls of other project modules' functions
    be followed."""
    functions = ModuleFunctions(module, project, name)
    owned = owned_loops.find(module, functions)
    scopes: list[Scope] = []
    top = Scope(module, None)
    _Walker(top, functions).block(
        [s for s in module.body if not isinstance(s, (cst.FunctionDef, cst.ClassDef))], ()
    )
    scopes.append(top)
    for function, class_def in functions.scopes():
        scope = Scope(function, class_def)
        walker = _Walker(scope, functions)
        if function in owned:
            walker.owned(owned[function])
        elif is_microbatch_hook(function, class_def):
            walker.hook(function)
        else:
            walker.suite(function.body, ())
        scopes.append(scope)
    return scopes, functions


def is_microbatch_hook(function: cst.FunctionDef, class_def: cst.ClassDef | None) -> bool:
    """A method the framework calls once per microbatch: ``training_step`` of a LightningModule
    (the framework rows in ``accumlint.frameworks`` list both)."""
    return (
        class_def is not None
        and function.name.value in fw.lightning.MICROBATCH_HOOKS
        and any(last_segment(dotted(base.value)) in fw.lightning.MODULE_BASES for base in class_def.bases)
    )


def _loss_scaler_convention(call: cst.Call) -> summaries.Summary | None:
    """The summary of ``loss_scaler(loss, optimizer, ..., update_grad=flag)`` when the call
    follows the timm convention (:data:`accumlint.frameworks.timm.LOSS_SCALER_CONVENTION`): named like a
    scaler, loss and optimizer passed by position, the gate by keyword. Asked only for an
    object passed in (:meth:`from_outside`): a library class built in view is not guessed."""
    if not fw.timm.LOSS_SCALER_NAME.search(last_segment(dotted(call.func)) or ""):
        return None
    positional_args = [arg for arg in call.args if arg.keyword is None]
    if len(positional_args) < 2 or any(arg.star for arg in call.args):
        return None
    gates = [arg.keyword.value for arg in call.args if arg.keyword is not None
             and arg.keyword.value in fw.timm.LOSS_SCALER_CONVENTION]
    return fw.timm.LOSS_SCALER_CONVENTION[gates[0]] if len(gates) == 1 else None
