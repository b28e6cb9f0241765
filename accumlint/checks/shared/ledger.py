"""The normalization ledger (P4): every factor the code applies between a backward's
per-element loss and the gradient the optimizer update reads, in order, with how often each
runs (per microbatch or once per group).

Loss side (from the loss's value history): the loss's reduction when it is a mean over a
microbatch's own supervised tokens (``cross_entropy(ignore_index=...)`` over token positions,
a hand-written ``sum(x * mask) / mask.sum()``, an HF model's ``outputs.loss`` with a
label-masking collator) or a token sum the model's own ``forward`` returns
(:mod:`accumlint.checks.shared.forward_sums`), divisions by A, any multiplication. Gradient side: in-place rescales
of the accumulated ``.grad`` (``p.grad.div_(n)``, ``mul_(1 / n)``, ``/=``, ``_foreach_div_``,
``scale_grads``, ``multiply_grads``) with their divisor and cadence. Around them, the
backward API's own division by A (the framework rows: Accelerate, DeepSpeed, mmengine) and, under a
wrapper that averages over the replicas, divisions by a count summed over them or by the
world size. The rules ACC101 to ACC105, ACC307 and ACC405 read it, so they count the same
denominators: a rule is silent where the ledger shows a denominator another rule owns, and
no two rules report the same doubled factor.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum
from functools import partial
from typing import TYPE_CHECKING

import libcst as cst

from accumlint import frameworks as fw
from accumlint.checks.shared import losses
from accumlint.checks.shared.forward_sums import forward_returns_sum
from accumlint.checks.shared.parallel import DataParallel, data_parallel
from accumlint.model.dataflow import arithmetic, names_feeding, value_history
from accumlint.model.grad_ops import op_cadence, report_node
from accumlint.model.groups import Group
from accumlint.model.kinds import Cadence, EventKind, Evidence, Role
from accumlint.model.names import dotted, int_value, keyword, last_segment, method_name, walk

if TYPE_CHECKING:
    from accumlint.model import FileModel
    from accumlint.model.events import Event
    from accumlint.model.scopes import Site


class Factor(str, Enum):
    """One kind of ledger entry."""

    TOKEN_MEAN = "mean over the microbatch's supervised tokens"
    TOKEN_SUM = "sum over the microbatch's tokens, returned by the model's forward"
    DIVIDE_A = "divided by the accumulation steps A"
    FRAMEWORK_A = "divided by A by the backward API (Accelerate, DeepSpeed)"
    DIVIDE_GLOBAL_COUNT = "divided by a count summed over the data-parallel replicas"
    DIVIDE_WORLD = "divided by the data-parallel world size"
    MULTIPLY = "multiplied by a factor"
    GRAD_RESCALE = "accumulated gradients rescaled in place"


@dataclass(frozen=True)
class Entry:
    """A factor applied to one backward's gradient.

    ``node``: where the code applies it (the division, the loss call, the rescale call);
    ``cadence``: how often it runs in the group; ``divisor``: for a gradient-side rescale, the
    expression the gradients are divided by (``n`` for ``div_(n)``, ``mul_(1 / n)``), else None;
    ``evidence``: why the entry is what it is, for messages; ``report``: where a finding about a
    gradient-side entry goes (the helper call in the loop, or the rescale itself); ``source``:
    the rescale's event; ``repeats``: for the framework's own division, the manual divisions by
    the same A that it repeats."""

    factor: Factor
    node: cst.CSTNode
    cadence: Cadence
    divisor: cst.BaseExpression | None = None
    evidence: str = ""
    report: cst.CSTNode | None = None
    source: Event | None = None
    repeats: tuple[cst.CSTNode, ...] = ()


@dataclass(frozen=True)
class Ledger:
    """The factors of one backward ``event`` of ``group`` (loss side, then gradient side)."""

    event: Event
    entries: tuple[Entry, ...]

    def of(self, factor: Factor) -> list[Entry]:
        """The entries of one kind, in order."""
        return [entry for entry in self.entries if entry.factor is factor]

    def has(self, *factors: Factor) -> bool:
        """Whether any entry is of one of ``factors``."""
        return any(entry.factor in factors for entry in self.entries)

    def rescales_once_per_group(self) -> list[Entry]:
        """The gradient-side rescales that run once per group, after its last backward (the
        recommended place for a denominator)."""
        return [entry for entry in self.of(Factor.GRAD_RESCALE) if entry.cadence is Cadence.UPDATE]

    def normalized(self) -> bool:
        """Whether some entry divides the group's summed gradient by a denominator: A (by hand
        or by the framework), a count summed over the replicas, the world size, or a rescale of
        the accumulated gradients once per group."""
        return self.has(Factor.DIVIDE_A, Factor.FRAMEWORK_A, Factor.DIVIDE_GLOBAL_COUNT,
                        Factor.DIVIDE_WORLD) or bool(self.rescales_once_per_group())

    def token_mean_scale(self) -> str:
        """How the message names what one backward's loss is, when the ledger knows: ``" (a mean
        over its microbatch's tokens: ...)"``, else ``""``."""
        means = self.of(Factor.TOKEN_MEAN)
        return f" (a mean over its microbatch's tokens: {means[0].evidence})" if means else ""


