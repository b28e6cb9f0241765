"""Framework usage contracts: Accelerate's ``accumulate()``, DeepSpeed's ``engine.step()`` and its counters (P1).

The family's own analysis lives beside the rules: :mod:`.accumulate` (Accelerate's ``accumulate()``
entered more than once per microbatch, or without the trained model).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import libcst as cst

from accumlint import frameworks as fw
from accumlint.checks.base import Hit, Rule
from accumlint.checks.framework_usage.accumulate import double_entries, omitted_trained_models
from accumlint.checks.gate import RuleGate
from accumlint.model import Cadence, EventKind, FileModel, LoopStyle, Role
from accumlint.model.closures import gated_closures
from accumlint.model.interpreter import LEFT_TO_ACC501
from accumlint.model.kinds import Evidence
from accumlint.model.names import code_of, dotted, int_value, method_name
from accumlint.model.scopes import FrameKind
from accumlint.model.trace import Trace

#: ACC501's site part where a reset runs before the backward inside ``accumulate()``
_RESET_AFTER_STEP = "move `optimizer.zero_grad()` after `optimizer.step()`, at the end of the block"


def _left_to_this_rule(trace: Trace) -> bool:
    """Whether a run leaves nothing open but what ACC501 reports."""
    return all(r.endswith(LEFT_TO_ACC501) for r in trace.undecided)


def _early_resets(model: FileModel) -> list[cst.CSTNode]:
    """The resets a framework gates to the group's last microbatch that act there before its backward
    in every run of a configuration with A > 1, runs that leave nothing else open (a reset under a
    condition on the data is left to the code's intent; with A = 1 every microbatch ends a group and
    nothing is wiped)."""
    return [node for node in _in_every_run(model, lambda trace: trace.early_gated, _left_to_this_rule)
            if method_name(node) == "zero_grad"]


def _in_every_run(model: FileModel, nodes: Callable[[Trace], list[cst.CSTNode]],
                  admits: Callable[[Trace], bool] = lambda trace: True) -> list[cst.CSTNode]:
    """The nodes that ``nodes`` gives for every run of some configuration with A > 1, among the runs
    that ``admits`` (each run-level choice is a run: a node on one branch alone is no verdict)."""
    found: dict[int, cst.CSTNode] = {}
    for simulation in model.simulations:
        runs: dict[object, list[Trace]] = {}
        for trace in simulation.traces:
            if trace.configuration.accumulation > 1 and admits(trace):
                runs.setdefault(trace.configuration, []).append(trace)
        for traces in runs.values():
            every = set.intersection(*({id(n) for n in nodes(t)} for t in traces))
            found.update((id(n), n) for n in nodes(traces[0]) if id(n) in every)
    return list(found.values())


def _prepared_reset_first(node: cst.CSTNode) -> Hit:
    """ACC501 at a prepared optimizer's reset that runs before the backward inside ``accumulate()``."""
    return Hit(
        node,
        "the prepared optimizer's reset runs before the backward inside `accumulate()`: on the "
        "group's last microbatch it is not a no-op and wipes the A−1 contributions already "
        "accumulated, so only the last microbatch reaches the update",
        _RESET_AFTER_STEP,
    )


def _entered_twice(node: cst.CSTNode) -> Hit:
    """ACC501 at a ``with`` that enters ``accumulate()`` a second time in one microbatch."""
    return Hit(
        node,
        "`accumulate()` is entered twice per microbatch: each entry advances Accelerate's step "
        "counter, so with an even A the sync and the update come every A/2 microbatches, each "
        "applying half a group divided by A",
        "enter it once, with every model, around the forward, the backward and the update: "
        "`with accelerator.accumulate(model_a, model_b):`",
    )


