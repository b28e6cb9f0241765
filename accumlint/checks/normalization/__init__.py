"""Loss normalization: divide by A once, and only where no framework already does (P4).

The family's own analyses live beside the rules: :mod:`.loss_terms` (a backpropagated loss's
summands and their divisors) and :mod:`.evaluation` (where a validation value is computed and
reported).
"""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from accumlint import frameworks as fw
from accumlint.checks.base import Hit, Rule
from accumlint.checks.gate import (
    A_OR_GLOBAL_BATCH_BYTES,
    BACKWARD,
    LOOP,
    RuleGate,
    defines_lightning_hook,
    runs_loop,
)
from accumlint.checks.normalization.evaluation import evaluation_function, reported_values
from accumlint.checks.normalization.loss_terms import LossTerm, carries_gradient, loss_terms
from accumlint.checks.shared import losses
from accumlint.checks.shared.ledger import Factor, Ledger, divisions_in_series, is_token_count, ledger
from accumlint.checks.shared.loss_chain import loss_chain
from accumlint.checks.shared.losses import handed_a_denominator
from accumlint.frameworks.transformers import COMPUTE_LOSS_FUNC
from accumlint.model import Cadence, EventKind, FileModel, LoopStyle
from accumlint.model.dataflow import loss_divisions
from accumlint.model.events import BACKWARD_CALLS, MANUAL_BACKWARD, Event
from accumlint.model.groups import Group
from accumlint.model.names import code_of, dotted, last_segment
from accumlint.model.owned_loops import hf_loss_funcs_ignoring_count


def _microbatch_backwards(model: FileModel) -> Iterator[tuple[Group, Event, Ledger]]:
    """Each backward an accumulating group runs once per microbatch in its own loop, with its ledger."""
    for group in model.loops:
        if group.accumulates is not True:
            continue
        for event in group.of_kind(EventKind.BACKWARD):
            if group.in_loop(event) and group.cadence(event) is Cadence.MICROBATCH:
                yield group, event, ledger(model, group, event)


