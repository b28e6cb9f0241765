"""Framework-owned loops: the loop a framework runs around the user's functions, rebuilt so the
group model reads it like a loop the user wrote.

The rows (``accumlint/frameworks/{ignite,catalyst,skorch,generic}.py``) say which user functions
a framework calls and in which phase of its loop (:class:`accumlint.frameworks.loops.Phase`).
Here a module's code is matched against them: ``Engine(process_fn)`` and the handlers
registered on that engine, the callback classes of a runner, a framework subclass's per-batch
method. The result, an :class:`OwnedLoop`, is walked by :mod:`accumlint.model.statement_walk` as one
scope: the per-batch function's node stands for the microbatch loop (as a LightningModule's
``training_step`` does), the engine or class for the epoch loop, and the other functions'
bodies are walked inside them in the framework's order.

Precision: a loop is built only from a registration the code shows (the function handed to the
engine, a handler registered with an unfiltered event) or a class whose base comes from the
framework; a handler of a filtered event (``every=k``) is left out, and so is a function whose
name the module defines twice (which one is handed over is not read).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import libcst as cst

from accumlint import frameworks as fw
from accumlint.frameworks import catalyst, generic, ignite, lightning, mmcv, mmengine, skorch, transformers
from accumlint.frameworks.loops import CallbackLoop, Phase, RegisteredLoop
from accumlint.model.kinds import EventKind
from accumlint.model.names import declares_attribute, dotted, int_value, last_segment, walk

if TYPE_CHECKING:  # both import this module
    from accumlint.model import FileModel
    from accumlint.model.events import Event
    from accumlint.model.module_functions import ModuleFunctions
    from accumlint.model.scopes import Scope

#: the rows matched against every module, callback-style first
CALLBACK_ROWS: tuple[CallbackLoop, ...] = (skorch.NET, mmengine.BASE_MODEL, mmcv.RUNNER_HOOKS, catalyst.RUNNER,
                                           catalyst.AFTER_BACKWARD_RUNNER, generic.BASE_TRAINER)
REGISTERED_ROWS: tuple[RegisteredLoop, ...] = (ignite.ENGINE_LOOP,)

#: names without which no row can match: the prefilter's markers and the source facts' test
MARKERS: frozenset[str] = frozenset(
    {name for row in CALLBACK_ROWS for name, phase in row.hooks.items() if phase is not Phase.EPOCH_START
     and phase is not Phase.EPOCH_END}
    | {last_segment(name) for row in REGISTERED_ROWS for name in row.constructors}
)


@dataclass(eq=False)
class OwnedLoop:
    """One framework-owned microbatch loop of a module.

    ``body``: the function whose node stands for the microbatch loop (the per-batch function, or
    the first per-batch hook); ``parts``: (phase, function, its class) in the framework's call
    order; ``epoch_node``: the node that stands for the epoch loop (None: no epoch hook);
    ``counters``: dotted name → its value on the first microbatch (``engine.state.iteration``
    → 1, ``runner.iter`` → 0); ``epoch_counters``: the same for counts that restart with each
    epoch (``runner.inner_iter``); ``data``: dotted names that hold the microbatch's data or
    its forward's outputs (``runner.outputs``); ``backward_methods``: inherited method names that run the
    microbatch's backward."""

    row: CallbackLoop | RegisteredLoop
    body: cst.FunctionDef
    body_class: cst.ClassDef | None
    parts: list[tuple[Phase, cst.FunctionDef, cst.ClassDef | None]] = field(default_factory=list)
    epoch_node: cst.CSTNode | None = None
    counters: dict[str, int] = field(default_factory=dict)
    epoch_counters: dict[str, int] = field(default_factory=dict)
    data: frozenset[str] = frozenset()
    backward_methods: frozenset[str] = frozenset()
    backward_pattern: bool = False  # an inherited method named like a backward runs it (generic row)

    @property
    def framework_backward(self) -> bool:
        """Whether the framework runs the microbatch's backward before the AFTER_BACKWARD hooks."""
        return isinstance(self.row, CallbackLoop) and self.row.framework_backward

    def functions(self, phase: Phase) -> list[tuple[cst.FunctionDef, cst.ClassDef | None]]:
        return [(function, owner) for p, function, owner in self.parts if p is phase]