def ledger(model: FileModel, group: Group | None, event: Event) -> Ledger:
    """Every factor between a backward's per-element loss and the applied gradient (:func:`ledger_of`);
    ``group`` None: the loss side only. Computed once per group and backward (:attr:`FileModel.memo`)."""
    books: dict[tuple[int, int], Ledger] = model.memo.setdefault(_LEDGERS, {})  # type: ignore[assignment]
    key = (id(group), id(event))
    book = books.get(key)
    if book is None:
        book = books[key] = ledger_of(model, group, event)
    return book


_LEDGERS = "shared.ledgers"


def ledger_of(model: FileModel, group: Group | None, event: Event) -> Ledger:
    """The ledger of a backward ``event`` (of ``group``; None for a backward outside the
    module's accumulation loops: no cadence, no gradient side). See the module docstring."""
    cadence = group.cadence(event) if group is not None else Cadence.UNKNOWN
    entries: list[Entry] = []
    mean = token_mean_of(model, event, group)
    if mean is not None:
        entries.append(Entry(Factor.TOKEN_MEAN, mean.call, Cadence.MICROBATCH, evidence=mean.evidence))
    elif forward_returns_sum(model.functions, event, model.reaching):
        entries.append(Entry(Factor.TOKEN_SUM, event.loss, Cadence.MICROBATCH,  # type: ignore[arg-type]
                             evidence="the model's `forward` returns a summed token loss"))
    for node in model.divisions_by(event, model.is_accumulation_name):
        entries.append(Entry(Factor.DIVIDE_A, node, cadence))
    framework = _framework_division(model, event)
    if framework is not None:
        name, is_a = framework
        repeats = tuple(model.divisions_by(event, is_a))
        entries.append(Entry(Factor.FRAMEWORK_A, event.node, cadence, evidence=name, repeats=repeats))
    parallel = data_parallel(model)
    if event.loss is not None and parallel.averaging_wrapper:
        for node in model.divisions_by(event, partial(_summed_count, parallel, event)):
            entries.append(Entry(Factor.DIVIDE_GLOBAL_COUNT, node, cadence))
        for node in model.divisions_by(event, partial(_world_size, parallel)):
            entries.append(Entry(Factor.DIVIDE_WORLD, node, cadence))
    for node in _multiplications(event):
        entries.append(Entry(Factor.MULTIPLY, node, cadence))
    if group is not None:
        entries.extend(gradient_rescales(model, group))
    return Ledger(event, tuple(entries))