class DoubleNormalization(Rule):
    """ACC101: a manual division by A on a loss whose backward API already divides by A."""

    code = "ACC101"
    #: a loop; a backward whose API divides by A where the code names A (a manual division by it
    #: is what the rule flags; a DeepSpeed config may name it in a string); or a Lightning
    #: ``training_step`` whose returned loss Lightning divides
    gate = RuleGate(markers=(*LOOP.markers, *(hook.encode() for hook in sorted(fw.lightning.MICROBATCH_HOOKS))),
                facts=lambda facts: runs_loop(facts) or defines_lightning_hook(facts) or (
                    facts.calls(BACKWARD_CALLS) and facts.in_bytes(A_OR_GLOBAL_BATCH_BYTES)))

    def check(self, model: FileModel) -> Iterator[Hit]:
        reported: set[int] = set()
        for event in model.all_events():
            if event.kind is not EventKind.BACKWARD:
                continue
            for node, framework in self._divisions(model, event):
                if id(node) not in reported:
                    reported.add(id(node))
                    yield Hit(
                        node,
                        f"the loss is divided by the accumulation steps here and {framework} divides it by A "
                        "again in backward: gradients (and the effective learning rate) are A times too small",
                        f"{framework} already divides by A: remove the manual division",
                    )
        yield from self._lightning(model, reported)
        yield from self._token_mean_then_gradient_division(model, reported)
        yield from self._a_twice_by_hand(model, reported)

    @staticmethod
    def _a_twice_by_hand(model: FileModel, reported: set[int]) -> Iterator[Hit]:
        """A applied twice without a framework: the loss divided by A twice in series
        (``loss = loss / A`` in a helper and ``(loss / A).backward()``), or divided by A (by hand
        or by the backward API) and the group's gradients divided by A again once per group."""
        for _group, event, book in _microbatch_backwards(model):
            if book.has(Factor.FRAMEWORK_A):
                repeated = {id(node) for entry in book.of(Factor.FRAMEWORK_A) for node in entry.repeats}
                if any(id(entry.node) in repeated for entry in book.of(Factor.DIVIDE_A)):
                    continue  # the framework's repeat: reported above
            series = divisions_in_series(model, event, model.is_accumulation_name)
            if len(series) >= 2 and id(series[0]) not in reported:
                reported.add(id(series[0]))
                yield Hit(
                    series[0],
                    "the loss is divided by the accumulation steps here and once more on its way to backward: "
                    "each microbatch weighs 1/A² and the update applies 1/A of the group's mean gradient "
                    "(the effective learning rate is A times too small)",
                )
                continue
            if not (series or book.has(Factor.FRAMEWORK_A)):
                continue
            by = "the loss's division" if series else f"{book.of(Factor.FRAMEWORK_A)[0].evidence}'s backward"
            for entry in book.rescales_once_per_group():
                node = entry.report or entry.node
                if id(node) in reported or not model.is_accumulation_name(entry.divisor):
                    continue
                reported.add(id(node))
                yield Hit(
                    node,
                    f"the group's gradients are divided by the accumulation steps here after {by} already "
                    "divided each microbatch by A: the update applies 1/A of the group's mean gradient "
                    "(the effective learning rate is A times too small)",
                    "divide either the loss before backward or the gradients before the update, not both",
                )

    @staticmethod
    def _token_mean_then_gradient_division(model: FileModel, reported: set[int]) -> Iterator[Hit]:
        """A per-microbatch token mean backpropagated unweighted (no product, no division by A),
        then the group's accumulated gradients divided by the group's token count: the ledger
        holds two token denominators."""
        for group, _event, book in _microbatch_backwards(model):
            means = book.of(Factor.TOKEN_MEAN)
            if not means or book.of(Factor.MULTIPLY) or book.of(Factor.DIVIDE_A):
                continue
            for entry in book.of(Factor.GRAD_RESCALE):
                node = entry.report or entry.node
                if (id(node) in reported or entry.cadence is not Cadence.UPDATE
                        or not is_token_count(model, group, entry.divisor)):
                    continue
                reported.add(id(node))
                count = dotted(entry.divisor) or "the token count"
                yield Hit(
                    node,
                    f"the backpropagated loss is already a mean over each microbatch's tokens "
                    f"({means[0].evidence}), and the group's gradients are divided by its token count "
                    f"`{count}` again: gradients are 1/(tokens per microbatch) of the token mean",
                    "backpropagate the summed token loss (`reduction=\"sum\"`) and divide once by the "
                    "group's token count, or keep the mean and divide by A instead of the token count",
                )

    @staticmethod
    def _divisions(model: FileModel, event) -> list[tuple[cst.CSTNode, str]]:
        """The manual divisions by A the ledger says the backward API repeats."""
        return [(node, entry.evidence) for entry in ledger(model, None, event).of(Factor.FRAMEWORK_A)
                for node in entry.repeats]

    def _lightning(self, model: FileModel, reported: set[int]) -> Iterator[Hit]:
        for scope in model.scopes:
            node = scope.node
            if (not isinstance(node, cst.FunctionDef) or node.name.value not in fw.lightning.MICROBATCH_HOOKS
                    or scope.class_def is None):
                continue
            if not model.frameworks.lightning_divides_returned_loss(scope.class_def):
                continue
            for site in scope.sites:
                if not site.is_return or site.in_helper or site.value is None:
                    continue
                value = site.value
                if isinstance(value, cst.Dict):  # return {"loss": loss / A, ...}
                    value = next((e.value for e in value.elements if isinstance(e, cst.DictElement)
                                  and isinstance(e.key, cst.SimpleString) and e.key.evaluated_value == "loss"), None)
                for division in loss_divisions(value, site, model.is_accumulation_name):
                    if id(division) not in reported:
                        reported.add(id(division))
                        yield Hit(
                            division,
                            "Lightning's automatic optimization already divides the loss returned by "
                            "`training_step` by `accumulate_grad_batches`; dividing here too makes gradients "
                            "A times too small",
                            "return the undivided loss",
                        )



class MeanOfMeans(Rule):
    """ACC102: a per-microbatch token mean divided by A: the update averages microbatch means,
    so tokens in short microbatches weigh more than tokens in long ones."""

    code = "ACC102"

    def check(self, model: FileModel) -> Iterator[Hit]:
        reported: set[int] = set()
        for group in model.loops:
            if group.accumulates is not True:
                continue
            for event in group.of_kind(EventKind.BACKWARD):
                book = ledger(model, group, event)
                means = book.of(Factor.TOKEN_MEAN)
                if not means:
                    continue
                mean = means[0]
                by_framework = [e for e in book.of(Factor.FRAMEWORK_A) if not e.repeats]
                if by_framework and not book.of(Factor.DIVIDE_A) and id(event.node) not in reported:
                    reported.add(id(event.node))
                    framework = by_framework[0].evidence
                    yield Hit(
                        event.node,
                        f"the loss is a mean over this microbatch's supervised tokens ({mean.evidence}) and "
                        f"{framework} divides it by A in backward: every microbatch weighs 1/A whatever its token "
                        "count, so the update is a mean of microbatch means, not the group's token mean",
                        "the framework divides by A too: multiply that count by A to undo it",
                    )
                for node in (entry.node for entry in book.of(Factor.DIVIDE_A)):
                    if id(node) in reported:
                        continue
                    reported.add(id(node))
                    yield Hit(
                        node,
                        f"the loss is a mean over this microbatch's supervised tokens ({mean.evidence}) and is "
                        "then divided by A: every microbatch weighs 1/A whatever its token count, so the update "
                        "is a mean of microbatch means, not the group's token mean",
                    )