class AccumulateContextMisplaced(Rule):
    """ACC501: Accelerate's ``accumulate()`` entered in the wrong place (or not at all)."""

    code = "ACC501"

    def check(self, model: FileModel) -> Iterator[Hit]:
        reported: set[int] = set()
        for group in model.loops:
            for site in group.loop_sites[:1]:
                for frame in site.frames:
                    if frame.node is group.loop or frame.kind is FrameKind.HELPER:
                        break
                    if (frame.kind is FrameKind.WITH and model.frameworks.is_accumulate_context(frame.node, group.scope)
                            and id(frame.node) not in reported and _forwards_in_loop(model, group, frame.node)):
                        reported.add(id(frame.node))
                        yield Hit(
                            frame.node,
                            "`accumulate()` is entered once around the whole loop, so Accelerate decides "
                            "only once whether to synchronize: the prepared optimizer never updates (or "
                            "updates every microbatch) for the whole loop",
                            "move `with accelerator.accumulate(model):` inside the loop",
                        )
            for hit in self._reset_before_backward(group):
                if id(hit.node) not in reported:
                    reported.add(id(hit.node))
                    yield hit
            yield from self._never_entered(model, group)
            if group.accumulates is not False:
                for with_node in double_entries(group):
                    if id(with_node) not in reported:
                        reported.add(id(with_node))
                        yield _entered_twice(with_node)
        # the runs see a reset the static reading misses (an optimizer prepared through a helper)
        for node in _early_resets(model):
            if id(node) not in reported:
                reported.add(id(node))
                yield _prepared_reset_first(node)
        # and a second entry the reading of one block misses (two `accumulate()` blocks one after the other)
        for node in _in_every_run(model, lambda trace: trace.double_entries, _left_to_this_rule):
            if id(node) not in reported and id(node) in model.local_nodes:
                reported.add(id(node))
                yield _entered_twice(node)

    def _reset_before_backward(self, group) -> Iterator[Hit]:
        for context in group.accumulate_contexts:
            inside = [e for e in group.events if e.site.inside(context)]
            backwards = [e.order for e in inside if e.kind is EventKind.BACKWARD]
            if not backwards:
                continue
            for reset in inside:
                if reset.kind is not EventKind.RESET or reset.order >= min(backwards):
                    continue
                if group.cadence(reset) is Cadence.FRAMEWORK_GATED or _gated_by(reset, context):
                    yield _prepared_reset_first(reset.node)
                elif group.accumulates is not False and _gated_by(reset, context, prepared=None):
                    # prepared or not, the reset wipes the group: gated, on its last microbatch;
                    # ungated, on every microbatch (ACC001's case)
                    yield Hit(
                        reset.node,
                        "the optimizer's reset runs before the backward inside `accumulate()`: whether it is the "
                        "prepared optimizer (Accelerate lets the reset through on the group's last microbatch) or "
                        "not (then it runs on every microbatch), it wipes the contributions already accumulated, "
                        "so only the last microbatch reaches the update",
                        _RESET_AFTER_STEP,
                    )

    def _never_entered(self, model: FileModel, group) -> Iterator[Hit]:
        if group.style is not LoopStyle.UNGATED or group.accumulate_contexts:
            return
        backwards = [b for b in group.of_kind(EventKind.BACKWARD) if b.role.role is Role.ACCELERATOR]
        entered = model.frameworks.accumulate_entry
        if not backwards or any(f.kind is FrameKind.WITH and entered(f.node, b.site.scope, every=False)
                                for b in backwards for f in b.site.frames):
            return  # accumulate() entered around the loop: the first check of this rule speaks
        configured = model.frameworks.accelerate_accumulation(backwards[0].role)
        if configured is None or configured is False or int_value(configured) == 1:  # type: ignore[arg-type]
            return
        for update in group.of_kind(EventKind.UPDATE):
            if group.cadence(update) is Cadence.MICROBATCH and update.role.role is Role.OPTIMIZER:
                yield Hit(
                    update.node,
                    "the Accelerator is configured with gradient_accumulation_steps but `accumulate()` is never "
                    "entered, so the prepared optimizer updates on every microbatch with gradients divided by A",
                )


