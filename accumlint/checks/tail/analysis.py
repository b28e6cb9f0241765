"""The epoch's last partial group: what a loop does with the microbatches after its last
full group of A (P9).

Decided for the loops whose boundary the user's code sets (a modulo on a per-pass index of
a loop over a data loader); loops whose boundary a framework owns take the framework's row
of :data:`accumlint.frameworks.FRAMEWORK_TAILS`. ``None`` whenever the code does not
show enough: an index that runs across epochs, an iterable of unknown kind, a range.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

import libcst as cst

from accumlint import frameworks as fw
from accumlint.checks.shared.ledger import rescale_factor
from accumlint.frameworks.contracts import TailTreatment
from accumlint.model import boundary, conventions
from accumlint.model.dataflow import value_history
from accumlint.model.events import Event
from accumlint.model.groups import Group, LoopStyle
from accumlint.model.kinds import Cadence, EventKind, Role
from accumlint.model.names import children, dotted, keyword, last_segment, walk
from accumlint.model.roles import Roles
from accumlint.model.scopes import FrameKind, Site

if TYPE_CHECKING:
    from accumlint.model import FileModel


class LengthFact(str, Enum):
    """What the module's arithmetic says about a loader's length and A."""

    COUNTS_GROUPS = "counts groups per pass as len // A, ceil(len / A), or takes len % A"
    MULTIPLE_OF_A = "asserts len % A == 0"


_GROUP_COUNT_OPERATORS = (cst.FloorDivide, cst.Modulo, cst.Divide)


def length_facts(model: FileModel) -> dict[str, LengthFact]:
    """Loader names (last segment) → what the module computes from ``len(loader)`` and A; an
    ``assert len(loader) % A == 0`` of a checked module that imports this one counts too (the
    script that asserts the length, then runs this module's trainer on the loader). Computed once
    per module (:attr:`FileModel.memo`)."""
    facts = model.memo.get(_LENGTH_FACTS)
    if facts is None:
        facts = model.memo[_LENGTH_FACTS] = _length_facts(model)
    return facts  # type: ignore[return-value]


_LENGTH_FACTS = "tail.length_facts"


def _length_facts(model: FileModel) -> dict[str, LengthFact]:
    from accumlint.model.simulation import MAX_IMPORTERS

    facts = length_arithmetic(model.module, model.is_accumulation_name)
    view = model.functions.project
    index = getattr(view, "index", None)
    if index is None:
        return facts
    for importer in index.importers(view.path)[:MAX_IMPORTERS]:
        loaded = index.importer_functions(importer)
        if loaded is None:
            continue
        found = length_arithmetic(loaded[0]._module, model.is_accumulation_name)
        asserted = {name for name, fact in found.items() if fact is LengthFact.MULTIPLE_OF_A}
        if asserted:
            facts.update(dict.fromkeys(asserted, LengthFact.MULTIPLE_OF_A))
            view.used[importer] = loaded[1]  # a change to the importer makes this result stale
    return facts


def length_arithmetic(module: cst.Module, is_a) -> dict[str, LengthFact]:
    """Loader names (last segment) → what the module computes from ``len(loader)`` and A
    (``is_a(expression)`` says whether an expression is A)."""
    facts: dict[str, LengthFact] = {}
    stack: list[cst.CSTNode] = [module]
    while stack:
        node = stack.pop()
        kind = type(node)  # exact types: this walks the whole module, and isinstance on LibCST's nodes is slow
        if kind is cst.Assert:
            found = _len_modulo(node.test, is_a)  # type: ignore[attr-defined]
            if found is not None:
                facts[found] = LengthFact.MULTIPLE_OF_A
                continue
        if kind is cst.BinaryOperation and type(node.operator) in _GROUP_COUNT_OPERATORS and is_a(node.right):  # type: ignore[attr-defined]
            name = _len_of(node.left)  # type: ignore[attr-defined]
            if name is not None:
                facts.setdefault(name, LengthFact.COUNTS_GROUPS)
        stack.extend(children(node))
    return facts


def _len_modulo(test: cst.BaseExpression, is_a) -> str | None:
    """``len(x) % A == 0`` → ``x``'s last segment."""
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1 and isinstance(
            test.comparisons[0].operator, cst.Equal):
        left = test.left
        if (isinstance(left, cst.BinaryOperation) and isinstance(left.operator, cst.Modulo) and is_a(left.right)
                and isinstance(test.comparisons[0].comparator, cst.Integer)
                and test.comparisons[0].comparator.value == "0"):
            return _len_of(left.left)
    return None


def _len_of(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.Call) and dotted(node.func) == "len" and len(node.args) == 1:
        return last_segment(dotted(node.args[0].value)) or None
    return None


@dataclass(frozen=True)
class Tail:
    """The treatment of the partial final group of one accumulation loop.

    ``framework``: the framework that decides it (None: the user's own gate); ``divided_by_a``:
    whether each microbatch's loss is divided by A (so a partial group weighs r/A);
    ``report``: the node to point at (the update gate, or a post-loop flush); ``samples``: the
    gate counts samples, not microbatches (``seen >= global_batch_size``), so the tail is the
    samples after the last full group.
    """

    treatment: TailTreatment
    framework: str | None
    divided_by_a: bool
    report: cst.CSTNode | None
    source: str = ""
    samples: bool = False


def tail_of(model: FileModel, group: Group) -> Tail | None:
    """What ``group`` does with the last ``len(loader) % A`` microbatches of a pass, or None.

    For a user-set boundary (a modulo on a per-pass index, or a counter gate) over a data
    loader, an iterable wrapping one (``pbar = tqdm(enumerate(loader))``), or a
    ``range(steps_per_epoch)`` loop drawing ``next(it)``. A leak into the next pass needs no
    length arithmetic: the pass repeats (an epoch loop here, or a caller calling this function in
    a loop) and nothing flushes or resets in between, so it happens unless the length is a
    multiple of A. A tail left unapplied by a single pass, or applied by a flush, is decided only
    when the code shows the length need not be a multiple of A (``len(loader) // A``, ``% A``,
    a tail clause, a post-loop flush). ``assert len(loader) % A == 0`` keeps every case silent.
    """
    roles = model.roles
    scope_events = model.events[group.scope]
    if group.style is LoopStyle.DEEPSPEED:
        return _framework("deepspeed")
    if group.style is LoopStyle.ACCELERATE:
        loader = _loader_of(group, roles)
        prepared = loader is not None and roles.of(loader, group.loop_sites[0]).prepared
        return _framework("accelerate-prepared-loader" if prepared else "accelerate-unprepared-loader")
    if group.style is not LoopStyle.GATED or group.gate is None or group.gate.test is None:
        return None
    test = group.gate.test
    if any(e.kind is EventKind.RESET and group.in_loop(e) and group.cadence(e) is Cadence.MICROBATCH
           for e in group.events):
        return None  # a reset on every microbatch (ACC001's finding): no group survives to leave a tail
    # a framework-owned loop (model/owned_loops.py) whose epoch hook restarts the gate's counter:
    # the code counts passes itself, and the framework's loader has no length the code shows
    owned = isinstance(group.loop, cst.FunctionDef) and group.outer_loop is not None
    if not (isinstance(group.loop, cst.For) or owned) or test.extra:
        return None
    if test.kind == "counter" and not owned:
        return _counter_tail(model, group, test, scope_events)
    if test.kind != "modulo":
        return None
    length: LengthFact | None = None
    if owned:
        if not _per_pass_index(group, test):
            return None
    else:
        source = _pass_source(model, group)
        if source is None or not _per_pass_index(group, test) or not _backward_per_microbatch(group):
            return None
        length = length_facts(model).get(source)
        if length is LengthFact.MULTIPLE_OF_A or drops_partial_group(model, group):
            return None
    divided = _divided(model, group)
    report = group.gate.frame_node if test.flag is None else test.report
    if test.tail:  # `or i + 1 == len(loader)`: the code's own evidence that a tail exists
        weighted = divided and not _restores_true_count(model, group, group.events)
        return Tail(TailTreatment.WEIGHTED if weighted else TailTreatment.TRUE_COUNT, None, divided, report)
    after = _events_after(group, scope_events)
    flush = [e for e in after if e.kind is EventKind.UPDATE]
    if flush:
        # a flush after the loop is the code's own evidence that a tail exists
        weighted = divided and not _restores_true_count(model, group, [e for e in after if e.order <= flush[0].order])
        return Tail(TailTreatment.WEIGHTED if weighted else TailTreatment.TRUE_COUNT, None, divided,
                    _flush_report(group, flush[0]))
    if any(e.kind is EventKind.RESET for e in after) or _reset_at_pass_start(group, scope_events):
        return Tail(TailTreatment.DROPPED, None, divided, report)
    if group.outer_loop is not None or _called_in_loop(model, group):
        return Tail(TailTreatment.LEAKS, None, divided, report)
    if length is None:
        return None
    return Tail(TailTreatment.NOT_APPLIED, None, divided, report)


def drops_partial_group(model: FileModel, group: Group) -> bool:
    """Whether the loader the loop iterates drops the partial *group*, not only the partial batch:
    built (in this module) as ``DataLoader(..., drop_last=True)`` whose sampler, batch sampler or
    dataset is sized with A (``batch_sampler=GroupSampler(ds, bs, accum, drop_last=True)``,
    ``sampler=RandomSampler(ds, num_samples=n_updates * bs * accum)``), or through a batch
    sampler given ``drop_last=True`` and A. ``drop_last=True`` alone drops a short batch and
    leaves ``len(loader) % A`` microbatches."""
    loader = _loader_of(group, model.roles)
    name = dotted(loader) if loader is not None else None
    built = model.reaching(name, group.loop_sites[0]) if name else None
    call = built.value if built is not None else None
    if not isinstance(call, cst.Call) or built is None:
        return False
    drop = keyword(call, "drop_last")
    sampler = keyword(call, "batch_sampler")
    if _true(drop):
        return any(_mentions_a(model, arg.value, built) for arg in call.args
                   if arg.keyword is None or arg.keyword.value in ("dataset", "sampler", "batch_sampler"))
    if sampler is not None:
        value = _bound_value(model, sampler, built)
        return (isinstance(value, cst.Call) and _true(keyword(value, "drop_last"))
                and _mentions_a(model, value, built))
    return False


def _true(value: cst.BaseExpression | None) -> bool:
    return isinstance(value, cst.Name) and value.value == "True"


def _bound_value(model: FileModel, expression: cst.BaseExpression, site: Site) -> cst.BaseExpression:
    """The value a name was last bound to before ``site`` (the expression itself otherwise)."""
    name = dotted(expression) if isinstance(expression, (cst.Name, cst.Attribute)) else None
    bound = model.reaching(name, site) if name else None
    return bound.value if bound is not None and bound.value is not None else expression


def _mentions_a(model: FileModel, expression: cst.BaseExpression, site: Site) -> bool:
    """Whether ``expression`` (or the value its name was bound to, one level) names A."""
    value = _bound_value(model, expression, site)
    return any(model.is_accumulation_name(node) for node in walk(value)
               if isinstance(node, (cst.Name, cst.Attribute)))


def _divided(model: FileModel, group: Group) -> bool:
    backwards = [e for e in group.events if e.kind is EventKind.BACKWARD and group.in_loop(e)]
    return bool(backwards) and all(model.divided_by_a(e) for e in backwards)


def _restores_true_count(model: FileModel, group: Group, events: list[Event]) -> bool:
    """Whether, before an update, ``events`` rescale the accumulated gradients in place by a
    factor that undoes the losses' 1/A for a group of r microbatches: multiplied by A over a count
    (``p.grad.mul_(A / pending)``, ``*= A / r``, ``scale_grads(model, A / r)``) or divided by a
    count over A (``div_(r / A)``). A full group's factor is 1 and the short one is weighed by its
    true size, whatever the count's name; a rescale on every microbatch is no such factor."""
    updates = [e.order for e in events if e.kind is EventKind.UPDATE]
    for event in events:
        if (event.kind is not EventKind.GRAD_RESCALE or not any(event.order < u for u in updates)
                or (group.in_loop(event) and group.cadence(event) is Cadence.MICROBATCH)):
            continue
        factor, divides = rescale_factor(event)
        for value, operator, _ in value_history(factor, event.site) if factor is not None else ():
            if operator is not None or not (isinstance(value, cst.BinaryOperation)
                                            and isinstance(value.operator, cst.Divide)):
                continue
            over_a, count = (value.right, value.left) if divides else (value.left, value.right)
            # the count is often computed from A (`pending = i % A + 1`); it must not be A itself
            if _mentions_a(model, over_a, event.site) and not any(
                    model.is_accumulation_name(v) for v, op, _ in value_history(count, event.site) if op is None):
                return True
    return False


def _backward_per_microbatch(group: Group) -> bool:
    """Whether the loop backpropagates every microbatch (a tail exists in ``.grad``), not only
    at the boundary (losses collected and backpropagated together leave no gradient behind)."""
    backwards = [e for e in group.events if e.kind is EventKind.BACKWARD and group.in_loop(e)]
    return bool(backwards) and all(group.cadence(e) is Cadence.MICROBATCH for e in backwards)


def _flush_report(group: Group, update: Event) -> cst.CSTNode:
    """The ``if`` that guards a post-loop flush (the flush itself when unconditional)."""
    _, end = group.scope.loop_spans[group.loop]
    for frame in reversed(update.site.frames):
        if frame.kind is FrameKind.IF and group.scope.statement_orders.get(id(frame.node), -1) >= end:
            return frame.node
    return update.node


def _pass_source(model: FileModel, group: Group) -> str | None:
    """The name (last segment) of what one pass of the loop consumes: the loader it iterates
    (directly, through ``enumerate``/``tqdm``, or through a name bound to such a wrapper in the
    same pass), or the per-epoch length of ``for i in range(steps_per_epoch): b = next(it)``."""
    loader = _loader_of(group, model.roles)
    if loader is not None:
        return last_segment(dotted(loader))
    alias = group.iterable
    if alias is not None and isinstance(alias, cst.Name):
        definition = model.reaching(alias.value, group.loop_sites[0])
        if (definition is not None and definition.value is not None and not definition.in_helper
                and (group.outer_loop is None or definition.inside(group.outer_loop))):
            unwrapped = _unwrap(definition.value)
            if (unwrapped is not None and unwrapped is not definition.value
                    and model.roles.of(unwrapped, definition).role is Role.LOADER):
                return last_segment(dotted(unwrapped))
        return None
    return _epoch_range(group)


def _unwrap(value: cst.BaseExpression) -> cst.BaseExpression | None:
    while isinstance(value, cst.Call) and last_segment(dotted(value.func)) in _WRAPPERS:
        if not value.args or value.args[0].keyword is not None:
            return None
        value = value.args[0].value
    return value if isinstance(value, (cst.Name, cst.Attribute)) else None


#: wrappers that yield what the loader yields (``enumerate`` adds the per-pass index)
_WRAPPERS = frozenset({"enumerate", "tqdm", "iter"})


def _epoch_range(group: Group) -> str | None:
    """``for i in range(iters_per_epoch):`` whose body draws ``next(it)`` from an iterator made
    outside the loop: the bound's name (a per-epoch length by its name), else None."""
    loop = group.loop
    if not (isinstance(loop, cst.For) and isinstance(loop.iter, cst.Call) and dotted(loop.iter.func) == "range"
            and len(loop.iter.args) == 1 and isinstance(loop.target, cst.Name)):
        return None
    bound = dotted(loop.iter.args[0].value)
    if bound is None or not conventions.EPOCH_LENGTH_NAME.search(last_segment(bound)):
        return None
    for site in group.loop_sites:
        call = site.call
        if (call is not None and not site.in_helper and dotted(call.func) == "next" and call.args
                and isinstance(call.args[0].value, cst.Name)
                and dotted(call.args[0].value) not in group.assigned):
            return last_segment(bound)
    return None


def _called_in_loop(model: FileModel, group: Group) -> bool:
    """Whether the function holding ``group`` is called from a loop of this module (an epoch
    loop in the caller) whose own code neither resets the gradients nor updates: a plain
    function by its name, a method through ``self.name(...)`` in the same class."""
    function = group.scope.node
    if not isinstance(function, cst.FunctionDef):
        return False
    owner = group.scope.class_def
    wanted = function.name.value if owner is None else f"self.{function.name.value}"
    for scope in model.scopes:
        if owner is not None and scope.class_def is not owner:
            continue
        for site in scope.sites:
            if site.call is None or site.in_helper or dotted(site.call.func) != wanted:
                continue
            loops = [frame.node for frame in site.frames if frame.kind is FrameKind.LOOP]
            if loops and not _handled_around(model, scope, loops[-1]):
                return True
    return False


def _handled_around(model: FileModel, scope, loop: cst.CSTNode) -> bool:
    """Whether the caller's loop resets the gradients or updates in its own code (not in the
    callee inlined into it): the tail is then wiped or applied between the calls."""
    return any(e.kind in (EventKind.RESET, EventKind.UPDATE) and not e.site.in_helper and e.site.inside(loop)
               for e in model.events[scope])


def _counter_tail(model: FileModel, group: Group, test: boundary.BoundaryTest,
                  scope_events: list[Event]) -> Tail | None:
    """A counter gate (``n += 1; if n == A: ...; n = 0``) inside an epoch loop, with nothing
    after the micro-loop: one set in the epoch loop's body restarts with it, and with no reset at
    the epoch's start the tail leaks into the next epoch's first update (a count that survives
    the epoch is left to the simulated runs)."""
    outer = group.outer_loop
    counter = dotted(test.dividend) if test.dividend is not None else None
    if counter is None or (outer is not None and not isinstance(outer, cst.For)):
        return None
    if outer is None and not _called_in_loop(model, group):
        return None
    if test.samples and not _restarted_under_gate(group, counter):
        return None  # a sample count that is never restarted is no group's counter
    source = _pass_source(model, group)
    if (source is None or length_facts(model).get(source) is LengthFact.MULTIPLE_OF_A
            or drops_partial_group(model, group)):
        return None
    if not _backward_per_microbatch(group):
        return None
    after = _events_after(group, scope_events)
    if any(e.kind in (EventKind.UPDATE, EventKind.RESET) for e in after):
        return None
    start, _ = group.scope.loop_spans[group.loop]
    sets = [s for s in group.scope.sites if counter in s.targets and s.augmented is None
            and not s.in_helper and s.order < start]
    if not sets:
        return None
    if outer is None:  # the function is the pass: a counter set in it restarts with every call
        restarts = True
    else:
        outer_start, _ = group.scope.loop_spans[outer]
        restarts = sets[-1].inside(outer) and sets[-1].order >= outer_start
    if not restarts or _reset_at_pass_start(group, scope_events):
        return None  # a tail dropped on purpose, or a count that survives the epoch
    report = test.report or group.gate.frame_node  # type: ignore[union-attr]
    return Tail(TailTreatment.LEAKS, None, _divided(model, group), report, samples=test.samples)


def engine_window_tail(model: FileModel, group: Group) -> cst.CSTNode | None:
    """The ``yield`` of a trailing partial window that a loop stepping a DeepSpeed engine every
    microbatch treats as a group of its own, or None.

    The loop iterates a generator of this module that groups the loader into windows of A
    (yields under ``if len(window) == A``) and yields the last, shorter window after its loop
    (``if window: ... yield``), inside an epoch loop, with nothing telling the engine the
    boundary (``set_gradient_accumulation_boundary``). The engine counts micro-steps globally
    (its row in :data:`accumlint.frameworks.FRAMEWORK_TAILS`), so from the second epoch on its
    groups straddle the code's windows."""
    loop = group.loop
    if group.style is not LoopStyle.DEEPSPEED or group.outer_loop is None or not isinstance(loop, cst.For):
        return None
    if any(site.call is not None and last_segment(dotted(site.call.func) or "") in fw.deepspeed.MANUAL_BOUNDARY_CALLS
           for site in group.scope.sites):
        return None
    call = loop.iter
    if not (isinstance(call, cst.Call) and isinstance(call.func, cst.Name)):
        return None
    if not any(model.is_accumulation_name(arg.value) for arg in call.args):
        return None
    builder = next((scope.node for scope in model.scopes if isinstance(scope.node, cst.FunctionDef)
                    and scope.class_def is None and scope.node.name.value == call.func.value), None)
    return _trailing_window_yield(builder) if builder is not None else None


def _trailing_window_yield(function: cst.FunctionDef) -> cst.CSTNode | None:
    """In a generator ``for x in src: buf.append(x); if len(buf) == n: ... yield ...`` followed
    by ``if buf: ... yield ...``: the trailing yield."""
    body = list(function.body.body) if isinstance(function.body, cst.IndentedBlock) else []
    for index, statement in enumerate(body):
        if not isinstance(statement, cst.For):
            continue
        full = [node for node in walk(statement) if isinstance(node, cst.If) and _len_equals(node.test)]
        if not full or not any(isinstance(node, cst.Yield) for f in full for node in walk(f.body)):
            continue
        for after in body[index + 1:]:
            if isinstance(after, cst.If) and _names_buffer(after.test, full[0].test):
                found = [node for node in walk(after.body) if isinstance(node, cst.Yield)]
                if found:
                    return found[0]
    return None


def _len_equals(test: cst.BaseExpression) -> bool:
    """``len(buf) == n``."""
    return (isinstance(test, cst.Comparison) and len(test.comparisons) == 1
            and isinstance(test.comparisons[0].operator, cst.Equal) and _len_of(test.left) is not None)


def _names_buffer(test: cst.BaseExpression, full: cst.BaseExpression) -> bool:
    """``if buf:`` / ``if len(buf):`` / ``if len(buf) > 0:`` on the buffer ``full`` measures."""
    buffer = _len_of(full.left)  # type: ignore[attr-defined]
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        test = test.left
    return dotted(test) == buffer or _len_of(test) == buffer


def _restarted_under_gate(group: Group, counter: str) -> bool:
    """Whether the gate's branch sets ``counter`` anew (``seen = 0``, ``seen -= target``)."""
    gate = group.gate
    if gate is None:
        return False
    for site in group.loop_sites:
        if counter not in site.targets or site.in_helper:
            continue
        if site.augmented is None or isinstance(site.augmented, cst.SubtractAssign):
            if any(frame.node is gate.frame_node and frame.branch == gate.update_branch for frame in site.frames):
                return True
    return False


def _framework(key: str) -> Tail:
    row = fw.FRAMEWORK_TAILS[key]
    return Tail(row.treatment, row.framework, row.treatment is TailTreatment.WEIGHTED, None, row.source)


def _loader_of(group: Group, roles: Roles) -> cst.BaseExpression | None:
    """The data loader a ``for`` loop iterates (through ``enumerate``/``tqdm``), when it is one:
    a loader by its construction or name, or by its use, a parameter of no known role that the
    microbatch loop draws its microbatches from (the caller's loader, whatever it is called)."""
    iterable = group.iterable
    if iterable is None:
        return None
    role = roles.of(iterable, group.loop_sites[0]).role
    if role is Role.LOADER or role is Role.UNKNOWN and _is_parameter(group, iterable):
        return iterable
    return None


def _is_parameter(group: Group, expression: cst.BaseExpression) -> bool:
    """Whether ``expression`` is a parameter of the group's function that its code never rebinds."""
    node = group.scope.node
    if not isinstance(node, cst.FunctionDef) or not isinstance(expression, cst.Name):
        return False
    params = node.params
    name = expression.value
    return (any(p.name.value == name for p in (*params.posonly_params, *params.params, *params.kwonly_params))
            and not any(name in site.targets for site in group.scope.sites if not site.in_helper))


def _per_pass_index(group: Group, test: boundary.BoundaryTest) -> bool:
    """Whether the modulo's index restarts with every pass over the loader: the loop's own
    ``enumerate`` index, or a counter set to a constant right before the loop (same block)."""
    split = boundary.index_offset(test.dividend)
    if split is None:
        return False
    name = split[0]
    loop = group.loop
    target = loop.target if isinstance(loop, cst.For) else None
    if isinstance(target, (cst.Tuple, cst.List)) and target.elements and dotted(target.elements[0].value) == name:
        return True
    if isinstance(target, cst.Name) and target.value == name and isinstance(loop.iter, cst.Call) and (
            dotted(loop.iter.func) == "range"):
        return True  # `for i in range(n)`: restarts at every pass
    scope_sites = group.scope.sites
    first = group.loop_sites[0]
    if boundary.first_value(test.dividend, loop, scope_sites, first.order) is None:
        return False
    loop_frames = first.frames[:-1] if first.frames and first.frames[-1].node is loop else None
    if loop_frames is None:
        return False
    inits = [s for s in scope_sites if s.order < first.order and name in s.targets and not s.in_helper]
    return bool(inits) and _same_block(inits[-1], loop_frames)


def _same_block(site: Site, frames: tuple) -> bool:
    return len(site.frames) == len(frames) and all(a.node is b.node for a, b in zip(site.frames, frames, strict=True))


def _events_after(group: Group, scope_events: list[Event]) -> list[Event]:
    """Events after the microbatch loop, up to the end of its pass (the enclosing loop's body,
    or the rest of the function)."""
    _, end = group.scope.loop_spans[group.loop]
    outer = group.outer_loop
    return [e for e in scope_events if e.order >= end and (outer is None or e.site.inside(outer))]


def _reset_at_pass_start(group: Group, scope_events: list[Event]) -> bool:
    """A reset in the enclosing loop's body before the microbatch loop (it wipes the previous
    pass's tail), or in the function before the loop when there is no enclosing loop."""
    start, _ = group.scope.loop_spans[group.loop]
    outer = group.outer_loop
    return any(e.kind is EventKind.RESET and e.order < start and (outer is None or e.site.inside(outer))
               for e in scope_events)