class MissingNormalization(Rule):
    """ACC103 (off by default): a plain-torch accumulation loop whose loss is never divided
    (nor its gradients scaled): each update applies the sum of A microbatch gradients. A token
    sum returned by the model's own ``forward`` (``reduction="sum"``) is the sum convention,
    not a missing division."""

    code = "ACC103"

    def check(self, model: FileModel) -> Iterator[Hit]:
        for group in model.loops:
            if group.accumulates is not True or group.style not in (LoopStyle.GATED, LoopStyle.MICRO_LOOP):
                continue
            if losses.scales_gradients(group.region_sites) or losses.may_rescale_gradients(model, group):
                continue
            if any(group.cadence(r) is Cadence.MICROBATCH for r in group.of_kind(EventKind.RESET)):
                continue  # reset every microbatch: nothing is summed (ACC001's matter)
            late = {id(event) for _, event in losses.divisions_after_backward(model, group)}  # ACC104's matter
            for event in group.of_kind(EventKind.BACKWARD):
                if not group.in_loop(event) or group.cadence(event) is not Cadence.MICROBATCH:
                    continue
                if event.site.in_helper and not losses.loss_history_in_view(group, event):
                    continue  # a backward helper given the caller's loss: its history is the caller's to show
                contract = fw.backward_contract(event.role.role, event.method)
                if contract is not None and contract.normalizes is not fw.Normalizes.NEVER:
                    continue
                if event.method != "backward" or id(event) in late or not losses.never_scaled(event):
                    continue
                if model.on_trainer_backend_path(event):
                    continue  # the HF Trainer's own GradScaler path, copied with its training_step
                book = ledger(model, group, event)
                if book.normalized() or book.has(Factor.TOKEN_SUM, Factor.MULTIPLY, Factor.GRAD_RESCALE):
                    continue  # a denominator (or the sum convention, or a weight) another rule judges
                if model.divided_in_the_runs(group, event):
                    continue  # a division the simulated runs made where the reading does not follow
                if handed_a_denominator(event):
                    continue  # `loss_fn(..., total_effective_tokens_in_batch=n)`: it may divide by the group's count
                invariant = model.frameworks.scale_invariant_optimizers(group)
                by_rate = model.frameworks.learning_rate_divided_by_a(group)
                if (invariant is not None or by_rate is not None) and not group.of_kind(EventKind.CLIP):
                    continue  # Adam and its kin take the same step from the sum; a rate divided by A makes it the mean
                effect = ", which silently multiplies the effective learning rate by A"
                if by_rate is not None:
                    effect = (f": the learning rate is divided by A (`{code_of(by_rate)}`), so the update is the "
                              "group's mean gradient, but the gradient clip sees A times the mean gradient and "
                              "clips as if its threshold were A times lower")
                elif invariant is not None:
                    effect = (f": `{last_segment(invariant[0])}` takes the same step from the sum as from the mean, "
                              "but the gradient clip sees A times the mean gradient and clips as if its threshold "
                              "were A times lower")
                yield Hit(
                    event.node,
                    f"the loss{book.token_mean_scale()} reaches backward undivided in a loop that accumulates A "
                    f"microbatches: each update applies the sum of A gradients, A times the mean{effect}",
                )


class NormalizationAfterBackward(Rule):
    """ACC104: a loss divided by A after its backward ran: only the logged value changes."""

    code = "ACC104"

    def check(self, model: FileModel) -> Iterator[Hit]:
        for group in model.loops:
            if group.accumulates is False:
                continue
            for node, event in losses.divisions_after_backward(model, group):
                book = ledger(model, group, event)
                if book.normalized():
                    continue  # the backward saw a denominator (or the gradients get one): this one is for the log
                contract = fw.backward_contract(event.role.role, event.method)
                if contract is not None and contract.normalizes is not fw.Normalizes.NEVER:
                    continue  # the backward API may have divided already (Accelerate, DeepSpeed)
                yield Hit(
                    node,
                    "this division comes after the loss's backward already ran, so it changes only the "
                    f"value you log: the gradients are the sum of the undivided microbatch losses"
                    f"{book.token_mean_scale()}, A times too large",
                )