def _gated_by(reset, context: cst.With, prepared: bool | None = True) -> bool:
    """Whether a reset is a prepared optimizer's (Accelerate gates it to the sync microbatch) and
    runs whenever ``context`` is entered (no branch or loop of its own inside it), whatever the
    loop around decides: `if gen_turn: with accelerator.accumulate(gen): g_opt.zero_grad(); ...`.
    ``prepared=None``: the optimizer's preparation is undecided (its definitions disagree)."""
    role = reset.role
    if role.role not in fw.accelerate.GATED_ROLES or role.prepared is not prepared:
        return False
    if prepared is None and role.role is not Role.OPTIMIZER:
        return False
    frames = reset.site.frames_inside(context)
    return not any(f.kind in (FrameKind.IF, FrameKind.GUARD, FrameKind.HANDLER, FrameKind.MATCH, FrameKind.LOOP,
                              FrameKind.HELPER) for f in frames)


def _forwards_in_loop(model: FileModel, group, context: cst.With) -> bool:
    """Whether the loop inside ``accumulate(model)`` runs the forward of that model, i.e. iterates
    microbatches (a loop over several losses of one microbatch does not)."""
    entry = model.frameworks.accumulate_entry(context, group.scope)
    if entry is None:
        return False
    models = {dotted(arg.value) for arg in entry[1].args}
    return any(s.call is not None and dotted(s.call.func) in models for s in group.loop_sites)


class EngineStepGated(Rule):
    """ACC502: DeepSpeed's ``engine.step()`` behind the user's own boundary test."""

    code = "ACC502"

    def check(self, model: FileModel) -> Iterator[Hit]:
        reported: set[int] = set()
        for hit in self._read(model):
            reported.add(id(hit.node))
            yield hit
        # the runs follow the step into helpers and objects the reading does not (a strategy on `self`)
        if model.simulations and not model.frameworks.deepspeed_unmanaged:
            for node in _in_every_run(model, lambda trace: [_under_the_gate(model, chain)
                                                            for chain, label in trace.gated_counts
                                                            if label is None or _built_engine(model, chain, label)]):
                if id(node) not in reported:
                    reported.add(id(node))
                    yield _gated_step(node)

    def _read(self, model: FileModel) -> Iterator[Hit]:
        for group in model.loops:
            for update in group.of_kind(EventKind.UPDATE):
                role = update.role
                # (an engine known by its use alone, its config unseen, stepped once per group by hand is
                # as likely one of GAS 1 that the code accumulates for)
                engine_step = role.role is Role.ENGINE and update.method == "step" and role.evidence is not Evidence.USE
                # the config search walks the whole module: only once a gated step is seen
                if (engine_step and group.cadence(update) is Cadence.UPDATE and not _manual_boundary(group)
                        and not model.frameworks.deepspeed_unmanaged):
                    yield _gated_step(update.node)
                elif role.role is Role.OPTIMIZER and (role.owner == fw.deepspeed.PACKAGE or (
                        # `engine.optimizer` only where DeepSpeed is imported: an ignite process
                        # function's `engine` is ignite's Engine
                        model.imports.imports_module(fw.deepspeed.PACKAGE)
                        and _engine_optimizer(model, update))):
                    yield Hit(
                        update.node,
                        "the DeepSpeed optimizer is stepped directly, bypassing the engine: no boundary "
                        "check, no gradient reduction or reset, no engine-owned scheduler step",
                        "step the engine, not its optimizer",
                    )


def _gated_step(node: cst.CSTNode) -> Hit:
    """ACC502 at an engine's step (or the call that leads to it) that the code runs once per group."""
    return Hit(
        node,
        "DeepSpeed expects `engine.step()` after every microbatch and decides the boundary "
        "itself; gated by hand it sees one micro-step per group, so updates come every A² "
        "microbatches (or never)",
        "take `engine.step()` out of the gate",
    )


