"""One pass over a scope's statements: every call and assignment, in execution order, with
the control-flow frames (loops, branches, contexts, inlined helpers) that enclose it.

This is the only place that walks statements; roles, events and groups read its output.
Calls of functions and methods defined in the same module are followed (inlined) so that
a backward or a reset done in a helper counts where the helper is called.

What the walk produces is declared in :mod:`accumlint.model.scopes`; the module's functions by
name in :mod:`accumlint.model.module_functions`; which functions a call reaches in
:mod:`accumlint.model.call_resolution`.
"""

from __future__ import annotations

import libcst as cst

from accumlint import frameworks as fw
from accumlint.frameworks.loops import MICROBATCH_PHASES, Phase
from accumlint.model import owned_loops, summaries
from accumlint.model.call_resolution import CallResolution
from accumlint.model.callgraph import Inline, bind, parameters
from accumlint.model.module_functions import Callee, ModuleFunctions, pair_values, target_names
from accumlint.model.names import (
    dotted,
    last_segment,
)
from accumlint.model.scopes import Frame, FrameKind, Scope, Site

__all__ = ["is_microbatch_hook", "is_update_hook", "walk_scopes"]

MAX_HELPER_DEPTH = 4
#: at most this many candidate callees of one call are followed (``step_fn = a if x else b``)
MAX_CANDIDATES = 4


class _Walker(CallResolution):
    def __init__(self, scope: Scope, functions: ModuleFunctions) -> None:
        self.scope = scope
        self.functions = functions
        self.order = 0
        self.helper_stack: list[cst.FunctionDef] = []
        self.inline: Inline | None = None  # the inlined call being walked (None: the scope's own code)
        self.owner = functions  # the module whose code is being walked (another one inside a project helper)
        #: (id of the inlined call or 0, name) → the value last assigned to it (function-valued names)
        self.values: dict[tuple[int, str], cst.BaseExpression] = {}
        #: the statements that end one iteration of the loop being walked: ``continue``, and in a
        #: framework hook walked as a loop's body (:meth:`hook`) its own ``return`` too
        self.leaves: tuple[type[cst.CSTNode], ...] = _CONTINUE

    # --- statements -----------------------------------------------------------------------
    def block(self, statements: tuple[cst.BaseStatement, ...] | list[cst.BaseStatement],
              frames: tuple[Frame, ...]) -> None:
        guards: tuple[Frame, ...] = ()
        for statement in statements:
            self.statement(statement, frames + guards)
            guards = guards + tuple(
                Frame(FrameKind.GUARD, guard, "", None, self._binder(guard.test))
                for guard in _continue_guards(statement, self.leaves if self.inline is None else _CONTINUE))

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
        inline = Inline(call, function, self.inline,
                        bind(function, call, callee.self_value, callee.bound, callee.leading),
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

    def record_assign(self, statement: cst.CSTNode, targets: tuple[cst.BaseExpression, ...],
                      value: cst.BaseExpression, operator: cst.BaseAugOp | None,
                      frames: tuple[Frame, ...]) -> None:
        names: list[str | None] = []
        for target in targets:
            names.extend(target_names(target))
        if operator is None and len(targets) == 1 and value is not None:
            key = id(self.inline) if self.inline is not None else 0
            pairs: dict[str, list[cst.BaseExpression]] = {}
            pair_values(targets[0], value, pairs)
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
        self.leaves = (cst.Continue, cst.Return)  # `if cond: return` ends this call: the next batch follows
        try:
            self.suite(function.body, loop)
        finally:
            self.leaves = _CONTINUE
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


#: the statements that end a loop's iteration in plain code
_CONTINUE: tuple[type[cst.CSTNode], ...] = (cst.Continue,)


def _continue_guards(statement: cst.BaseStatement, leaves: tuple[type[cst.CSTNode], ...] = _CONTINUE) -> list[cst.If]:
    """The `if cond: continue` statements in ``statement`` (itself, or nested in its branches,
    contexts and try blocks, not in inner loops) after which the rest of the loop body runs
    only when ``cond`` was false: `if A > 1: if (i + 1) % A: continue` gates what follows.
    ``leaves``: the statements that end the iteration (``return`` too in a hook's body)."""
    if _is_continue_guard(statement, leaves):
        return [statement]  # type: ignore[list-item]
    found: list[cst.If] = []
    if type(statement) in _GUARD_CONTAINERS:
        for inner in _blocks_of(statement):
            found.extend(_continue_guards(inner, leaves))
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


def _is_continue_guard(statement: cst.BaseStatement, leaves: tuple[type[cst.CSTNode], ...] = _CONTINUE) -> bool:
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
    return isinstance(last, leaves)


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
        elif is_microbatch_hook(function, class_def) or is_update_hook(function, class_def):
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


def is_update_hook(function: cst.FunctionDef, class_def: cst.ClassDef | None) -> bool:
    """A method the framework calls once per optimizer update, walked as the body of the loop
    over updates: ``optimizer_step`` of a LightningModule (:data:`accumlint.frameworks.lightning.UPDATE_STEP_HOOKS`;
    once per batch at ``accumulate_grad_batches=1``), so a gate on its ``batch_idx`` or on a
    counter it keeps varies from call to call."""
    return (
        class_def is not None
        and function.name.value in fw.lightning.UPDATE_STEP_HOOKS
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
