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

from accumlint.model import frameworks as fw
from accumlint.model.names import Branches, calls_with_branches, children, derives, dotted, last_segment

MAX_HELPER_DEPTH = 3


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

    @property
    def test(self) -> cst.BaseExpression | None:
        """The condition of an IF or GUARD frame, or a while loop's test."""
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

    @property
    def in_helper(self) -> bool:
        return self.helper is not None

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


class ModuleFunctions:
    """Functions of the module by the names a call can use: ``f`` (module level) and ``Class.m``."""

    def __init__(self, module: cst.Module) -> None:
        self.functions: dict[str, cst.FunctionDef] = {}
        self.methods: dict[tuple[cst.ClassDef, str], cst.FunctionDef] = {}
        self.class_of: dict[cst.FunctionDef, cst.ClassDef | None] = {}
        # id(expression) → its calls and their conditional-expression arms (the tree outlives this)
        self._calls: dict[int, tuple[list[cst.Call], dict[int, Branches]]] = {}
        # every def at any depth (nested helpers, defs under `if __name__ == ...`); a method
        # is a def directly in a class body
        stack: list[tuple[cst.CSTNode, cst.ClassDef | None]] = [(module, None)]
        while stack:
            node, owner = stack.pop()
            for child in reversed(children(node)):
                kind = type(child)  # exact types: isinstance on LibCST's (ABC) node classes is slow here
                if kind is cst.FunctionDef:
                    self.class_of[child] = owner
                    if owner is not None:
                        self.methods.setdefault((owner, child.name.value), child)
                    else:
                        self.functions.setdefault(child.name.value, child)
                    stack.append((child, None))
                elif kind is cst.ClassDef:
                    stack.append((child.body, child))
                elif (kind is cst.IndentedBlock or kind is cst.SimpleStatementSuite) and owner is not None:
                    stack.append((child, owner))
                elif not _is_code(kind):
                    stack.append((child, None if type(node) is not cst.IndentedBlock else owner))

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
            return self.methods.get((class_def, func.attr.value))
        return None

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


class _Walker:
    def __init__(self, scope: Scope, functions: ModuleFunctions) -> None:
        self.scope = scope
        self.functions = functions
        self.order = 0
        self.helper_stack: list[cst.FunctionDef] = []

    # --- statements -----------------------------------------------------------------------
    def block(self, statements: tuple[cst.BaseStatement, ...] | list[cst.BaseStatement],
              frames: tuple[Frame, ...]) -> None:
        guards: tuple[Frame, ...] = ()
        for statement in statements:
            self.statement(statement, frames + guards)
            guards = guards + tuple(Frame(FrameKind.GUARD, guard) for guard in _continue_guards(statement))

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
            self.suite(statement.body, frames + (Frame(FrameKind.IF, statement, "body"),))
            if statement.orelse is not None:
                inner = frames + (Frame(FrameKind.IF, statement, "orelse"),)
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
            if not self.helper_stack:
                # sites[start:end] are exactly the sites inside the loop (order == index)
                self.scope.loop_spans[statement] = (start, self.order)
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
        calls, branches = self.functions.calls_and_branches(expression)
        for call in calls:
            arms = branches.get(id(call))
            if arms:  # an arm of `a if cond else b` runs like a branch of `if cond:`
                frames_here = frames + tuple(Frame(FrameKind.IF, node, branch) for node, branch in arms)
            else:
                frames_here = frames
            self.add(Site(call, statement, frames_here, self.order, self.scope, call=call))  # type: ignore[arg-type]
            helper = self.functions.resolve(call, self.scope.class_def)
            if (
                helper is not None
                and helper not in self.helper_stack
                and helper is not self.scope.node
                and len(self.helper_stack) < MAX_HELPER_DEPTH
            ):
                self.helper_stack.append(helper)
                self.suite(helper.body, frames_here + (Frame(FrameKind.HELPER, call),))
                self.helper_stack.pop()

    def record_assign(self, statement: cst.CSTNode, targets: tuple[cst.BaseExpression, ...],
                      value: cst.BaseExpression, operator: cst.BaseAugOp | None,
                      frames: tuple[Frame, ...]) -> None:
        names: list[str | None] = []
        for target in targets:
            names.extend(_target_names(target))
        self.add(Site(statement, statement, frames, self.order, self.scope,  # type: ignore[arg-type]
                      targets=tuple(names), value=value, augmented=operator))

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

    def add(self, site: Site) -> None:
        if self.helper_stack:
            site.helper = self.helper_stack[-1]
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


def walk_scopes(module: cst.Module) -> tuple[list[Scope], ModuleFunctions]:
    """Walk the module's top level and every module-level function and method."""
    functions = ModuleFunctions(module)
    scopes: list[Scope] = []
    top = Scope(module, None)
    _Walker(top, functions).block(
        [s for s in module.body if not isinstance(s, (cst.FunctionDef, cst.ClassDef))], ()
    )
    scopes.append(top)
    for function, class_def in functions.scopes():
        scope = Scope(function, class_def)
        walker = _Walker(scope, functions)
        if is_microbatch_hook(function, class_def):
            walker.hook(function)
        else:
            walker.suite(function.body, ())
        scopes.append(scope)
    return scopes, functions


def is_microbatch_hook(function: cst.FunctionDef, class_def: cst.ClassDef | None) -> bool:
    """A method the framework calls once per microbatch: ``training_step`` of a LightningModule
    (the framework table in ``frameworks.py`` lists both)."""
    return (
        class_def is not None
        and function.name.value in fw.MICROBATCH_HOOKS
        and any(last_segment(dotted(base.value)) in fw.LIGHTNING_MODULE_BASES for base in class_def.bases)
    )