def _under_the_gate(model: FileModel, chain: tuple[cst.CSTNode, ...]) -> cst.CSTNode:
    """Of the calls of this module that led to a gated counting call (outermost first), the innermost
    one a condition of its own function holds (the learner's gated call of a strategy's
    ``optimizer_step``, not the strategy's ungated ``model.step()``); the innermost where none is."""
    for node in reversed(chain):
        site = model.roles.own_site(node)
        if site is not None and any(f.kind in (FrameKind.IF, FrameKind.GUARD) for f in site.frames):
            return node
    return chain[-1]


def _built_engine(model: FileModel, chain: tuple[cst.CSTNode, ...], label: str) -> bool:
    """Whether ``label``, read where a call of ``chain`` is, is a DeepSpeed engine the code builds or
    declares (an engine known by its name or use alone, its config unseen, stepped once per group by
    hand is as likely one of GAS 1 that the code accumulates for)."""
    for node in chain:
        site = model.roles.own_site(node)
        if site is not None:
            info = model.roles.named(label, site.scope, site.order)
            if info.role is Role.ENGINE and info.evidence >= Evidence.ANNOTATION:
                return True
    return False


def _engine_optimizer(model: FileModel, update) -> bool:
    """Whether an update steps ``X.optimizer`` of a DeepSpeed engine ``X``: named ``engine``, or
    an engine by its construction (``v, *_ = deepspeed.initialize(...)``)."""
    target = update.target
    if (dotted(target) or "").endswith("engine.optimizer"):
        return True
    return (isinstance(target, cst.Attribute) and target.attr.value == "optimizer"
            and model.roles.of(target.value, update.site).role is Role.ENGINE)


def _manual_boundary(group) -> bool:
    """Whether the loop tells the engine the boundary itself (``set_gradient_accumulation_boundary``)."""
    return any(site.call is not None and method_name(site.call) in fw.deepspeed.MANUAL_BOUNDARY_CALLS
               for site in group.loop_sites)


class EngineCounterOverwritten(Rule):
    """ACC505: user code writes a DeepSpeed engine's own counter (``engine.micro_steps = 0``) inside
    the microbatch loop, on a path that runs every microbatch or every group."""

    code = "ACC505"

    def check(self, model: FileModel) -> Iterator[Hit]:
        reported: set[int] = set()
        for group in model.loops:
            if not model.imports.imports_module(fw.deepspeed.PACKAGE) or _manual_boundary(group):
                continue  # a boundary set by hand: the engine's micro-step counter decides nothing
            for site in group.loop_sites:
                if group.store_cadence(site) not in _REPEATING or id(site.report) in reported:
                    continue
                target = next((t for t in _stored_attributes(site) if t.attr.value in fw.deepspeed.ENGINE_COUNTERS
                               and _is_engine(model, group, t.value, site)), None)
                if target is None:
                    continue
                if model.frameworks.deepspeed_unmanaged:
                    return  # the engine's own accounting is off (the config is read once a write is seen)
                reported.add(id(site.report))
                what, effect = fw.deepspeed.ENGINE_COUNTERS[target.attr.value]
                yield Hit(
                    site.report,
                    f"`{dotted(target) or target.attr.value}` is {what}: written by the loop on every microbatch "
                    f"or group, {effect}",
                )


#: the store cadences of a write that repeats during training
_REPEATING = frozenset({Cadence.MICROBATCH, Cadence.UPDATE, Cadence.NON_BOUNDARY})


def _stored_attributes(site) -> list[cst.Attribute]:
    """The attribute targets an assignment site stores to (``a.b = c``, ``a.b += 1``, ``a.b = d.e = 0``)."""
    statement = site.statement
    if isinstance(statement, cst.Assign):
        targets = [t.target for t in statement.targets]
    elif isinstance(statement, (cst.AugAssign, cst.AnnAssign)):
        targets = [statement.target]
    else:
        return []
    return [t for t in targets if isinstance(t, cst.Attribute)]


