"""Data parallelism and counting: samples, replicas and denominators (P10–P12)."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial

import libcst as cst

from accumlint import frameworks as fw
from accumlint.checks.base import Hit, Rule
from accumlint.checks.gate import A_NAMED_OR_BOUND_BYTES, RuleGate, runs_loop
from accumlint.checks.shared.ledger import Factor, gradient_rescales, ledger
from accumlint.checks.shared.loss_chain import constant, loss_chain
from accumlint.checks.shared.parallel import Sampling, data_parallel
from accumlint.model import EventKind, FileModel, conventions
from accumlint.model.dataflow import names_feeding, value_history
from accumlint.model.events import BACKWARD_CALLS, Event
from accumlint.model.names import dotted, last_segment, method_name
from accumlint.model.sync import reduces_by_hand
from accumlint.source.source_facts import SourceFacts


class DuplicateSamplesAcrossReplicas(Rule):
    """ACC403: a loop of a DDP/FSDP (or process-group) module reads a ``DataLoader`` built here
    with no distributed sampler and no rank sharding, so every replica reads the same samples.

    Silent when the loader is prepared by Accelerate, set up by Fabric or built by DeepSpeed,
    when its sampler is a variable, when its dataset may be iterable (no ``shuffle=True``,
    unknown class), or when anything in the module slices or shards data by rank."""

    code = "ACC403"
    # the default gate: the loop that reads the loader runs a backward (a DataLoader marker
    # would only add files to the byte stage that the gate then drops)

    def check(self, model: FileModel) -> Iterator[Hit]:
        parallel = data_parallel(model)
        if not parallel.replicated:
            return
        reported: set[int] = set()
        for group in model.loops:
            use = parallel.loader_of(group)
            if use is None or use.built_here is None or id(use.built_here) in reported:
                continue
            if parallel.sampling(use) is not Sampling.REPLICATED:
                continue
            reported.add(id(use.built_here))
            yield Hit(
                use.built_here,
                "this DataLoader has no distributed sampler and nothing shards its dataset by rank, so each of "
                "the D data-parallel replicas reads the whole dataset: the replicas average gradients of the same "
                "examples (identical batches when every rank seeds alike), the effective batch is m x A instead "
                "of m x A x D, and an epoch is D times longer",
            )


class EffectiveBatchCountsDevices(Rule):
    """ACC404: A or an effective/global batch computed from the GPU count (``torch.cuda.device_count()``,
    ``nproc_per_node``, ``LOCAL_WORLD_SIZE``) in a multi-process run, or from the whole world
    size while tensor/pipeline parallelism (size > 1) is configured in the same code.

    Silent with ``nn.DataParallel`` (one process: the GPU count is the replica count), when
    the world is built from the GPU count (``mp.spawn(nprocs=ngpus)``, ``world_size = ngpus * nodes``),
    and when the expression also reads a node count or a tensor/pipeline size."""

    code = "ACC404"
    #: a replicated module (a process group or a DDP/FSDP wrapper is called) and the name of A
    #: or of a global batch that the flagged statement assigns to, or a name A by its use (a
    #: gate's divisor called ``v7``: :attr:`FileModel.accumulation_aliases`)
    gate = RuleGate(
        markers=(b"device_count", b"get_world_size", b"getenv", b"environ", b"backward",  # WORLD_SIZE from the env
                 *(n.encode() for n in sorted(fw.PROCESS_GROUP_INIT)),
                 b"DistributedDataParallel", b"DDP", b"FullyShardedDataParallel", b"FSDP", b"fully_shard"),
        requires=A_NAMED_OR_BOUND_BYTES,
        facts=lambda facts: _may_count_devices(facts))

    def check(self, model: FileModel) -> Iterator[Hit]:
        parallel = data_parallel(model)
        devices_apply = (parallel.replicated and not parallel.single_process_replicas
                         and not parallel.device_count_defines_world)
        for scope in model.scopes:
            for site in scope.sites:
                if site.in_helper or site.value is None or site.call is not None or site.is_return:
                    continue
                if isinstance(site.node, (cst.For, cst.With)):
                    continue
                target = next((t for t in site.targets
                               if t and (_counts_a_or_batch(t) or t in model.accumulation_aliases)), None)
                if target is None and len(site.targets) == 1 and _effective_batch_shape(model, site.value):
                    target = site.targets[0]
                if target is None:
                    continue
                value = site.value
                if parallel.counts_replicas(value) and not parallel.counts_whole_world(value):
                    continue  # a data-parallel size is read: the count is right, or the mix is not ours to judge
                if devices_apply and parallel.counts_devices(value) and not parallel.counts_nodes(value):
                    yield Hit(
                        site.statement,
                        f"`{target}` is computed from the number of GPUs on this node, not from the data-parallel "
                        "world size D: with fewer processes than GPUs, or several nodes, the effective batch "
                        "m x A x D differs from the one intended",
                        "use `dist.get_world_size()` (or `WORLD_SIZE`), divided by the tensor/pipeline-parallel "
                        "sizes if any, not the GPU count",
                    )
                elif (parallel.counts_whole_world(value) and not parallel.mentions_model_parallel(value)
                      and parallel.model_parallel_configured):
                    yield Hit(
                        site.statement,
                        f"`{target}` is computed from the whole world size while tensor/pipeline parallelism is "
                        "configured: GPUs that share one model replica are counted as data-parallel replicas, so "
                        "the effective batch is off by the tensor x pipeline parallel size",
                        "divide the world size by the tensor and pipeline parallel sizes, or take the data-parallel "
                        "process group's size",
                    )


def _effective_batch_shape(model: FileModel, value: cst.BaseExpression) -> bool:
    """Whether a value is a product of at least three factors, one of them A and one a replica,
    process or GPU count (``micro_bs * grad_accum * world``): an effective batch by its shape."""
    factors: list[cst.BaseExpression] = []
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply):
            stack.extend((node.left, node.right))
        else:
            factors.append(node)
    parallel = data_parallel(model)
    return len(factors) >= 3 and any(model.is_accumulation_name(f) for f in factors) and any(
        parallel.counts_replicas(f) or parallel.counts_devices(f) for f in factors)


def _may_count_devices(facts: SourceFacts) -> bool:
    """ACC404's ast stage: an assignment to a name of A or of an effective/global batch, a
    microbatch loop or a keyword that configures A (either may bind A by its use:
    :attr:`FileModel.accumulation_aliases`), or a
    product of three factors or more with a name of A among them beside a replica or GPU count
    in the code (``m * A * D`` is an effective batch whatever it is called:
    :func:`_effective_batch_shape`)."""
    if not _reads_device_or_world_count(facts):
        return False  # the value the rule flags reads one of them
    if facts.binds(_counts_a_or_batch) or runs_loop(facts) or facts.mentions(fw.ACCUMULATION_KEYWORDS):
        return True
    counts = facts.calls(fw.pytorch.WORLD_SIZE_CALLS | fw.pytorch.DEVICE_COUNT_CALLS) or any(
        conventions.REPLICA_COUNT_NAME.match(name) or conventions.DEVICE_COUNT_NAME.match(name)
        for name in facts.mentioned)
    return counts and any(conventions.ACCUMULATION_NAME.search(name) for name in facts.multiplied)


def _reads_device_or_world_count(facts: SourceFacts) -> bool:
    """Whether the module reads a GPU count or the whole world size as
    ``DataParallel.counts_devices`` / ``counts_whole_world`` do: a count call, a GPU-count name
    or an environment variable of either (in a string)."""
    return (facts.calls(fw.pytorch.DEVICE_COUNT_CALLS | fw.pytorch.WORLD_SIZE_CALLS)
            or any(conventions.DEVICE_COUNT_NAME.match(name) for name in facts.mentioned)
            or any(key.encode() in facts.data for key in conventions.DEVICE_COUNT_ENV | fw.pytorch.WORLD_SIZE_ENV))


def _may_divide_by_replicas(facts: SourceFacts) -> bool:
    """ACC405's test outside loops: the module calls a reduction that sums over the replicas
    (``parallel.summed_over_replicas``) or reads a replica count (``counts_replicas``)."""
    return (facts.calls(fw.pytorch.IN_PLACE_SUM | fw.GATHERS | fw.RETURNED_REDUCTIONS | fw.pytorch.WORLD_SIZE_CALLS)
            or any(conventions.REPLICA_COUNT_NAME.match(name) for name in facts.mentioned)
            or b"WORLD_SIZE" in facts.data)


def _counts_a_or_batch(name: str) -> bool:
    tail = last_segment(name)
    return bool(conventions.ACCUMULATION_NAME.search(tail) or conventions.GLOBAL_BATCH_NAME.match(tail))


class GlobalDenominatorWithAveraging(Rule):
    """ACC405: a loss divided by a count summed over the replicas (or by the world size) while
    DDP/FSDP already averages gradients over them: gradients are D times too small.

    Silent when the loss (or the gradients, ``scale_grads(model, world_size / n)``) are
    multiplied by a replica count, when the divisor itself contains one, when the wrapper's
    reduction is changed (comm hook, divide factor), and when gradients are reduced by hand."""

    code = "ACC405"
    #: a loop, or a backward and a divisor the ledger can read as summed over the replicas or
    #: as the world size: a sum-reduction or gather called in the module, a replica-count name,
    #: a world-size call or the ``WORLD_SIZE`` variable (the averaging wrapper may be built in
    #: another module: ``DataParallel.averaging_wrapper`` follows helpers)
    gate = RuleGate(facts=lambda facts: runs_loop(facts) or (
        facts.calls(BACKWARD_CALLS) and _may_divide_by_replicas(facts)))

    def check(self, model: FileModel) -> Iterator[Hit]:
        if not _replicas_average(model):
            return
        reported: set[int] = set()
        for event in model.all_events():
            if event.kind is not EventKind.BACKWARD or event.loss is None or self._compensated(model, event):
                continue
            book = ledger(model, None, event)
            for entry in book.of(Factor.DIVIDE_GLOBAL_COUNT):
                if id(entry.node) not in reported:
                    reported.add(id(entry.node))
                    yield Hit(
                        entry.node,
                        "the loss is divided by a count summed over all D replicas, and DDP/FSDP then averages "
                        "the gradients over the replicas again: gradients (and the effective learning rate) are "
                        "D times too small",
                        "`loss * world_size / global_count`, or divide by the local count instead",
                    )
            for entry in book.of(Factor.DIVIDE_WORLD):
                if id(entry.node) not in reported:
                    reported.add(id(entry.node))
                    yield Hit(
                        entry.node,
                        "the loss is divided by the world size, and DDP/FSDP already averages the gradients over "
                        "the D replicas: gradients (and the effective learning rate) are D times too small",
                        "remove the division by the world size: DDP's all-reduce already takes the mean",
                    )
        yield from self._gradient_side(model, reported)

    def _gradient_side(self, model: FileModel, reported: set[int]) -> Iterator[Hit]:
        """The ledger's gradient-side rescales by a count summed over the replicas
        (``torch._foreach_div_(grads, tokens)`` after ``dist.all_reduce(tokens)``)."""
        parallel = data_parallel(model)
        for group in model.loops:
            if group.accumulates is not True:
                continue
            backwards = [e for e in group.of_kind(EventKind.BACKWARD) if e.loss is not None]
            if not backwards or any(self._compensated(model, e) for e in backwards):
                continue
            for entry in gradient_rescales(model, group):
                divisor, node = entry.divisor, entry.report or entry.node
                if divisor is None or id(node) in reported or parallel.counts_replicas(divisor):
                    continue
                site = entry.source.site  # type: ignore[union-attr]
                if not any(parallel.summed_over_replicas(name, site.scope, site.order, site.inline)
                           for name in names_feeding(divisor)):
                    continue
                reported.add(id(node))
                yield Hit(
                    node,
                    "the accumulated gradients are divided by a count summed over all D replicas, and DDP/FSDP "
                    "already averages them over the replicas: gradients (and the effective learning rate) are "
                    "D times too small",
                    "multiply the factor by the world size (`world_size / global_count`), or divide by the local "
                    "count instead",
                )

    @staticmethod
    def _compensated(model: FileModel, event: Event) -> bool:
        """Whether a replica count multiplies the loss's value history or rescales the gradients
        in the backward's function."""
        parallel = data_parallel(model)
        for value, operator, _ in value_history(event.loss, event.site):  # type: ignore[arg-type]
            if operator is None and any(parallel.is_replica_count(n) for n in names_feeding(value)):
                return True
            if isinstance(operator, cst.MultiplyAssign) and parallel.counts_replicas(value):
                return True
        return _gradients_rescaled_by_replicas(model, event)


