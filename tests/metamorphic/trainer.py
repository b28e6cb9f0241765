"""Training loops turned into a trainer class (the ``extract`` family, continued): the loop
that drives the microbatch loop (the outermost loop of its function around it, often the epoch
loop) becomes the driver method ``fit`` of a class whose ``__init__`` holds on ``self`` the
objects the loop reads and never reassigns (model, optimizer, loader...); the part of the
microbatch body before the update gate (forward, backward, the loss) becomes the method
``microbatch_step`` and the gate's body (the optimizer update) the method
``optimizer_update``, both called by ``fit`` where those statements stood. The function
builds the trainer and calls ``fit`` where the loop stood.

Every value a method reads that is not on ``self`` is passed in, every value it assigns that is
read after it (later, or in the next iteration) is given back and assigned back, so the same
statements run in the same order on the same values. Applies where the first innermost loop
that runs a backward lies in a function of a top-level ``def`` or ``class`` and its body is:
statements that run the backward, then an ``if`` without ``else`` whose body calls a
``.step()`` (the update gate), then any statements; where neither the driver loop nor the two
extracted parts ``return``, ``yield``, ``await``, declare names or call ``super()``, the parts
neither ``break`` nor ``continue`` the microbatch loop, every value they take is bound before
they run, the driver reads at least one object it never reassigns, and no function defined
outside a part reads a name the part assigns (it would see the value late). A loop at module
level is left alone (no input has one)."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import libcst as cst
from libcst.metadata import FunctionScope

from tests.metamorphic.base import (
    FreshNames,
    Program,
    ReplaceNodes,
    block,
    body_statements,
    contains,
    insert_import,
    is_backward_call,
    own_control,
    stmt,
    transformation,
    walk,
)
from tests.metamorphic.extract import (
    _call_statement,
    _Flow,
    _flow,
    _function,
    _microbatch_loop,
    _surely_assigned,
    _top_imports,
)


@dataclass
class _Split:
    """A microbatch loop split for a trainer: the module, the top-level statement holding the
    loop's function, the driver loop, the microbatch loop, the statements before the gate, the
    gate, and the flows of the driver, of those statements and of the gate's body."""

    module: cst.Module
    holder: cst.BaseStatement
    driver: cst.For | cst.While
    loop: cst.For | cst.While
    before_gate: list[cst.BaseStatement]
    gate: cst.If
    fit: _Flow
    step: _Flow
    update: _Flow


def _calls_step(node: cst.CSTNode) -> bool:
    """Whether ``node`` calls a ``.step()`` (an optimizer's or a scaler's): an update gate's body."""
    return any(
        isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute) and n.func.attr.value == "step"
        for n in walk(node)
    )


def _read_late(scopes: Mapping, scope: FunctionScope, region: Sequence[cst.CSTNode]) -> bool:
    """Whether a function, lambda or comprehension outside ``region`` reads a name the region
    assigns: it reads the function's variable, which the extracted region's own copy updates
    only when it returns."""
    inside = {id(n) for node in region for n in walk(node)}
    for assignment in scope.assignments:
        if id(assignment.node) in inside or id(getattr(assignment.node, "name", None)) in inside:
            for access in assignment.references:
                if id(access.node) not in inside and scopes.get(access.node) is not scope:
                    return True
    return False


@functools.lru_cache(maxsize=16)
def _split(text: str) -> _Split | None:
    found = _microbatch_loop(text)
    if found is None:
        return None
    module, loop, scopes, positions, scope = found
    function = next(
        (
            node
            for node in walk(module)
            if isinstance(node, cst.FunctionDef) and any(n is loop for n in walk(node.body, into_scopes=False))
        ),
        None,
    )
    if function is None:
        return None
    driver = next(
        n for n in walk(function.body, into_scopes=False) if isinstance(n, (cst.For, cst.While)) and contains(n, loop)
    )
    if (isinstance(driver, cst.For) and driver.asynchronous) or own_control(block([driver])):
        return None
    statements = list(loop.body.body)
    gate_at = next(
        (k for k, s in enumerate(statements) if isinstance(s, cst.If) and s.orelse is None and _calls_step(s.body)),
        None,
    )
    if not gate_at:
        return None
    before_gate, gate = statements[:gate_at], statements[gate_at]
    update_body = body_statements(gate.body)
    if not any(is_backward_call(n) for s in before_gate for n in walk(s)):
        return None
    if own_control(block(before_gate)) or own_control(block(update_body)):
        return None
    if any(_read_late(scopes, scope, region) for region in ([driver], before_gate, update_body)):
        return None
    fit = _flow(scopes, positions, scope, [driver], driver, whole_loop=True, take_bound=True)
    step = _flow(scopes, positions, scope, before_gate, loop, take_bound=True)
    names = {n.value for s in update_body for n in walk(s) if isinstance(n, cst.Name)}
    sure = frozenset(name for name in names if _surely_assigned(before_gate, name))
    update = _flow(scopes, positions, scope, update_body, loop, bound=sure, take_bound=True)
    if fit is None or step is None or update is None or not fit.fixed:
        return None
    holder = next(s for s in module.body if contains(s, loop))
    return _Split(module, holder, driver, loop, before_gate, gate, fit, step, update)