def find(module: cst.Module, functions: ModuleFunctions) -> dict[cst.FunctionDef, OwnedLoop]:
    """The framework-owned loops of ``module`` by the function that stands for the microbatch
    loop. ``functions``: the module's :class:`~accumlint.model.module_functions.ModuleFunctions`."""
    found: dict[cst.FunctionDef, OwnedLoop] = {}
    for loop in (*_registered(module, functions), *_callbacks(functions)):
        if loop.body not in found:
            found[loop.body] = loop
    return found


# --- engines handed a process function ---------------------------------------------------------

def _registered(module: cst.Module, functions) -> list[OwnedLoop]:
    loops: list[OwnedLoop] = []
    rows = [row for row in REGISTERED_ROWS
            if any(functions.imports.imports_module(name.split(".")[0]) for name in row.constructors)]
    if not rows:
        return loops  # the module imports no such framework: no walk over its nodes (every file pays it)
    bound: dict[int, str] = {}  # id(engine constructor call) → the name it is assigned to
    calls: list[cst.Call] = []
    for node in walk(module):
        kind = type(node)
        if kind is cst.Assign and len(node.targets) == 1 and type(node.value) is cst.Call:
            name = dotted(node.targets[0].target)
            if name:
                bound[id(node.value)] = name
        elif kind is cst.Call:
            calls.append(node)
    for row in rows:
        for call in calls:
            if not call.args or call.args[0].keyword is not None or not _builds_engine(functions, row, call):
                continue
            process = _process_function(functions, call.args[0].value)
            if process is None:
                continue
            engine = bound.get(id(call))
            handlers = _handlers(module, functions, row, engine) if engine else []
            loop = OwnedLoop(row, process, functions.class_of.get(process))
            loop.parts.append((Phase.BODY, process, loop.body_class))
            for phase, handler in handlers:
                loop.parts.append((phase, handler, functions.class_of.get(handler)))
            if any(p in (Phase.EPOCH_START, Phase.EPOCH_END) for p, _, _ in loop.parts):
                loop.epoch_node = call
            engines = {engine} if engine else set()
            for _, function, _ in loop.parts:
                params = function.params.params
                if params:
                    engines.add(params[0].name.value)
            loop.counters = {f"{name}.{path}": start for name in engines for path, start in row.counters.items()}
            loops.append(loop)
    return loops


def _builds_engine(functions, row: RegisteredLoop, call: cst.Call) -> bool:
    """``call`` builds the row's engine, or an instance of a project subclass of it
    (``class NmtEngine(Engine)``, in this module or another one of the project)."""
    name = dotted(call.func)
    if functions.imports.qualify(name) in row.constructors:
        return True
    located = functions.class_named(name)
    for _ in range(8):  # a subclass chain, cut at a depth no real hierarchy reaches
        if located is None:
            return False
        owner, class_def = located
        bases = [dotted(base.value) for base in class_def.bases]
        if any(owner.imports.qualify(base) in row.constructors for base in bases if base):
            return True
        located = next((owner.class_named(base) for base in bases if base and owner.class_named(base)), None)
    return False


def _process_function(functions, value: cst.BaseExpression) -> cst.FunctionDef | None:
    """The function handed to the engine: a function of this module by name, or a method
    of a class of this module (``NmtEngine.train``, a static method)."""
    if isinstance(value, cst.Attribute) and isinstance(value.value, cst.Name):
        class_def = functions.classes.get(value.value.value)
        found = functions.method(class_def, value.attr.value) if class_def is not None else None
        if found is None or found[1] is not functions:
            return None  # another module's code: its nodes are no part of this file
        return found[0]
    return _function_named(functions, value)


def _function_named(functions, value: cst.BaseExpression) -> cst.FunctionDef | None:
    """The module's one function (at any depth, not a method) named by ``value``."""
    if not isinstance(value, cst.Name):
        return None
    same = [f for f, owner in functions.class_of.items() if owner is None and f.name.value == value.value]
    return same[0] if len(same) == 1 else None