def _gradients_rescaled_by_replicas(model: FileModel, event: Event) -> bool:
    """Whether the function of a backward ``event`` rescales the gradients by a replica count
    (``scale_grads(model, world_size / n)``, ``p.grad *= world_size``)."""
    parallel = data_parallel(model)
    for site in event.site.scope.sites:
        call = site.call
        if call is not None and (method_name(call) or last_segment(dotted(call.func))) in fw.GRAD_SCALING_CALLS:
            if any(parallel.counts_replicas(arg.value) for arg in call.args):
                return True
        if (site.augmented is not None and site.value is not None
                and any(t and ".grad" in t for t in site.targets) and parallel.counts_replicas(site.value)):
            return True
    return False


def _reduces_gradients(call: cst.Call) -> bool:
    """Whether a collective acts on gradients (``dist.all_reduce(p.grad)``, ``all_reduce_coalesced(grads)``)."""
    return any("grad" in (dotted(arg.value) or "") for arg in call.args)


class DpRescaleOnLocalMean(Rule):
    """ACC106: a loss that is a mean over this replica's microbatch (a torch loss left at its
    ``"mean"`` reduction, ``x.mean()``) multiplied by the data-parallel size while DDP/FSDP
    averages gradients over the replicas: the update is D times the global mean.

    Reads the loss's multiplicative chain (:mod:`accumlint.checks.shared.loss_chain`) and stays silent
    where it is opaque (a project's own loss, a sum of terms, a factor of unknown meaning), where
    it divides by anything but A (a global count: ACC405's correct form), where the ledger shows
    a count summed over the replicas or a gradient-side rescale, and where the module's wrapper
    sums instead of averaging (a comm hook, a divide factor, gradients reduced by hand)."""

    code = "ACC106"
    #: the same files ACC405 reads: a replica count is a name, a world-size call or variable
    gate = GlobalDenominatorWithAveraging.gate

    def check(self, model: FileModel) -> Iterator[Hit]:
        if not _replicas_average(model):
            return
        parallel = data_parallel(model)
        is_scalar = partial(_replica_count_or_a, model)
        reported: set[int] = set()
        for event in model.all_events():
            if event.kind is not EventKind.BACKWARD or event.loss is None:
                continue
            chain = loss_chain(model, event.loss, event.site, is_scalar)
            factors = [node for node, factor in chain.products if parallel.counts_replicas(factor)]
            if (not factors or not chain.means or chain.opaque
                    or not all(_divides_by_a(model, divisor) for _, divisor, _ in chain.divisions)):
                continue
            book = ledger(model, None, event)
            if book.has(Factor.DIVIDE_GLOBAL_COUNT, Factor.DIVIDE_WORLD, Factor.GRAD_RESCALE) \
                    or _gradients_rescaled_by_replicas(model, event):
                continue
            for node in factors:
                if id(node) not in reported:
                    reported.add(id(node))
                    yield Hit(
                        node,
                        "the loss is a mean over this replica's microbatch, and it is multiplied by the "
                        "data-parallel size while DDP/FSDP averages the gradients over the replicas: the update "
                        "is D times the mean over the effective batch (`* world_size` is right only on a sum "
                        "divided by a global, all-reduced count)",
                    )


def _replica_count_or_a(model: FileModel, expression: cst.BaseExpression) -> bool:
    """A name or call that is a replica count or A (a scalar of a loss chain)."""
    return ((dotted(expression.func if isinstance(expression, cst.Call) else expression) is not None
             and data_parallel(model).counts_replicas(expression)) or model.is_accumulation_name(expression))


def _divides_by_a(model: FileModel, divisor: cst.BaseExpression) -> bool:
    """A divisor that is A or a constant (a fixed scale, no count of examples or tokens)."""
    return constant(model, divisor) or model.is_accumulation_name(divisor)


def _replicas_average(model: FileModel) -> bool:
    """Whether the replicas' gradients are averaged for the loop (an averaging wrapper: DDP,
    FSDP, a prepared model) and not reduced by hand in the module (a reduction of its own decides
    the denominator)."""
    if not data_parallel(model).averaging_wrapper:
        return False
    module_sites = [site for scope in model.scopes for site in scope.sites]
    return not reduces_by_hand([s for s in module_sites if s.call is not None and _reduces_gradients(s.call)])