def _is_engine(model: FileModel, group, receiver: cst.BaseExpression, site) -> bool:
    """Whether ``receiver`` is a DeepSpeed engine by construction (``deepspeed.initialize``) or by
    use: it runs a backward and is stepped (the roles say so for a name; for an object reached
    through another's attributes, ``stepper.engine``, the loop's own events do: its backward takes
    the loss and its update is ``step()`` on the same object). A name alone (``engine``) is not enough."""
    role = model.roles.of(receiver, site)
    if role.role is Role.ENGINE and (role.owner == fw.deepspeed.PACKAGE or role.evidence >= Evidence.USE):
        return True
    if site.inline is not None:
        receiver, where = site.inline.resolve(receiver)
        if where is not None:
            return False  # a name of the helper's own: the loop's events speak the caller's names
    name = dotted(receiver)
    used = {(e.kind, e.method) for e in group.events if e.target is not None and dotted(e.target) == name
            and (e.kind is not EventKind.BACKWARD or e.loss is not None)}
    return name is not None and {(EventKind.BACKWARD, "backward"), (EventKind.UPDATE, "step")} <= used


class AccumulateOmitsTrainedModel(Rule):
    """ACC503: ``with accelerator.accumulate(a):`` around a backward that also trains a second
    prepared model ``b`` (an optimizer over its parameters updates in the loop): Accelerate
    defers the gradient all-reduce of the models it is given only, so ``b``'s DDP wrapper
    all-reduces on every microbatch."""

    code = "ACC503"
    #: a file that enters ``accumulate()``
    gate = RuleGate(markers=(fw.accelerate.ACCUMULATE_METHOD.encode(),),
                    facts=lambda facts: facts.calls((fw.accelerate.ACCUMULATE_METHOD,)))

    def check(self, model: FileModel) -> Iterator[Hit]:
        for group in model.loops:
            if group.accumulates is False:
                continue
            for omitted in omitted_trained_models(model, group):
                passed = ", ".join(omitted.passed)
                yield Hit(
                    omitted.call,
                    f"`accumulate({passed})` leaves out `{omitted.name}`, which the backward in this block also "
                    f"trains (`{omitted.optimizer}` updates its parameters): under DDP its gradients are "
                    "all-reduced on every microbatch instead of once per group, and its sync is not deferred "
                    "with the others",
                    f"`accumulate({passed}, {omitted.name})`",
                )


class OptimizerStepClosureSkipped(Rule):
    """ACC504: a LightningModule's ``optimizer_step`` override hands Lightning's closure on
    (``optimizer.step(closure=optimizer_closure)``) only on the batches a hand-made accumulation
    gate selects (:func:`~accumlint.model.closures.gated_closures`): the closure runs the batch's
    ``training_step`` and backward, so the other batches are never trained on, or Lightning fails
    with "The closure hasn't been executed".

    Silent where the closure also runs on the other batches, runs on every batch, or the gate
    logic cannot decide the condition."""

    code = "ACC504"
    gate = RuleGate(markers=tuple(hook.encode() for hook in sorted(fw.lightning.UPDATE_STEP_HOOKS)),
                    facts=lambda facts: facts.defines(fw.lightning.UPDATE_STEP_HOOKS))

    def check(self, model: FileModel) -> Iterator[Hit]:
        for gated in gated_closures(model):
            test = code_of(gated.test)
            yield Hit(
                gated.step.report,
                f"`{gated.closure}` is handed to the optimizer only on the batches where `{test}` is "
                f"{'true' if gated.holds else 'false'}: the closure runs `training_step` and the backward, so on the "
                "other batches nothing is trained (Lightning 2.x "
                "stops with \"The closure hasn't been executed\")",
                f"call `{gated.closure}()` in an `else:` branch on the batches that skip the step",
            )