def divisions_in_series(model: FileModel, event: Event, is_divisor) -> list[cst.CSTNode]:
    """The divisions by a divisor ``is_divisor`` accepts that the loss of ``event`` goes through
    one after another (``loss = loss / A`` then ``(loss / A).backward()``), outermost first.

    Follows only the loss's own multiplicative chain: the numerator of a division, both sides
    of a product, the previous value of ``loss /= d``, the ``return`` of a helper inlined at a
    call; not divisors or sums (``a / A + b / A`` is one division of the total)."""
    if event.loss is None:
        return []
    found: list[cst.CSTNode] = []
    work: list[tuple[cst.BaseExpression, Site]] = [(event.loss, event.site)]
    seen: set[int] = set()
    while work and len(seen) < _MAX_SERIES:
        expression, site = work.pop()
        for node in _spine(expression):
            if isinstance(node, cst.BinaryOperation):
                if is_divisor(node.right):
                    found.append(node)
                continue
            if isinstance(node, cst.Call):  # a helper inlined here: what its `return`s give
                for returned in site.scope.returns_of(node):
                    if id(returned) not in seen and returned.value is not None:
                        seen.add(id(returned))
                        work.append((returned.value, returned))
                continue
            definition = model.sole_reaching(dotted(node) or "", site)
            while definition is not None and id(definition) not in seen and definition.value is not None:
                seen.add(id(definition))
                if definition.augmented is None:
                    if not isinstance(definition.node, (cst.For, cst.With)):
                        work.append((definition.value, definition))
                    break
                if isinstance(definition.augmented, cst.DivideAssign) and is_divisor(definition.value):
                    found.append(definition.node)
                elif not isinstance(definition.augmented, (cst.DivideAssign, cst.MultiplyAssign)):
                    break  # `loss += other`: a sum, not one chain
                definition = model.sole_reaching(dotted(node) or "", definition)
    return found



_MAX_SERIES = 16


def _spine(expression: cst.BaseExpression) -> Iterator[cst.BaseExpression]:
    """The divisions (``BinaryOperation``), names and calls on the multiplicative chain of ``expression``."""
    if isinstance(expression, cst.BinaryOperation):
        if isinstance(expression.operator, cst.Divide):
            yield expression
            yield from _spine(expression.left)
        elif isinstance(expression.operator, cst.Multiply):
            yield from _spine(expression.left)
            yield from _spine(expression.right)
    elif isinstance(expression, cst.UnaryOperation):
        yield from _spine(expression.expression)
    elif isinstance(expression, (cst.Name, cst.Attribute)) and dotted(expression) is not None:
        yield expression
    elif isinstance(expression, cst.Call):
        yield expression


def _framework_division(model: FileModel, event: Event):
    """``(framework, is_a)`` when the backward API of ``event`` divides the loss by A itself
    (its contract in :mod:`accumlint.frameworks`, and how the module configures it);
    ``is_a`` accepts the divisors that are that A. None when it does not (or may not)."""
    contract = fw.backward_contract(event.role.role, event.method)
    ds_names = model.frameworks.deepspeed_accumulation_names
    if ds_names and event.role.role in (Role.ACCELERATOR, Role.ENGINE):
        # the divisor is DeepSpeed's own GAS: under DeepSpeed the engine divides by it
        def is_gas(divisor: cst.BaseExpression) -> bool:
            return dotted(divisor) in ds_names

        if model.divisions_by(event, is_gas):
            return "DeepSpeed", is_gas
    if contract is None or contract.normalizes is fw.Normalizes.NEVER:
        return None
    if contract.opt_out_keyword and event.site.call is not None:
        if keyword(event.site.call, contract.opt_out_keyword) is not None:
            return None  # scale_wrt_gas=... given explicitly: the caller owns the division
    if event.role.role is Role.ENGINE and (event.role.owner != fw.deepspeed.PACKAGE
                                           and not model.roles.deepspeed_in_view()):
        return None
    if event.role.role is Role.ENGINE and (model.frameworks.deepspeed_unmanaged
                                           or model.frameworks.deepspeed_accumulates is False):
        return None  # the engine's own accounting off, or configured to divide by 1
    if event.role.role is Role.ENGINE and event.role.evidence is Evidence.USE \
            and not _engine_steps_always(model, event):
        return None  # an engine known by use, stepped once per group by hand: its GAS may be 1
    if contract.normalizes is fw.Normalizes.IF_CONFIGURED:
        reader = model.frameworks
        configured = (reader.mmengine_accumulation(event.role) if event.role.role is Role.OPTIM_WRAPPER
                      else reader.accelerate_accumulation(event.role))
        if configured is None or configured is False or int_value(configured) == 1:  # type: ignore[arg-type]
            return None
        text = dotted(configured)  # type: ignore[arg-type]
        literal = int_value(configured)  # type: ignore[arg-type]

        def is_configured_a(divisor: cst.BaseExpression) -> bool:
            # the configured name, the same literal (`gradient_accumulation_steps=4` ... `loss / 4`),
            # or a name of A
            return ((text is not None and dotted(divisor) == text)
                    or (literal is not None and int_value(divisor) == literal)
                    or model.is_accumulation_name(divisor))

        return contract.framework, is_configured_a
    return contract.framework, model.is_accumulation_name