@dataclass
class _Trainer:
    """The pieces of the rewritten program: the driver method, the other methods (``__init__``,
    the microbatch step, the update), the statements that replace the driver loop, the class
    names (the trainer; the base class where the driver is inherited)."""

    fit: cst.FunctionDef
    methods: list[cst.FunctionDef]
    call_site: list[cst.BaseStatement]
    name: str
    base: str


def _trainer(split: _Split, fresh: FreshNames, extras: Sequence[str] = (), base: bool = False) -> _Trainer:
    """The trainer class's pieces for ``split``; ``extras`` are module-level names the loop reads
    that the class's module does not have (passed to ``__init__`` and held on ``self`` too)."""
    fixed = [*split.fit.fixed, *extras]
    every = {*split.fit.params, *split.step.params, *split.update.params}
    receiver = "self" if "self" not in every else fresh("trainer_self_")
    step_name, update_name, fit_name = (m + "_" * (m in fixed) for m in ("microbatch_step", "optimizer_update", "fit"))
    on_self = {node: f"{receiver}.{name}" for name in split.fit.fixed for node in split.fit.accesses[name]}
    on_self |= {node: f"{receiver}.{name}" for name in extras for node in split.fit.global_accesses[name]}

    def args(flow: _Flow) -> list[str]:
        return [name for name in flow.params if name not in fixed]

    step_call = _call_statement(f"{receiver}.{step_name}({', '.join(args(split.step))})", split.step.returns)
    update_call = _call_statement(f"{receiver}.{update_name}({', '.join(args(split.update))})", split.update.returns)
    loop, gate, cut = split.loop, split.gate, len(split.before_gate)

    class Rewrite(cst.CSTTransformer):
        """Fixed objects → ``self.x``; in the microbatch loop, the part before the gate → the
        step call and the gate's body → the update call."""

        def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
            new = on_self.get(id(original_node))
            return cst.parse_expression(new) if new else updated_node

        def on_leave(self, original_node, updated_node):  # type: ignore[no-untyped-def]
            updated_node = super().on_leave(original_node, updated_node)
            if original_node is loop:
                body = list(updated_node.body.body)
                body = [step_call, body[cut].with_changes(body=block([update_call])), *body[cut + 1 :]]
                return updated_node.with_changes(body=updated_node.body.with_changes(body=body))
            return updated_node

    rewrite = Rewrite()
    driver = split.driver.visit(rewrite).with_changes(leading_lines=[])
    step_body = block([s.visit(rewrite) for s in split.before_gate])
    update_body = block([s.visit(rewrite) for s in body_statements(gate.body)])
    init = stmt(
        f"def __init__({', '.join([receiver, *fixed])}):\n"
        + "".join(f"    {receiver}.{name} = {name}\n" for name in fixed)
    )
    methods = [
        init,
        _function(step_name, [receiver, *args(split.step)], step_body, split.step.returns),
        _function(update_name, [receiver, *args(split.update)], update_body, split.update.returns),
    ]
    fit = _function(fit_name, [receiver, *args(split.fit)], block([driver]), split.fit.returns)
    name = "Trainer" if "Trainer" not in fresh.taken else fresh("Trainer")
    base_name = ("BaseTrainer" if "BaseTrainer" not in fresh.taken else fresh("BaseTrainer")) if base else ""
    instance = "trainer" if "trainer" not in fresh.taken else fresh("trainer_")
    call_site = [
        stmt(f"{instance} = {name}({', '.join(fixed)})\n").with_changes(leading_lines=split.driver.leading_lines),
        _call_statement(f"{instance}.{fit_name}({', '.join(args(split.fit))})", split.fit.returns),
    ]
    return _Trainer(fit, methods, call_site, name, base_name)