class FrameworkExpectsNormalization(Rule):
    """ACC105: an API that leaves normalization to the user, used without it: Lightning manual
    optimization under accumulation, an HF ``compute_loss`` override that ignores
    ``num_items_in_batch``."""

    code = "ACC105"
    #: a ``manual_backward`` call, a ``compute_loss`` defined where an HF Trainer class is named
    #: (the base of the class that overrides it), or an HF Trainer built with ``compute_loss_func=``
    gate = RuleGate(markers=(MANUAL_BACKWARD.encode(), fw.transformers.COMPUTE_LOSS.encode(),
                         *(name.encode() for name in sorted(fw.transformers.TRAINER_CLASS_NAMES))),
                facts=lambda facts: facts.calls((MANUAL_BACKWARD,)) or (
                    facts.defines((fw.transformers.COMPUTE_LOSS,))
                    and facts.mentions(fw.transformers.TRAINER_CLASS_NAMES))
                or (facts.calls(fw.transformers.TRAINER_CLASS_NAMES) and facts.mentions((COMPUTE_LOSS_FUNC,))))

    def check(self, model: FileModel) -> Iterator[Hit]:
        for group in model.loops:
            if group.accumulates is not True:
                continue
            for event in group.of_kind(EventKind.BACKWARD):
                if event.method != MANUAL_BACKWARD or event.site.in_helper or not losses.never_scaled(event):
                    continue
                book = ledger(model, group, event)
                if book.normalized() or book.has(Factor.TOKEN_SUM, Factor.GRAD_RESCALE):
                    continue  # the gradients get their denominator after the backward, or the sum is the convention
                yield Hit(
                    event.node,
                    "under manual optimization Lightning does not divide the loss by the accumulation "
                    f"steps: the A backwards of a group{book.token_mean_scale()} add up to A times the mean "
                    "gradient",
                    "divide the loss by the number of microbatches per update before `self.manual_backward`",
                )
        for node, name in hf_loss_funcs_ignoring_count(model):
            yield Hit(
                node,
                f"`{name}` is passed as `compute_loss_func`: the Trainer takes its loss as normalized for the whole "
                "group and does not divide it by A, but it ignores `num_items_in_batch`, so with "
                "`gradient_accumulation_steps` > 1 gradients are A times too large",
                "in the loss function: divide a summed loss by `num_items_in_batch` (the group's item count), or the "
                "loss by the accumulation steps",
            )
        for function in losses.hf_overrides_ignoring_count(model):
            yield Hit(
                function,
                "this `compute_loss` receives `num_items_in_batch` and ignores it: when the model accepts "
                "loss kwargs (most HF language models) the Trainer takes the returned loss as already "
                "normalized for the group and does not divide by A, so gradients are A times too large",
                "divide a summed loss by `num_items_in_batch`, or set `self.model_accepts_loss_kwargs = False` "
                "(transformers 5.x: `loss_is_scaled_for_ga = False`) so the Trainer divides by A",
            )


class EvalLossScaledForAccumulation(Rule):
    """ACC108: a value an evaluation reports (returned, accumulated, logged) whose multiplicative
    chain divides by A, computed in the evaluation (:mod:`accumlint.checks.normalization.evaluation`): the
    training loss's 1/A reused for a validation or test loss, which is then A times too small.

    The division must be the training loss's own (a helper or method whose division by A also
    feeds a backward), or, written in the evaluation itself, divide a loss the code shows to be
    a mean (a torch loss, ``x.mean()``): an aggregate of training losses divided by A
    (``sum(losses) / A``, the group's mean loss) is no validation loss. Silent where the chain
    also multiplies by A, where the division by A runs outside the evaluation (the training
    loss, logged under ``no_grad``), and in a module with no backward."""

    code = "ACC108"
    gate = BACKWARD

    def check(self, model: FileModel) -> Iterator[Hit]:
        backwards = [e for e in model.all_events() if e.kind is EventKind.BACKWARD]
        if not backwards:
            return
        training = {id(node) for event in backwards if event.loss is not None
                    for node, divisor, _ in loss_chain(model, event.loss, event.site,
                                                       model.is_accumulation_name).divisions
                    if model.is_accumulation_name(divisor)}
        reported: set[int] = set()
        for scope in model.scopes:
            whole = evaluation_function(scope)
            for site in scope.sites:
                if not (whole or site.under_no_grad):
                    continue
                for value in reported_values(site):
                    chain = loss_chain(model, value, site, model.is_accumulation_name)
                    if any(model.is_accumulation_name(factor) for _, factor in chain.products):
                        continue  # multiplied back by A
                    for node, divisor, at in chain.divisions:
                        if id(node) in reported or not model.is_accumulation_name(divisor):
                            continue
                        if not (whole or at.under_no_grad):
                            continue  # divided for the training backward, only read here
                        if id(node) not in training and (chain.opaque or not chain.means):
                            continue  # no training 1/A reused, and no loss the code shows
                        reported.add(id(node))
                        text = model.module.code_for_node(divisor)
                        yield Hit(
                            site.node,
                            f"this validation or test loss goes through the training loss's division by A "
                            f"(`/ {text}`): the reported value is A times too small, and changes whenever A does",
                        )