def _handlers(module: cst.Module, functions, row: RegisteredLoop,
              engine: str) -> list[tuple[Phase, cst.FunctionDef]]:
    """(phase, handler) of every handler registered on ``engine`` (``@engine.on(event)``,
    ``engine.add_event_handler(event, fn)``) for an unfiltered per-iteration or epoch event, in
    source order."""
    found: list[tuple[Phase, cst.FunctionDef]] = []
    for function in functions.class_of:
        for decorator in function.decorators:
            event = _registration(decorator.decorator, engine, row.register_methods)
            if event is _SKIP:
                continue
            phase = _phase(row, event)
            if phase is None:
                continue
            found.append((phase, function))
    for node in walk(module):
        if type(node) is not cst.Call:
            continue
        event = _registration(node, engine, row.add_methods)
        if event is _SKIP or len(node.args) < 2:
            continue
        phase = _phase(row, event)
        handler = _function_named(functions, node.args[1].value)
        if phase is not None and handler is not None:
            found.append((phase, handler))
    order = {function: index for index, function in enumerate(functions.class_of)}
    found.sort(key=lambda pair: order.get(pair[1], 0))
    return found


_SKIP = object()


def _registration(node: cst.BaseExpression, engine: str, methods: frozenset[str]):
    """The event expression of ``engine.on(event)`` / ``engine.add_event_handler(event, fn)``
    (``_SKIP`` for any other expression)."""
    if not isinstance(node, cst.Call) or not isinstance(node.func, cst.Attribute):
        return _SKIP
    if node.func.attr.value not in methods or dotted(node.func.value) != engine or not node.args:
        return _SKIP
    return node.args[0].value


def _phase(row: RegisteredLoop, event: cst.BaseExpression) -> Phase | None:
    """The phase of an unfiltered event (``Events.ITERATION_COMPLETED``); None for a filtered
    one (``Events.ITERATION_COMPLETED(every=4)``: a gate of the framework's) or another event."""
    if isinstance(event, cst.Call):
        return None
    name = dotted(event)
    return row.events.get(last_segment(name)) if name else None


# --- classes whose methods a framework calls ---------------------------------------------------

def _callbacks(functions) -> list[OwnedLoop]:
    loops: list[OwnedLoop] = []
    for row in CALLBACK_ROWS:
        members = [c for c in functions.classes.values() if _takes_part(functions, c, row)]
        if not members:
            continue
        if row.bases:
            loop = _loop_of(functions, row, members)
            if loop is not None:
                loops.append(loop)
        else:  # each subclass runs its own loop
            for member in members:
                loop = _loop_of(functions, row, [member])
                if loop is not None:
                    loops.append(loop)
    return loops


def _takes_part(functions, class_def: cst.ClassDef, row: CallbackLoop) -> bool:
    for base in class_def.bases:
        name = dotted(base.value)
        if not name or functions.class_named(name) is not None:
            continue  # a project class: its own bases decide (not followed here)
        qualified = functions.imports.qualify(name) or name
        root = qualified.split(".")[0]
        if root in row.excluded_packages:
            return False
        if row.packages and root not in row.packages:
            continue
        if not row.bases or last_segment(name) in row.bases:
            return True
    return False


def _loop_of(functions, row: CallbackLoop, members: list[cst.ClassDef]) -> OwnedLoop | None:
    parts: list[tuple[Phase, cst.FunctionDef, cst.ClassDef | None]] = []
    for phase in Phase:
        for member in members:
            for name, hook_phase in row.hooks.items():
                function = functions.methods.get((member, name))
                if hook_phase is phase and function is not None:
                    parts.append((phase, function, member))
    per_batch = [(f, c) for p, f, c in parts if p not in (Phase.EPOCH_START, Phase.EPOCH_END)]
    if not per_batch:
        return None
    bodies = [(f, c) for p, f, c in parts if p is Phase.BODY]
    if row.uncalled and (len(bodies) != 1 or _called(functions, bodies[0][0].name.value)):
        return None
    # (of several members' bodies, the one that backpropagates stands for the microbatch loop)
    body, owner = next((b for b in bodies if functions.performs_backward(b[0])), bodies[0]) if bodies \
        else per_batch[0]
    loop = OwnedLoop(row, body, owner, parts, backward_methods=frozenset(
        name for name in row.backward_methods if functions.method(owner, name) is None))
    loop.counters = _hook_counters(row.counters, row.counter_position, parts)
    loop.epoch_counters = _hook_counters(row.epoch_counters, row.counter_position, parts)
    loop.data = frozenset(_hook_counters(dict.fromkeys(row.data, 0), row.counter_position, parts))
    if not row.bases:  # the generic row: the hook must run a backward, its own or an inherited one's
        loop.backward_pattern = True
        if not (functions.performs_backward(body) or _inherited_backward(functions, body, owner)):
            return None
    if row.bases and not any(p is Phase.BODY for p, _, _ in parts) and not row.framework_backward:
        # callbacks alone, whose runner's backward has no place in the order the row gives
        if not any(functions.performs_backward(f) for f, _ in per_batch):
            return None
    if any(p in (Phase.EPOCH_START, Phase.EPOCH_END) for p, _, _ in parts):
        loop.epoch_node = owner
    return loop