def _engine_steps_always(model: FileModel, event: Event) -> bool:
    """Whether the engine whose backward ``event`` is steps on every microbatch of the loop that
    runs ``event``: it counts the group itself (the code leaves it no other way to accumulate)."""
    target = dotted(event.target)
    return any(update.kind is EventKind.UPDATE and dotted(update.target) == target
               and group.cadence(update) is Cadence.MICROBATCH
               for group in model.loops if any(e is event for e in group.events) for update in group.events)


def _summed_count(parallel: DataParallel, event: Event, divisor: cst.BaseExpression) -> bool:
    """A divisor that holds a count summed over the replicas when the backward runs."""
    return not parallel.counts_replicas(divisor) and any(
        parallel.summed_over_replicas(name, event.site.scope, event.order) for name in names_feeding(divisor))


def _world_size(parallel: DataParallel, divisor: cst.BaseExpression) -> bool:
    """A divisor that is the world size itself (a name or call, not an expression)."""
    return dotted(divisor) is not None and parallel.counts_replicas(divisor)


def token_mean_of(model: FileModel, event: Event, group: Group | None = None) -> losses.TokenMean | None:
    """The per-microbatch token mean a backward differentiates, by any of the shapes the
    ledger knows (:mod:`accumlint.checks.shared.losses`), or None. An HF model's own loss counts only
    when ``group``'s loader is built with a label-padding collator."""
    found = losses.backward_token_mean(model, event) or losses.masked_mean_by_hand(event)
    if found is None and group is not None:
        found = losses.hf_output_token_mean(event, lambda e, s: _model_output(model, e, s),
                                            _label_padding(model, group))
    return found


def _multiplications(event: Event) -> list[cst.CSTNode]:
    """``loss * w`` / ``loss *= w`` in the value history (a weight that may undo a mean)."""
    if event.loss is None:
        return []
    found: list[cst.CSTNode] = []
    for value, operator, statement in value_history(event.loss, event.site):
        if isinstance(operator, cst.MultiplyAssign):
            found.append(statement)  # type: ignore[arg-type]
        elif operator is None:
            found.extend(node for node in arithmetic(value) if isinstance(node.operator, cst.Multiply)
                         and not _reciprocal(node))
    return found


def _reciprocal(node: cst.BinaryOperation) -> bool:
    """``x * (1 / d)``: a division written as a product (counted by the division's entry)."""
    return any(isinstance(side, cst.BinaryOperation) and isinstance(side.operator, cst.Divide)
               for side in (node.left, node.right))


def gradient_rescales(model: FileModel, group: Group) -> list[Entry]:
    """The group's in-place rescales of the accumulated gradients, with their divisor (the
    ``n`` of ``div_(n)``, ``/= n``, ``mul_(1 / n)``, ``_foreach_div_(grads, n)``,
    ``scale_grads(model, 1 / n)``; None for a factor that is no division) and cadence."""
    entries: list[Entry] = []
    for event in group.of_kind(EventKind.GRAD_RESCALE):
        entries.append(Entry(Factor.GRAD_RESCALE, event.node, op_cadence(model, group, event),
                             _rescale_divisor(event), event.method, report_node(group, event), event))
    return entries


def _rescale_divisor(event: Event) -> cst.BaseExpression | None:
    factor, divides = rescale_factor(event)
    return factor if divides else _reciprocal_of(factor)


def rescale_factor(event: Event) -> tuple[cst.BaseExpression | None, bool]:
    """The factor an in-place gradient rescale ``event`` applies, and whether it divides by it
    (``p.grad /= n``, ``div_(n)``, ``_foreach_div_(grads, n)``) rather than multiplies
    (``*= f``, ``mul_(f)``, ``scale_grads(model, f)``)."""
    site = event.site
    call = site.call
    if call is None:  # p.grad /= n, p.grad *= f
        return site.value, isinstance(site.augmented, cst.DivideAssign)
    name = method_name(call) or last_segment(dotted(call.func) or "")
    return (call.args[-1].value if call.args else None), name in ("div_", "divide_", "_foreach_div_")