class AuxiliaryLossNotNormalized(Rule):
    """ACC107: the main loss divided by the group's denominator (A, the group's token count)
    while another summand of the same backpropagated loss (an auxiliary loss, a regulariser)
    is added per microbatch undivided. Main and auxiliary are told apart by provenance: which
    summand carries the division, never by names."""

    code = "ACC107"

    def check(self, model: FileModel) -> Iterator[Hit]:
        reported: set[int] = set()
        for group, event, book in _microbatch_backwards(model):
            if book.has(Factor.FRAMEWORK_A, Factor.GRAD_RESCALE, Factor.DIVIDE_GLOBAL_COUNT, Factor.DIVIDE_WORLD):
                continue  # the framework divides the whole loss, or the gradients get a denominator later
            terms = loss_terms(model, event)
            if terms is None or len(terms) < 2:
                continue

            def denominator(divisor: cst.BaseExpression, group=group) -> bool:
                return model.is_accumulation_name(divisor) or is_token_count(model, group, divisor)

            main: list[tuple[LossTerm, cst.BaseExpression]] = []
            bare: list[LossTerm] = []
            for term in terms:
                divisor = _group_divisor(term, denominator)
                if divisor is not None:
                    main.append((term, divisor))
                elif not _divided(term) and carries_gradient(term):
                    bare.append(term)
            if not main:
                continue
            main_term, divisor = main[0]
            shown = main_term.node
            if isinstance(shown, cst.BinaryOperation) and isinstance(shown.operator, cst.Divide):
                shown = shown.left  # `ce / A`: the loss, without the division the message names
            for term in bare:
                inline = term.site.inline
                foreign = inline is not None and any(link.foreign is not None for link in inline.chain())
                node = term.site.report if foreign else term.node  # another module's code: the call here
                if id(node) in reported:
                    continue
                reported.add(id(node))
                yield Hit(
                    node,
                    f"the main loss `{code_of(shown)}` is divided by `{code_of(divisor)}` for the group, but "
                    f"`{code_of(term.node)}` is added to the same backpropagated loss on every microbatch without "
                    "that division: the group's update sums A of them, so this term weighs A times its "
                    "coefficient relative to the main loss",
                    f"divide this term by `{code_of(divisor)}` too, or the whole sum once: "
                    f"`(main + aux) / {code_of(divisor)}`",
                )


def _group_divisor(term: LossTerm, denominator) -> cst.BaseExpression | None:
    """The group denominator (a divisor ``denominator`` accepts) a summand is divided by, on
    the sum around it or inside its own value history; None when it has none."""
    for divisor in term.divisors:
        if denominator(divisor):
            return divisor
    for node in loss_divisions(term.node, term.site, denominator):
        if isinstance(node, cst.BinaryOperation):
            return _reciprocal_divisor(node)
        if isinstance(node, cst.AugAssign):
            return node.value
    return None


def _reciprocal_divisor(node: cst.BinaryOperation) -> cst.BaseExpression:
    """The divisor of ``x / d`` or of ``x * (1 / d)``."""
    if isinstance(node.operator, cst.Divide):
        return node.right
    side = node.right if isinstance(node.right, cst.BinaryOperation) else node.left
    return side.right  # type: ignore[attr-defined]


def _divided(term: LossTerm) -> bool:
    """Whether a summand goes through any division by something other than a number literal:
    its factor may be the group's denominator under another name, so its weight is unknown."""
    if any(not isinstance(d, (cst.Integer, cst.Float)) for d in term.divisors):
        return True
    return bool(loss_divisions(term.node, term.site, lambda d: not isinstance(d, (cst.Integer, cst.Float))))