def _hook_counters(counters: dict[str, int], position: int,
                   parts: list[tuple[Phase, cst.FunctionDef, cst.ClassDef | None]]) -> dict[str, int]:
    """The row's attribute paths (``counters``: path → value) under the name each hook gives the
    framework's object (its parameter at ``position``): ``iter`` → ``runner.iter``."""
    if not counters:
        return {}
    names = {function.params.params[position].name.value for _, function, _ in parts
             if len(function.params.params) > position}
    return {f"{name}.{path}": start for name in names for path, start in counters.items()}


def base_method(functions: ModuleFunctions, class_def: cst.ClassDef,
                name: str) -> tuple[cst.FunctionDef, ModuleFunctions] | None:
    """The framework's method ``name`` that ``class_def`` inherits: as a member of a callback row
    that states it (:attr:`~accumlint.frameworks.loops.CallbackLoop.base_methods`, mmcv's
    ``Hook.every_n_iters``), or from a library base class whose row states it, through its project
    bases too (:data:`accumlint.frameworks.INHERITED_METHODS`: an HF ``Trainer``'s ``training_step``).
    Returns its definition and the one-function module it forms, or None (a project class on the way
    defines it, or no row states it)."""
    for row in CALLBACK_ROWS:
        if name in row.base_methods and _takes_part(functions, class_def, row):
            return _parsed_method(row.base_methods[name])
    for owner, current in functions.lineage(class_def):
        if owner.methods.get((current, name)) is not None:
            return None
        for base in current.bases:
            dotted_name = dotted(base.value)
            row = fw.INHERITED_METHODS.get(owner.imports.qualify(dotted_name) or "") if dotted_name else None
            if row is not None and name in row:
                return _parsed_method(row[name])
    return None


@functools.lru_cache(maxsize=64)
def _parsed_method(source: str) -> tuple[cst.FunctionDef, ModuleFunctions]:
    from accumlint.model.module_functions import ModuleFunctions

    module = cst.parse_module(source)
    return module.body[0], ModuleFunctions(module)  # type: ignore[return-value]


def _called(functions, name: str) -> bool:
    """Whether the module calls a method or function ``name`` anywhere."""
    for function in functions.class_of:
        for call in functions.calls_in(function.body):
            func = call.func
            if (isinstance(func, cst.Attribute) and func.attr.value == name) or (
                    isinstance(func, cst.Name) and func.value == name):
                return True
    return False


def _inherited_backward(functions, body: cst.FunctionDef, owner: cst.ClassDef | None) -> bool:
    return any(is_inherited_backward(functions, call, owner) for call in functions.calls_in(body.body))


def is_inherited_backward(functions: ModuleFunctions, call: cst.Call, owner: cst.ClassDef | None,
                          names: frozenset[str] = frozenset(), pattern: bool = True) -> bool:
    """Whether ``call`` is ``self.m(...)`` of a method the class does not define (the framework's
    base class does) that runs the microbatch's backward: one of ``names``, or with ``pattern``
    a name that says so (``forward_and_backward``)."""
    func = call.func
    if owner is None or not isinstance(func, cst.Attribute) or dotted(func.value) != "self":
        return False
    name = func.attr.value
    if not (name in names or (pattern and generic.BACKWARD_NAME.search(name))):
        return False
    return functions.method(owner, name) is None


# --- Lightning: the hooks around each microbatch's backward ------------------------------------

def lightning_backward_hooks(model: FileModel, hooks: frozenset[str] = lightning.BACKWARD_HOOKS) -> list[Scope]:
    """The scopes of ``on_before_backward`` / ``on_after_backward`` (or of the other ``hooks``,
    :data:`accumlint.frameworks.lightning.BATCH_HOOKS`) of LightningModules under automatic
    optimization, in a module whose ``Trainer(accumulate_grad_batches=...)`` sets A > 1 (an
    integer above 1, or an expression): Lightning calls them around every microbatch's backward
    (:data:`accumlint.frameworks.lightning.BACKWARD_HOOKS`), so what they do to ``.grad`` sees a
    partial sum of the group. ``model``: a :class:`~accumlint.model.FileModel`. Empty when the
    module does not configure A > 1."""
    if not lightning_accumulates(model):
        return []
    return [
        scope for scope in model.scopes
        if isinstance(scope.node, cst.FunctionDef) and scope.class_def is not None
        and scope.node.name.value in hooks and model.frameworks.lightning_automatic(scope.class_def)
    ]


