"""The last group of an epoch: what happens to the microbatches after the last full group (P9)."""

from __future__ import annotations

from collections.abc import Iterator

from accumlint import frameworks as fw
from accumlint.checks.base import Hit, Rule
from accumlint.checks.gate import LOOP, RuleGate, runs_loop
from accumlint.checks.group_traces import decides, with_traces
from accumlint.checks.tail.analysis import engine_window_tail, tail_of
from accumlint.frameworks.contracts import TailTreatment
from accumlint.model import FileModel
from accumlint.model.owned_loops import lightning_short_epochs
from accumlint.spec import UNAPPLIED_TAIL, WEIGHTED_TAIL

_WHAT_HAPPENS = {
    TailTreatment.LEAKS: (
        "when the loader's length is not a multiple of A, the last r microbatches of each epoch are "
        "backpropagated but not applied: their gradients stay in `.grad` and join the next epoch's first "
        "update ({merged}), and the last epoch's tail is never applied"
    ),
    TailTreatment.NOT_APPLIED: (
        "when the loader's length is not a multiple of A, the last r microbatches are backpropagated but "
        "never applied by this loop: their gradients stay in `.grad` and, if the loop runs again, join its "
        "first update ({merged})"
    ),
    TailTreatment.WEIGHTED: (
        "the last partial group of r < A microbatches is applied, but each of its microbatches is still "
        "divided by A: that update weighs r/A of a full group"
    ),
}


class PartialFinalGroup(Rule):
    """ACC005: the user's own update gate leaves the epoch's last ``len % A`` microbatches
    unapplied (carried into the next epoch) or applies them weighted r/A.

    Only user-set boundaries are reported; a framework's documented treatment (Accelerate,
    Lightning: r/A; DeepSpeed: merged; HF Trainer: true count) is a fact for the runtime card.
    """

    code = "ACC005"
    #: a loop, or a Lightning ``Trainer(limit_train_batches=n, accumulate_grad_batches=A)``
    #: (:func:`~accumlint.model.owned_loops.lightning_short_epochs`), which needs no backward in the file
    gate = RuleGate(markers=(*LOOP.markers, b"Trainer"), facts=lambda facts: runs_loop(facts) or (
        facts.calls({"Trainer"}) and facts.mentions({fw.lightning.ACCUMULATION_KEYWORD})
        and facts.mentions({fw.lightning.LIMIT_KEYWORD})))

    @staticmethod
    def _engine_window(model: FileModel, group) -> Iterator[Hit]:
        node = engine_window_tail(model, group)
        if node is not None:
            yield Hit(
                node,
                "this trailing window of r < A microbatches is normalized as a group of its own, but the "
                "DeepSpeed engine counts micro-steps across epochs: the r microbatches are applied together "
                "with the first A - r of the next epoch, and from then on every engine group straddles two of "
                "the code's windows (each microbatch weighted by a window the engine does not apply together)",
                "drop the partial window (yield only full windows), or tell the engine the boundary with "
                "`engine.set_gradient_accumulation_boundary(...)` before each backward",
            )

    @with_traces
    def check(self, model: FileModel) -> Iterator[Hit]:
        for group in model.loops:
            yield from self._engine_window(model, group)  # the window builder's own A says it accumulates
            if group.accumulates is not True:
                continue
            tail = tail_of(model, group)
            if tail is None or tail.framework is not None or tail.report is None:
                continue
            text = _WHAT_HAPPENS.get(tail.treatment)
            if text is None:
                continue
            if tail.treatment is TailTreatment.LEAKS and decides(model, self.code, tail.report):
                continue  # what happens to the tail across epochs is read off the simulated runs
            if tail.samples:  # the gate counts samples: the tail is what is left of the pass's samples
                text = text.replace("the loader's length is not a multiple of A",
                                    "the pass's sample count is not a multiple of the group's size in samples")
            merged = ("a group of A + r microbatches, weighted (A + r)/A" if tail.divided_by_a
                      else "a group of A + r microbatches that mixes two epochs")
            weighted = tail.treatment is TailTreatment.WEIGHTED
            yield Hit(tail.report, text.format(merged=merged), WEIGHTED_TAIL if weighted else UNAPPLIED_TAIL)
        for call, batches, accumulation in lightning_short_epochs(model):
            yield Hit(
                call,
                f"`limit_train_batches={batches}` ends every epoch before a group of `accumulate_grad_batches="
                f"{accumulation}` is full: Lightning steps at the epoch's last batch with each loss still divided "
                f"by {accumulation}, so every update weighs {batches}/{accumulation} of a full group",
                "make `limit_train_batches` a multiple of `accumulate_grad_batches` (at least one full group)",
            )