def _reciprocal_of(expression: cst.BaseExpression | None) -> cst.BaseExpression | None:
    """``1 / n`` (``1.0 / n``) → ``n``."""
    if (isinstance(expression, cst.BinaryOperation) and isinstance(expression.operator, cst.Divide)
            and isinstance(expression.left, (cst.Integer, cst.Float))
            and expression.left.value.replace("_", "") in ("1", "1.", "1.0", "1.00")):
        return expression.right
    return None


def _collators_feeding(model: FileModel, group: Group) -> set[str]:
    """The label-padding collator (framework rows) of the ``DataLoader(..., collate_fn=...)``
    the group's loop iterates, when the module shows it."""
    loader = group.iterable
    name = dotted(loader) if loader is not None else None
    built = model.reaching(name, group.loop_sites[0]) if name else None
    call = built.value if built is not None else None
    if not (isinstance(call, cst.Call) and last_segment(dotted(call.func) or "") == "DataLoader"):
        return set()
    collate = keyword(call, "collate_fn")
    if isinstance(collate, (cst.Name, cst.Attribute)):
        bound = model.reaching(dotted(collate) or "", built)  # type: ignore[arg-type]
        collate = bound.value if bound is not None else None
    if not isinstance(collate, cst.Call):
        return set()
    return {last_segment(dotted(collate.func) or "")} & fw.transformers.LABEL_MASKING_COLLATORS


def _label_padding(model: FileModel, group: Group) -> set[str]:
    """Evidence that the labels the loop's model is given are padded with -100 per batch: the
    collator of its loader (:func:`_collators_feeding`), or the module's own collate code that
    writes -100 into labels (``labels.masked_fill(labels == pad, -100)``,
    ``pad_sequence(labels, padding_value=-100)``)."""
    return _collators_feeding(model, group) or losses.labels_padded_with_ignore(model)


def _model_output(model: FileModel, holder: cst.BaseExpression, site: Site) -> bool:
    """Whether ``holder`` (the ``outputs`` of ``outputs.loss``) is bound to a model's forward
    that is given the batch's labels (``model(**batch)``, ``model(..., labels=...)``)."""
    if isinstance(holder, cst.Call):  # model(**batch).loss
        return _labelled_forward(model, holder, site)
    name = dotted(holder)
    definition = model.reaching(name, site) if name else None
    if definition is None and name:  # a name of a helper inlined before the backward
        inlined = [s for s in site.scope.sites if s.in_helper and s.targets == (name,) and s.order < site.order]
        definition = inlined[-1] if inlined else None
    call = definition.value if definition is not None else None
    return isinstance(call, cst.Call) and _labelled_forward(model, call, definition)  # type: ignore[arg-type]


def _labelled_forward(model: FileModel, call: cst.Call, site: Site) -> bool:
    """A model's forward given the labels, and no ``num_items_in_batch`` (with it, transformers'
    losses sum and divide by the group's count: no per-microbatch mean)."""
    if model.roles.of(call.func, site).role not in (Role.MODEL, Role.DDP_MODEL, Role.FSDP_MODEL):
        return False
    if keyword(call, fw.transformers.COUNT_PARAMETER) is not None:
        return False
    return any(arg.star == "**" for arg in call.args) or keyword(call, "labels") is not None


def is_token_count(model: FileModel, group: Group, divisor: cst.BaseExpression | None) -> bool:
    """Whether ``divisor`` is a count of tokens accumulated over the group: a name increased in
    the loop (``n += (labels != -100).sum()``, ``n += mask.sum()``, ``n += x.numel()``, or
    ``n += k`` with ``k`` assigned one of those)."""
    name = dotted(divisor) if isinstance(divisor, (cst.Name, cst.Attribute)) else None
    if name is None:
        return False
    increments = [s for s in group.loop_sites if s.targets == (name,) and isinstance(s.augmented, cst.AddAssign)
                  and s.value is not None]
    return bool(increments) and all(any(_counts_elements(value) for value, _, _ in value_history(s.value, s))
                                    for s in increments)  # type: ignore[arg-type]


def _counts_elements(expression: cst.BaseExpression) -> bool:
    for node in walk(expression):
        if isinstance(node, cst.Call) and method_name(node) in ("sum", "numel", "count_nonzero"):
            return True
        if isinstance(node, cst.Call) and dotted(node.func) in ("torch.sum", "torch.count_nonzero"):
            return True
    return False