def lightning_trainer_calls(model: FileModel) -> list[cst.Call]:
    """The module's ``Trainer(...)`` calls that pass ``accumulate_grad_batches``."""
    found = []
    for scope in model.scopes:
        for site in scope.sites:
            call = site.call
            if (call is not None and not site.in_helper and last_segment(dotted(call.func)) == lightning.TRAINER
                    and any(a.keyword is not None and a.keyword.value == lightning.ACCUMULATION_KEYWORD
                            for a in call.args)):
                found.append(call)
    return found


def _keyword_value(call: cst.Call, name: str) -> cst.BaseExpression | None:
    return next((a.value for a in call.args if a.keyword is not None and a.keyword.value == name), None)


def lightning_accumulates(model: FileModel) -> bool:
    """Whether a ``Trainer(accumulate_grad_batches=A)`` of the module may have A > 1."""
    for call in lightning_trainer_calls(model):
        value = _keyword_value(call, lightning.ACCUMULATION_KEYWORD)
        if value is not None and (int_value(value) is None or int_value(value) > 1):
            return True
    return False


def lightning_short_epochs(model: FileModel) -> list[tuple[cst.Call, int, int]]:
    """``Trainer(accumulate_grad_batches=A, limit_train_batches=n)`` calls with integer n < A
    (both literals): the epoch ends before a group is full, Lightning steps at the epoch's last
    batch with the loss divided by A, so every update is a partial group weighted n/A
    (:data:`accumlint.frameworks.lightning.LIMIT_KEYWORD`). (call, n, A)."""
    found = []
    for call in lightning_trainer_calls(model):
        accumulate = int_value(_keyword_value(call, lightning.ACCUMULATION_KEYWORD))
        limit = _keyword_value(call, lightning.LIMIT_KEYWORD)
        # a float limit is a fraction of the loader (its length is not in the code)
        if accumulate is None or limit is None or type(limit) is not cst.Integer:
            continue
        batches = int_value(limit)
        if batches is not None and 0 < batches < accumulate:
            found.append((call, batches, accumulate))
    return found


# --- catalyst: user callbacks next to an accumulating OptimizerCallback ------------------------

def catalyst_batch_hooks(model: FileModel) -> list[Scope]:
    """The scopes of the per-batch hooks (``on_batch_start`` / ``on_batch_end``) of the module's
    catalyst callbacks, when the module builds an ``OptimizerCallback(accumulation_steps=A)``
    with A > 1 (an integer above 1, or an expression): the optimizer callback updates once per
    A batches (:data:`accumlint.frameworks.catalyst.OPTIMIZER_CALLBACKS`), these hooks run on
    every batch. Empty otherwise."""
    imports = model.functions.imports
    accumulates = False
    for scope in model.scopes:
        for site in scope.sites:
            call = site.call
            if call is None or imports.qualify(dotted(call.func)) not in catalyst.OPTIMIZER_CALLBACKS:
                continue
            value = _keyword_value(call, catalyst.ACCUMULATION_KEYWORD)
            accumulates |= value is not None and (int_value(value) is None or int_value(value) > 1)
    if not accumulates:
        return []
    return [
        scope for scope in model.scopes
        if isinstance(scope.node, cst.FunctionDef) and scope.class_def is not None
        and scope.node.name.value in catalyst.BATCH_HOOKS
        and _takes_part(model.functions, scope.class_def, catalyst.RUNNER)
    ]


# --- HF Trainer: a loss function handed to the Trainer ----------------------------------------