def _class(name: str, methods: Sequence[cst.FunctionDef], base: str = "") -> cst.ClassDef:
    template = stmt(f"class {name}{f'({base})' if base else ''}:\n    pass\n")
    blank = [cst.EmptyLine(indent=False)]
    members = [methods[0].with_changes(leading_lines=[]), *(m.with_changes(leading_lines=blank) for m in methods[1:])]
    return template.with_changes(body=block(members), leading_lines=[cst.EmptyLine(), cst.EmptyLine()])


def _rebuilt(split: _Split, trainer: _Trainer, classes: Sequence[cst.ClassDef]) -> cst.Module:
    """The module with the driver loop replaced by the call site and ``classes`` inserted before
    the top-level statement that holds the loop."""
    module = split.module.visit(ReplaceNodes({id(split.driver): lambda _: cst.FlattenSentinel(trainer.call_site)}))
    body = list(module.body)
    index = next(k for k, s in enumerate(split.module.body) if s is split.holder)
    body[index:index] = classes
    return module.with_changes(body=body)


@transformation("trainer_split", "extract")
def trainer_split(program: Program) -> Program | None:
    """The loop around the microbatch loop → ``Trainer.fit``, the microbatch work before the
    update gate → ``Trainer.microbatch_step``, the gate's body → ``Trainer.optimizer_update``,
    the objects the loop never reassigns → ``self`` (set in ``__init__``); the class goes before
    the function, which builds it and calls ``fit`` (see the module's docstring for what is
    preserved and when it applies). One-file programs."""
    if not program.is_single:
        return None
    split = _split(program.text)
    if split is None:
        return None
    trainer = _trainer(split, FreshNames(program.text))
    cls = _class(trainer.name, [*trainer.methods, trainer.fit])
    return program.replace({program.main: _rebuilt(split, trainer, [cls]).code})


@transformation("inherited_loop", "extract")
def inherited_loop(program: Program) -> Program | None:
    """As ``extract.trainer_split``, with the driver ``fit`` in a base class ``BaseTrainer`` of
    the same module that calls the hooks ``self.microbatch_step(...)`` and
    ``self.optimizer_update(...)``, which the subclass ``Trainer`` defines with ``__init__``;
    the function builds a ``Trainer``. Applies where ``extract.trainer_split`` does."""
    if not program.is_single:
        return None
    split = _split(program.text)
    if split is None:
        return None
    trainer = _trainer(split, FreshNames(program.text), base=True)
    classes = [_class(trainer.base, [trainer.fit]), _class(trainer.name, trainer.methods, trainer.base)]
    return program.replace({program.main: _rebuilt(split, trainer, classes).code})


@transformation("trainer_module", "extract")
def trainer_module(program: Program) -> Program | None:
    """As ``extract.trainer_split``, with the class in ``trainer.py`` beside the script, which
    imports it (``from trainer import Trainer``); the script's imports are repeated there, and
    its other module-level names the loop reads (constants, functions) are passed to
    ``__init__`` and held on ``self`` too: read once when the trainer is built, so only where no
    ``global`` statement of the script rebinds one. Applies where ``extract.trainer_split``
    does, to a script not itself named ``trainer.py``."""
    if not program.is_single or "/" in program.main:
        return None
    split = _split(program.text)
    if split is None:
        return None
    fresh = FreshNames(program.text)
    module_name = "trainer" if "trainer" not in fresh.taken else fresh("trainer_module_")
    if program.main == f"{module_name}.py":
        return None
    imports, imported = _top_imports(split.module)
    extras = sorted(set(split.fit.global_accesses) - imported)
    if any(
        isinstance(node, cst.Global) and any(item.name.value in extras for item in node.names)
        for node in walk(split.module)
    ):
        return None
    trainer = _trainer(split, fresh, extras)
    cls = _class(trainer.name, [*trainer.methods, trainer.fit])
    module = insert_import(_rebuilt(split, trainer, []), f"from {module_name} import {trainer.name}\n")
    return program.replace({program.main: module.code, f"{module_name}.py": cst.Module(body=[*imports, cls]).code})