def hf_loss_funcs_ignoring_count(model: FileModel) -> list[tuple[cst.CSTNode, str]]:
    """Loss functions handed to an HF ``Trainer(compute_loss_func=f)`` that ignore the group's
    item count (no ``num_items_in_batch`` read, or no such parameter) and divide by nothing
    A-named, in a module that configures ``gradient_accumulation_steps`` other than 1: the
    Trainer does not divide a ``compute_loss_func``'s loss by A
    (:data:`accumlint.frameworks.transformers.COMPUTE_LOSS_FUNC`), so each group's gradient is
    the sum of A microbatch means. (the function or lambda, its name)."""
    imports = model.imports
    if not imports.imports_module("transformers") or not _hf_accumulates(model):
        return []
    found: list[tuple[cst.CSTNode, str]] = []
    for scope in model.scopes:
        for site in scope.sites:
            call = site.call
            if call is None or site.in_helper or not _is_hf_trainer(model, call):
                continue
            value = _keyword_value(call, transformers.COMPUTE_LOSS_FUNC)
            function = _function_named(model.functions, value) if value is not None else None
            node: cst.CSTNode | None = function
            params = function.params if function is not None else None
            body: cst.CSTNode | None = function.body if function is not None else None
            if isinstance(value, cst.Lambda):
                node, params, body = value, value.params, value.body
            if node is None or params is None or body is None:
                continue
            declared = {p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)}
            if params.star_kwarg is not None or (declared and transformers.COUNT_PARAMETER in declared
                                                 and _reads(body, transformers.COUNT_PARAMETER)):
                continue  # reads the count (or may, through **kwargs)
            if _divides_by_a(model, body):
                continue
            found.append((node, dotted(value) or "lambda"))
    return found


def _reads(body: cst.CSTNode, name: str) -> bool:
    return any(type(node) is cst.Name and node.value in (name, "locals", "vars") for node in walk(body))


def _divides_by_a(model, body: cst.CSTNode) -> bool:
    for node in walk(body):
        if type(node) is cst.BinaryOperation and isinstance(node.operator, cst.Divide) and model.is_accumulation_name(
                node.right):
            return True
    return False


def _hf_accumulates(model) -> bool:
    for scope in model.scopes:
        for site in scope.sites:
            call = site.call
            if call is None:
                continue
            value = _keyword_value(call, transformers.ACCUMULATION_KEYWORD)
            if value is not None and (int_value(value) is None or int_value(value) > 1):
                return True
    return False


def _is_hf_trainer(model, call: cst.Call) -> bool:
    """``call`` builds an HF Trainer or a subclass of the module's that does not declare its loss scaled."""
    name = dotted(call.func)
    if model.imports.qualify(name) in transformers.TRAINER_CLASSES:
        return True
    located = model.functions.class_named(name)
    if located is None:
        return False
    _, class_def = located
    if declares_attribute(class_def, transformers.SCALED_FOR_GA):
        return False
    return any(model.imports.qualify(dotted(base.value)) in transformers.TRAINER_CLASSES for base in class_def.bases)


def closure_parameter(function: cst.FunctionDef) -> str | None:
    """The name an ``optimizer_step`` override gives Lightning's closure
    (:data:`accumlint.frameworks.lightning.CLOSURE_PARAMETER`, or the parameter at its position
    after ``self``), None when the signature shows neither."""
    params = [p.name.value for p in function.params.params]
    if lightning.CLOSURE_PARAMETER in params:
        return lightning.CLOSURE_PARAMETER
    if len(params) > lightning.CLOSURE_POSITION + 1 and params[0] == "self":
        return params[lightning.CLOSURE_POSITION + 1]
    return None


def lightning_clips_before_closure(model: FileModel) -> list[Event]:
    """Clip events of ``optimizer_step`` overrides of automatic LightningModules that run before
    the override hands on (or calls) its ``optimizer_closure``: the closure runs the update's last
    ``training_step`` and backward (:data:`accumlint.frameworks.lightning.OPTIMIZER_STEP`), so the
    clip acts on gradients without it. Overrides whose closure use is not seen are left out."""
    found = []
    for scope in model.scopes:
        function = scope.node
        if (not isinstance(function, cst.FunctionDef) or scope.class_def is None
                or function.name.value != lightning.OPTIMIZER_STEP
                or not model.frameworks.lightning_automatic(scope.class_def)):
            continue
        closure = closure_parameter(function)
        if closure is None:
            continue
        uses = [site.order for site in scope.sites if site.call is not None and not site.in_helper and (
            dotted(site.call.func) == closure or any(dotted(a.value) == closure for a in site.call.args))]
        if not uses:
            continue
        found.extend(e for e in model.events[scope] if e.kind is EventKind.CLIP and e.order < min(uses))
    return found
