"""The rule spec: one declaration per rule, read by both engines.

Everything a rule *is* apart from its check lives here: code, name, family, the accumulation
guide's principle it protects, severity, whether a run without a selection enables it, the
one-line summary, the meaning of a finding (what it does to training) and the fix wording, and
how the runtime guard observes it (``runtime``). The linter's rule classes
(``accumlint.checks``) take their metadata from here; the registry, the rule table, the CLI's
``accumlint rule``, the report formats and the runtime guard's findings read it too. The module
imports neither LibCST nor torch, so ``import runtime_guard`` and a run answered from the cache
stay light.

Codes: ``ACC`` + three digits. The hundreds digit is the family (:data:`FAMILIES`); the rest
numbers rules within it. The families and the principles are declared in
:mod:`accumlint.spec.vocabulary` (the engines' shared words) and re-exported here. ``ACC000`` (a
file could not be checked) and ``ACC990`` (a ``noqa`` that suppresses nothing) belong to the
engine, not to a rule class.

The module is long because it is a table: one entry per rule, and after it how a finding's help is
composed from its rule's ``fix`` (:func:`help_text`).
"""

from __future__ import annotations

from dataclasses import dataclass

from accumlint.spec.findings import Severity

# the principles and families are the engines' shared vocabulary; the spec's entries refer to them
from accumlint.spec.vocabulary import FAMILIES, PRINCIPLES, Family, Principle

__all__ = [
    "BY_CODE", "DOCS_URL", "ENGINE_CODES", "FAMILIES", "HERE", "PARSE_ERROR_CODE", "PRINCIPLES", "README_URL", "RULES",
    "UNAPPLIED_TAIL", "UNUSED_NOQA_CODE", "WEIGHTED_TAIL", "Family", "Principle", "RuleSpec", "Runtime", "help_text",
    "spec_of",
]

DOCS_URL = "https://github.com/accumlint/accumlint/blob/main/rules/{code}-{name}/README.md"
README_URL = "https://github.com/accumlint/accumlint/blob/main/README.md"


#: What the runtime guard needs to see a rule (``Runtime.needs``), and what each value means.
RUNTIME_NEEDS: dict[str, str] = {
    "events": "any loop",
    "ddp": "a DDP wrapper, any D",
    "data-parallel": "D > 1",
    "ce-loss": "a softmax cross-entropy output, or the factor on a mean-reduced loss, whose weights the card "
               "reports as inferred",
    "loss-contract": "a framework contract that leaves the group normalization to the loss, and the "
                     "normalization inferred",
    "scheduler": "an LR scheduler given to the probe or found by it",
    "scheduler-owner": "a framework seen stepping the scheduler",
    "effective-batch": "the configured effective batch given to the probe",
    "weight-copy": "a copy of the probed parameters, such as a weight EMA, alive when the probe attached",
    "epoch-end": 'the probe placed at an epoch end with the loader (at="epoch_end")',
    "logged-rate": "a throughput the loop hands to runtime_guard.log() after an update the probe saw",
    "resume": "the optimizer had applied updates when the probe attached and an LR scheduler's position can "
              "be compared with their count",
    "card": "a fact on the card, never a finding",
}


@dataclass(frozen=True)
class Runtime:
    """How the runtime guard observes a rule.

    ``needs``: a key of :data:`RUNTIME_NEEDS` (what the guard must see); ``evidence``: what in the
    event trace shows it.
    """

    needs: str
    evidence: str


@dataclass(frozen=True)
class RuleSpec:
    """One rule.

    ``implemented_by`` is ``(module, class)`` in ``accumlint.checks`` (``None`` for the
    engine's own codes); ``meaning`` is what a finding does to training and ``fix`` the general
    repair, both in the words both engines print (a static finding adds only what is specific
    to its site).
    """

    code: str
    name: str
    severity: Severity
    principle: str
    implemented_by: tuple[str, str] | None
    summary: str
    meaning: str
    fix: str
    default_enabled: bool = True
    runtime: Runtime | None = None

    def __post_init__(self) -> None:
        if self.principle not in PRINCIPLES:
            raise ValueError(f"{self.code}: unknown principle {self.principle!r}")
        if self.family not in FAMILIES:
            raise ValueError(f"{self.code}: no family for hundreds digit {self.family}")
        if self.runtime is not None and self.runtime.needs not in RUNTIME_NEEDS:
            raise ValueError(f"{self.code}: unknown runtime need {self.runtime.needs!r}")

    @property
    def family(self) -> int:
        """The hundreds digit of the code (``ACC301`` -> 3)."""
        return int(self.code[3])

    @property
    def url(self) -> str:
        """The rule's catalogue page (a section of the README for the engine's own codes)."""
        if self.implemented_by is None:
            return f"{README_URL}#{'exit-codes' if self.code == PARSE_ERROR_CODE else 'suppression'}"
        return DOCS_URL.format(code=self.code, name=self.name)

    @property
    def qualified_name(self) -> str:
        """``accumlint.checks.<module>.<class>`` (``ValueError`` for an engine code)."""
        if self.implemented_by is None:
            raise ValueError(f"{self.code} is reported by the engine, not by a rule class")
        module, cls = self.implemented_by
        return f"accumlint.checks.{module}.{cls}"


PARSE_ERROR_CODE = "ACC000"
UNUSED_NOQA_CODE = "ACC990"

ENGINE_CODES: tuple[RuleSpec, ...] = (
    RuleSpec(
        PARSE_ERROR_CODE,
        "parse-error",
        Severity.ERROR,
        "-",
        None,
        summary="a file could not be read, decoded or parsed, so it was not checked",
        meaning="nothing in the file was checked",
        fix="make the file valid Python as its interpreter parses it, or exclude it",
    ),
    RuleSpec(
        UNUSED_NOQA_CODE,
        "unused-noqa",
        Severity.INFO,
        "-",
        None,
        summary="a `# noqa` directive names an ACC code that suppresses nothing there",
        meaning="the directive hides nothing today and would hide a future finding",
        fix="remove the code from the directive",
        default_enabled=False,
    ),
)

RULES: tuple[RuleSpec, ...] = (
    RuleSpec(
        "ACC001",
        "zero-grad-inside-group",
        Severity.ERROR,
        "P2",
        implemented_by=("resets", "ZeroGradInsideGroup"),
        summary="gradients reset every microbatch, so only the last microbatch of a group is learned from",
        meaning="only the microbatches after the last reset reach the update; the rest of the group is discarded",
        fix=(
            "reset once per group: after the optimizer update, under the same boundary test (or before the group's "
            "first backward)"
        ),
        runtime=Runtime(
            needs="events",
            evidence="grads reset (fingerprint before/after) between microbatches of one group",
        ),
    ),
    RuleSpec(
        "ACC002",
        "missing-grad-reset",
        Severity.ERROR,
        "P3",
        implemented_by=("resets", "MissingGradReset"),
        summary="no gradient reset anywhere: every update also contains all previous groups' gradients",
        meaning="every update also contains the gradients of all earlier groups",
        fix="reset the gradients after every optimizer update (optimizer.zero_grad(set_to_none=True))",
        runtime=Runtime(
            needs="events",
            evidence="grads of the previous group still present at the next group's first backward",
        ),
    ),
    RuleSpec(
        "ACC003",
        "reset-between-backward-and-step",
        Severity.ERROR,
        "P3",
        implemented_by=("resets", "ResetBetweenBackwardAndStep"),
        summary="gradients reset after the last backward and before the update: the update applies zeros",
        meaning="the update applies zero gradients: the group's work is thrown away",
        fix=(
            "move the reset after the optimizer update; nothing may clear .grad between the last backward and the "
            "update"
        ),
        runtime=Runtime(
            needs="events",
            evidence="all-zero or None grads at the update attempt after non-zero grads",
        ),
    ),
    RuleSpec(
        "ACC004",
        "step-every-microbatch",
        Severity.ERROR,
        "P1",
        implemented_by=("updates", "StepEveryMicrobatch"),
        summary="loss scaled for accumulation but the optimizer update runs every microbatch",
        meaning=(
            "parameters move inside the group, so accumulation has no effect (and the loss is still divided by A)"
        ),
        fix=(
            "update only on the last microbatch of each group: if (i + 1) % A == 0: optimizer.step(); "
            "optimizer.zero_grad()"
        ),
        runtime=Runtime(
            needs="events",
            evidence="an update after every microbatch while A > 1; parameters changed inside a group",
        ),
    ),
    RuleSpec(
        "ACC005",
        "partial-final-group",
        Severity.WARNING,
        "P9",
        implemented_by=("tail", "PartialFinalGroup"),
        summary="the epoch's last partial group leaks into the next epoch, is never applied, or is weighted r/A",
        meaning=(
            "the examples of the epoch's last partial group are not learned from like the others: lost, mixed into "
            "another epoch's update, or weighted r/A of a full group"
        ),
        fix=(
            "apply the tail: add `or (i + 1) == len(loader)` to the update test and divide the tail's losses by its "
            "true size r; or make the epoch length a multiple of A (drop_last, or a loader length chosen for A), so "
            "that no examples are backpropagated for nothing"
        ),
        runtime=Runtime(
            needs="epoch-end",
            evidence=(
                "the epoch's partial group: no update after it (dropped, or leaking into the next epoch's first "
                "group), or applied with weights summing to r/A"
            ),
        ),
    ),
    RuleSpec(
        "ACC006",
        "irregular-update-boundary",
        Severity.ERROR,
        "P1",
        implemented_by=("updates", "IrregularUpdateBoundary"),
        summary="the update gate does not select the last microbatch of every group of A",
        meaning="groups do not hold A microbatches: the update cadence and the loss scale disagree",
        fix="gate the update with (i + 1) % A == 0 on a 0-based microbatch index",
        runtime=Runtime(
            needs="events",
            evidence="observed group sizes differ from A",
        ),
    ),
    RuleSpec(
        "ACC007",
        "update-hook-per-microbatch",
        Severity.ERROR,
        "P1",
        implemented_by=("updates", "UpdateHookPerMicrobatch"),
        summary="a once-per-update hook (weight EMA, model averaging, update_and_allocate) run every microbatch",
        meaning=(
            "the weight average (or rank allocation) advances A times per optimizer update over unchanged "
            "weights: an EMA decays A times too fast and its warmup counts microbatches"
        ),
        fix=(
            "run the hook once per group, right after the optimizer update (under the same boundary test, or `if "
            "accelerator.sync_gradients:`)"
        ),
        runtime=Runtime(
            needs="weight-copy",
            evidence="a copy of the parameters moved toward them (s' - p = c (s - p)) twice inside one group",
        ),
    ),
    RuleSpec(
        "ACC008",
        "grad-leak-across-models",
        Severity.ERROR,
        "P3",
        implemented_by=("resets", "GradLeakAcrossModels"),
        summary="a backward reaches a second accumulating model: its stray gradients enter that model's next update",
        meaning=(
            "another model's loss is backpropagated into this model's accumulated gradients, and its next "
            "update applies them (a GAN's discriminator also steps on the generator's loss)"
        ),
        fix="cut the other model's pass off this model: requires_grad_(False) around it, or backward(inputs=...)",
    ),
    RuleSpec(
        "ACC009",
        "group-restarts-data-iterator",
        Severity.ERROR,
        "P1",
        implemented_by=("updates", "GroupRestartsDataIterator"),
        summary="each group restarts the data iterator: every update sees the loader's first microbatches again",
        meaning=(
            "every optimizer update trains on the loader's first A microbatches again: a sequential loader repeats "
            "the same data forever, a shuffling one draws a fresh random start each time and never finishes an epoch"
        ),
        fix=(
            "make one iterator per epoch (it = iter(loader)), outside the update, and draw each group's A microbatches "
            "from it (itertools.islice(it, A), next(it))"
        ),
    ),
    RuleSpec(
        "ACC010",
        "update-keyed-action-repeats",
        Severity.WARNING,
        "P1",
        implemented_by=("updates", "UpdateKeyedActionRepeats"),
        summary="a once-per-update action tested on an update counter on the microbatch path: it runs A times",
        meaning=(
            "the update counter stays at a multiple for all A microbatches of a group, so the action (a checkpoint "
            "save, an evaluation, a log point) runs A times per update: checkpoints overwritten, evaluation A times "
            "slower, duplicate log points"
        ),
        fix=(
            "run the action under the update gate, right after the optimizer update and the counter's increment (or "
            "under `if accelerator.sync_gradients:`)"
        ),
    ),
    RuleSpec(
        "ACC101",
        "double-normalization",
        Severity.ERROR,
        "P4",
        implemented_by=("normalization", "DoubleNormalization"),
        summary="loss divided by A by hand and again by the framework: gradients A times too small",
        meaning="gradients are A times too small: the effective learning rate is divided by A",
        fix="divide the loss once: remove the manual / A when the backward API already divides by A",
        runtime=Runtime(
            needs="ce-loss",
            evidence="per-token weights sum to 1/A over a group",
        ),
    ),
    RuleSpec(
        "ACC102",
        "mean-of-means",
        Severity.WARNING,
        "P4",
        implemented_by=("normalization", "MeanOfMeans"),
        summary="per-microbatch mean token losses averaged over A: tokens weighted unequally",
        meaning="a mean of microbatch means: tokens of short microbatches weigh more than tokens of long ones",
        fix=(
            "sum the per-token losses of each microbatch (reduction=\"sum\") and divide by the supervised tokens of "
            "the whole group, counted before its first backward (across the replicas under DDP, times D)"
        ),
        runtime=Runtime(
            needs="ce-loss",
            evidence="each microbatch weighted equally while token counts differ",
        ),
    ),
    RuleSpec(
        "ACC103",
        "missing-normalization",
        Severity.WARNING,
        "P4",
        implemented_by=("normalization", "MissingNormalization"),
        summary="accumulated loss never divided by A: gradients are A times the mean",
        meaning="gradients are A times the group mean: the effective learning rate is multiplied by A",
        fix=(
            "divide each microbatch loss by A (or the summed token loss by the group's supervised tokens); if the sum "
            "is intended, say so with `# noqa: ACC103`"
        ),
        default_enabled=False,
        runtime=Runtime(
            needs="ce-loss",
            evidence="per-token weights sum to A over a group",
        ),
    ),
    RuleSpec(
        "ACC104",
        "normalization-after-backward",
        Severity.ERROR,
        "P4",
        implemented_by=("normalization", "NormalizationAfterBackward"),
        summary="loss divided after its backward ran: only the logged value changes",
        meaning=(
            "the division changes only the logged value: gradients keep the undivided scale, A times the group mean"
        ),
        fix="divide the loss before its backward (loss = loss / A; loss.backward())",
    ),
    RuleSpec(
        "ACC105",
        "framework-expects-normalization",
        Severity.ERROR,
        "P4",
        implemented_by=("normalization", "FrameworkExpectsNormalization"),
        summary="an API that leaves normalization to the user, used without it",
        meaning=(
            "the framework takes the loss as normalized over the group: each microbatch counts as a whole group, "
            "gradients are about A times too large"
        ),
        fix="normalize the returned loss over the group: sum the token losses and divide by num_items_in_batch",
        runtime=Runtime(
            needs="loss-contract",
            evidence=(
                "a framework that leaves the group normalization to the loss (HF Trainer with num_items_in_batch): "
                "weights sum to A, or a mean of means"
            ),
        ),
    ),
    RuleSpec(
        "ACC106",
        "dp-rescale-on-local-mean",
        Severity.ERROR,
        "P10",
        implemented_by=("data_parallel", "DpRescaleOnLocalMean"),
        summary="a local mean multiplied by the data-parallel size: the update is D times the global mean",
        meaning=(
            "gradients are D times the mean over the effective batch: the effective learning rate is multiplied by "
            "the data-parallel size, and changes whenever the job runs on a different number of replicas"
        ),
        fix=(
            "drop the multiplication by the world size (DDP/FSDP's average of the replicas' means is the global "
            "mean), or sum the loss and divide by the count all-reduced over the replicas before multiplying by it"
        ),
    ),
    RuleSpec(
        "ACC107",
        "auxiliary-loss-not-normalized",
        Severity.WARNING,
        "P4",
        implemented_by=("normalization", "AuxiliaryLossNotNormalized"),
        summary="an auxiliary loss term added per microbatch without the main loss's ÷A: weighted A× its coefficient",
        meaning=(
            "the auxiliary term (load balancing, z-loss, KL, a regulariser) weighs A times its configured coefficient "
            "against the main loss: the group's update sums A of its gradients but only the mean of the main loss's"
        ),
        fix=(
            "divide every summand of the backpropagated loss by the same group denominator: "
            "divide the whole sum once, (main + aux) / A"
        ),
    ),
    RuleSpec(
        "ACC108",
        "eval-loss-scaled-for-accumulation",
        Severity.WARNING,
        "P4",
        implemented_by=("normalization", "EvalLossScaledForAccumulation"),
        summary="a validation loss computed through the training 1/A: reported A times too small",
        meaning=(
            "the reported validation or test loss is A times too small: it is not comparable with the training "
            "loss, with runs at another A, or with a checkpoint's earlier evaluations"
        ),
        fix=(
            "compute the evaluation loss without the 1/A (divide by A only where the training loss is "
            "backpropagated), or multiply the reported value back by A"
        ),
    ),
    RuleSpec(
        "ACC201",
        "loss-kept-with-graph",
        Severity.ERROR,
        "P5",
        implemented_by=("memory", "LossKeptWithGraph"),
        summary="a loss that still holds its autograd graph is kept across microbatches: memory grows with A",
        meaning="memory grows with every kept microbatch graph",
        fix=(
            "keep loss.item() or loss.detach() (and outputs .detach()) across microbatches, not the tensors with "
            "their graph"
        ),
        runtime=Runtime(
            needs="events",
            evidence=(
                "a microbatch graph alive > A+1 microbatches later (needs A+3 probed microbatches; a list of "
                "losses cleared at each update is not kept); A forwards, one backward"
            ),
        ),
    ),
    RuleSpec(
        "ACC202",
        "retain-graph-in-loop",
        Severity.WARNING,
        "P5",
        implemented_by=("memory", "RetainGraphInLoop"),
        summary="backward(retain_graph=True) in the loop keeps a microbatch's graph alive for nothing",
        meaning="saved activations of every microbatch stay in memory",
        fix=(
            "drop retain_graph=True unless a second backward goes through the same graph (a hidden state carried into "
            "the next microbatch needs .detach() instead)"
        ),
        runtime=Runtime(
            needs="events",
            evidence="saved activations unpacked by a backward still alive at the next forward",
        ),
    ),
    RuleSpec(
        "ACC301",
        "clip-inside-group",
        Severity.ERROR,
        "P6",
        implemented_by=("gradient_ops", "ClipInsideGroup"),
        summary="gradients clipped every microbatch: partial sums are clipped, not the group's gradient",
        meaning="a partial sum of the group's gradients is clipped, not the group's gradient",
        fix=(
            "clip once per group, after the last backward and right before the optimizer update (under the same "
            "boundary test)"
        ),
        runtime=Runtime(
            needs="events",
            evidence="clip before the group's last backward, or more than once per group",
        ),
    ),
    RuleSpec(
        "ACC302",
        "clip-before-unscale",
        Severity.ERROR,
        "P7",
        implemented_by=("gradient_ops", "ClipBeforeUnscale"),
        summary="gradients clipped while still multiplied by the GradScaler's scale",
        meaning="the clip threshold is compared with scaled gradients, so it clips far too much",
        fix="call scaler.unscale_(optimizer) once per update, right before clipping",
        runtime=Runtime(
            needs="events",
            evidence="clip before unscale_ while the scale is not 1",
        ),
    ),
    RuleSpec(
        "ACC303",
        "scaler-inside-group",
        Severity.ERROR,
        "P7",
        implemented_by=("gradient_ops", "ScalerInsideGroup"),
        summary="GradScaler unscale/step/update on every microbatch",
        meaning="later contributions keep the scale or the scale changes inside the group: mixed-up gradient units",
        fix=(
            "call scaler.unscale_, the clip, scaler.step and scaler.update() once per group, after its last backward "
            "(under the update's boundary test)"
        ),
        runtime=Runtime(
            needs="events",
            evidence="unscale_/scaler.step/update before the last backward; scale changes in a group",
        ),
    ),
    RuleSpec(
        "ACC304",
        "scheduler-per-microbatch",
        Severity.ERROR,
        "P8",
        implemented_by=("schedule", "SchedulerPerMicrobatch"),
        summary="LR scheduler stepped every microbatch: the schedule runs A times too fast",
        meaning="the schedule runs faster than the optimizer updates it is sized in",
        fix=(
            "step the scheduler once per optimizer update, right after it, under the same gate as optimizer.step() (or "
            "`if accelerator.sync_gradients:`)"
        ),
        runtime=Runtime(
            needs="scheduler",
            evidence="more scheduler steps between two update attempts than the contract allows",
        ),
    ),
    RuleSpec(
        "ACC305",
        "scheduler-horizon-unit-mismatch",
        Severity.WARNING,
        "P8",
        implemented_by=("schedule", "SchedulerHorizonUnitMismatch"),
        summary="scheduler horizon counted in microbatches while stepped per update (or the reverse)",
        meaning=(
            "the schedule's horizon is counted in another unit than its steps: it ends A times too early or too late"
        ),
        fix="count the horizon in optimizer updates: ceil(len(loader) / A) * epochs",
    ),
    RuleSpec(
        "ACC306",
        "scheduler-stepped-twice",
        Severity.ERROR,
        "P8",
        implemented_by=("schedule", "SchedulerSteppedTwice"),
        summary="a scheduler the framework already steps is stepped again by hand",
        meaning="the schedule advances once more per manual step than the framework's own stepping: it ends early",
        fix="remove the manual scheduler.step(): the framework already steps the scheduler it was given",
        runtime=Runtime(
            needs="scheduler-owner",
            evidence=(
                "a scheduler a framework steps per update (Lightning, DeepSpeed) also stepped by the user's code"
            ),
        ),
    ),
    RuleSpec(
        "ACC307",
        "grad-rescale-inside-group",
        Severity.ERROR,
        "P6",
        implemented_by=("gradient_ops", "GradRescaleInsideGroup"),
        summary="gradients rescaled in place every microbatch: earlier microbatches shrink again by every later factor",
        meaning=(
            "each microbatch's gradient is multiplied by the factors of all later microbatches of its group, so "
            "the update applies a reweighted sum, not the group's gradient"
        ),
        fix=(
            "rescale the accumulated gradients once per group, by the group's denominator, after the last backward and "
            "before the update (under the same boundary test)"
        ),
        runtime=Runtime(
            needs="events",
            evidence="the gradients change in place between two microbatches of a group with no clip, unscale, "
            "reset or update the probe saw",
        ),
    ),
    RuleSpec(
        "ACC308",
        "scheduler-interval-defaults-to-epoch",
        Severity.ERROR,
        "P8",
        implemented_by=("schedule", "SchedulerIntervalDefaultsToEpoch"),
        summary=("Lightning: a scheduler sized in optimizer updates returned without interval 'step' (stepped once "
                 "per epoch)"),
        meaning="Lightning steps a scheduler once per epoch unless its config says \"interval\": \"step\": a "
                "schedule sized in optimizer updates advances one position per epoch, so its warmup and decay "
                "barely start",
        fix="return the scheduler as {\"scheduler\": sched, \"interval\": \"step\"} under \"lr_scheduler\" (or size it "
            "in epochs if it is meant to be stepped per epoch)",
    ),
    RuleSpec(
        "ACC309",
        "manual-scheduler-never-stepped",
        Severity.ERROR,
        "P8",
        implemented_by=("schedule", "ManualSchedulerNeverStepped"),
        summary="Lightning manual optimization: a scheduler from configure_optimizers is never stepped",
        meaning="under manual optimization Lightning steps no scheduler: the learning rate never changes "
                "(no warmup, no decay)",
        fix=(
            "step each scheduler from configure_optimizers yourself: in training_step after the optimizer update (sch ="
            " self.lr_schedulers(); sch.step(), under the update's boundary test), or per epoch in on_train_epoch_end"
        ),
    ),
    RuleSpec(
        "ACC310",
        "scaler-update-missing-on-skip",
        Severity.ERROR,
        "P7",
        implemented_by=("gradient_ops", "ScalerUpdateMissingOnSkip"),
        summary="GradScaler update() skipped on the path that leaves after unscale_ (a non-finite skip)",
        meaning="after unscale_ a skip leaves without scaler.update(): the scale is not lowered and the next "
                "unscale_ raises RuntimeError (already called since the last update())",
        fix=(
            "call scaler.update() on every path after scaler.unscale_, the skip path too, or call "
            "scaler.step(optimizer) and scaler.update() unconditionally: scaler.step() already skips a non-finite "
            "update"
        ),
    ),
    RuleSpec(
        "ACC401",
        "no-sync-misses-forward",
        Severity.WARNING,
        "P10",
        implemented_by=("sync", "NoSyncMissesForward"),
        summary="no_sync() wraps the backward but not the forward: DDP still all-reduces every microbatch",
        meaning=(
            "DDP decides at forward time: this microbatch all-reduced anyway (or the update used unsynchronized "
            "gradients)"
        ),
        fix="enter no_sync() (or set require_backward_grad_sync) before the forward, not only around the backward",
        runtime=Runtime(
            needs="ddp",
            evidence="DDP sync flag True at forward and False during backward (or the reverse)",
        ),
    ),
    RuleSpec(
        "ACC402",
        "no-sync-never-syncs",
        Severity.ERROR,
        "P10",
        implemented_by=("sync", "NoSyncNeverSyncs"),
        summary="every microbatch runs under no_sync(): gradients are never synchronized and replicas diverge",
        meaning="replicas never average their gradients and silently diverge",
        fix=(
            "run the forward and backward of each group's last microbatch outside no_sync() (ctx = model.no_sync() if "
            "(i + 1) % A != 0 else nullcontext())"
        ),
        runtime=Runtime(
            needs="ddp",
            evidence="no microbatch of a group forwarded with sync on; replica checksums differ",
        ),
    ),
    RuleSpec(
        "ACC403",
        "duplicate-samples-across-replicas",
        Severity.ERROR,
        "P11",
        implemented_by=("data_parallel", "DuplicateSamplesAcrossReplicas"),
        summary="every replica reads the same samples: no distributed sampler or rank sharding",
        meaning="every replica trains on the same examples: D adds no information to the effective batch",
        fix=(
            "give each replica different examples: a DistributedSampler (and sampler.set_epoch(epoch) every epoch), a "
            "shard of the dataset per rank, or a loader prepared by Accelerate/Fabric"
        ),
        runtime=Runtime(
            needs="data-parallel",
            evidence="input-row hashes overlap across replicas",
        ),
    ),
    RuleSpec(
        "ACC404",
        "effective-batch-counts-devices",
        Severity.WARNING,
        "P12",
        implemented_by=("data_parallel", "EffectiveBatchCountsDevices"),
        summary="effective batch computed from the GPU count instead of the data-parallel size",
        meaning="the effective batch used for the learning rate or A is not the one training runs with",
        fix="count D as the data-parallel group size: effective batch = m x A x D",
        runtime=Runtime(
            needs="effective-batch",
            evidence="observed m x A x D differs from the configured effective batch",
        ),
    ),
    RuleSpec(
        "ACC405",
        "global-denominator-with-averaging",
        Severity.ERROR,
        "P10",
        implemented_by=("data_parallel", "GlobalDenominatorWithAveraging"),
        summary="global denominator on top of DDP's averaging: gradients 1/D too small",
        meaning=(
            "gradients are 1/D of the intended mean: the effective learning rate is divided by the data-parallel size"
        ),
        fix="multiply by the data-parallel size, or all-reduce with SUM instead of relying on DDP's average",
    ),
    RuleSpec(
        "ACC406",
        "no-sync-noop-under-fsdp2",
        Severity.WARNING,
        "P10",
        implemented_by=("sync", "NoSyncNoopUnderFsdp2"),
        summary="a DDP-only sync switch on an FSDP2 fully_shard model: every microbatch still reduce-scatters",
        meaning=(
            "the DDP-only switch does nothing on an FSDP2 module (or raises): every microbatch still reduce-"
            "scatters its gradients"
        ),
        fix=(
            "use FSDP2's set_requires_gradient_sync(False) on the non-final microbatches of the group and True on"
            " the last"
        ),
    ),
    RuleSpec(
        "ACC407",
        "fsdp-offload-accumulation-outside-no-sync",
        Severity.ERROR,
        "P10",
        implemented_by=("sync", "FsdpOffloadAccumulationOutsideNoSync"),
        summary=("FSDP1 with CPU parameter offload accumulates outside no_sync(): the update holds the last "
                 "microbatch only"),
        meaning=(
            "FSDP1 with CPU parameter offload does not sum the gradients of backwards run outside no_sync(): the "
            "optimizer update applies the group's last microbatch instead of all A"
        ),
        fix=(
            "run the group's non-final microbatches (forward and backward) under the FSDP1 model's no_sync() and "
            "the last one outside it; or turn parameter offload off"
        ),
    ),
    RuleSpec(
        "ACC501",
        "accumulate-context-misplaced",
        Severity.ERROR,
        "P1",
        implemented_by=("framework_usage", "AccumulateContextMisplaced"),
        summary="accumulate() around the whole loop, missing, entered twice, or with a reset before the backward",
        meaning=(
            "Accelerate's accumulation is not doing what A says: the update cadence or the group's gradients are wrong"
        ),
        fix=(
            "enter accelerator.accumulate(model) once per microbatch and reset after the backward (optimizer.step(); "
            "optimizer.zero_grad())"
        ),
        runtime=Runtime(
            needs="events",
            evidence="Accelerate: update cadence differs from A, or a prepared reset wipes a group",
        ),
    ),
    RuleSpec(
        "ACC502",
        "engine-step-gated",
        Severity.ERROR,
        "P1",
        implemented_by=("framework_usage", "EngineStepGated"),
        summary="DeepSpeed engine.step() gated by hand: the engine's own micro-step counter breaks",
        meaning="DeepSpeed's own micro-step counter and the user's gate disagree: updates are skipped or misplaced",
        fix="call engine.step() after every microbatch: DeepSpeed decides the accumulation boundary itself",
    ),
    RuleSpec(
        "ACC503",
        "accumulate-omits-trained-model",
        Severity.WARNING,
        "P10",
        implemented_by=("framework_usage", "AccumulateOmitsTrainedModel"),
        summary="accumulate(a) leaves out a second trained prepared model: its gradients all-reduce every microbatch",
        meaning=(
            "the left-out model's data-parallel wrapper all-reduces its gradients on every microbatch instead of "
            "once per group: A times the communication for that model, and its sync is not deferred with the others"
        ),
        fix=(
            "pass every model the block trains to one accumulate() (with accelerator.accumulate(model_a, model_b))"
        ),
    ),
    RuleSpec(
        "ACC504",
        "optimizer-step-closure-skipped",
        Severity.ERROR,
        "P1",
        implemented_by=("framework_usage", "OptimizerStepClosureSkipped"),
        summary="Lightning optimizer_step override runs the closure (training_step, backward) only on some batches",
        meaning="the closure Lightning hands optimizer_step runs training_step and the backward: on the batches "
                "where it is not run nothing is trained, and Lightning 2.x stops with \"The closure hasn't been "
                "executed\"",
        fix="set Trainer(accumulate_grad_batches=A) and step on every optimizer_step call, or call "
            "optimizer_closure() on the batches that skip the step",
    ),
    RuleSpec(
        "ACC505",
        "engine-counter-overwritten",
        Severity.ERROR,
        "P1",
        implemented_by=("framework_usage", "EngineCounterOverwritten"),
        summary="DeepSpeed engine counter (micro_steps, global_steps) written inside the training loop",
        meaning="the engine decides its accumulation boundary and counts its updates from its own counters: "
                "written by the loop, updates never come, come at the wrong microbatch or are miscounted",
        fix=(
            "leave the engine's counters to engine.step(): keep your own count in a variable of your own, and restore "
            "the engine's once, outside the loop, with engine.load_checkpoint(...)"
        ),
    ),
    RuleSpec(
        "ACC901",
        "batchnorm-with-accumulation",
        Severity.INFO,
        "-",
        implemented_by=("facts_to_record", "BatchnormWithAccumulation"),
        summary="BatchNorm statistics are per microbatch, not per effective batch",
        meaning="BatchNorm statistics come from one microbatch, not from the effective batch",
        fix=(
            "record it; where microbatches are small, prefer GroupNorm/LayerNorm or a larger microbatch (SyncBatchNorm "
            "widens the statistics across replicas, not across microbatches)"
        ),
        default_enabled=False,
        runtime=Runtime(
            needs="card",
            evidence="BatchNorm modules in train mode and their microbatch size",
        ),
    ),
    RuleSpec(
        "ACC902",
        "ambiguous-step-unit",
        Severity.INFO,
        "-",
        implemented_by=("schedule", "AmbiguousStepUnit"),
        summary="a counter named step counts microbatches, not optimizer updates",
        meaning="the counter's unit is microbatches, so logs and schedules read against it are A times off",
        fix="name the counter for its unit (microbatch, update) and log against optimizer updates",
        default_enabled=False,
        runtime=Runtime(
            needs="card",
            evidence="microbatches, update attempts, applied updates, examples and tokens, apart",
        ),
    ),
    RuleSpec(
        "ACC903",
        "throughput-counts-one-microbatch",
        Severity.WARNING,
        "-",
        implemented_by=("facts_to_record", "ThroughputCountsOneMicrobatch"),
        summary="a throughput computed from one microbatch's count over a whole group's time: A times too small",
        meaning=(
            "the reported throughput counts one microbatch per group's time: it is A times too small"
        ),
        fix="count examples and tokens over the whole group (or multiply by A)",
        runtime=Runtime(
            needs="logged-rate",
            evidence="a rate handed to runtime_guard.log() after an update, times the time since the previous "
                     "update, against the examples or tokens of the whole group and of its last microbatch",
        ),
    ),
    RuleSpec(
        "ACC904",
        "resume-counter-unit-mismatch",
        Severity.WARNING,
        "-",
        implemented_by=("facts_to_record", "ResumeCounterUnitMismatch"),
        summary="on resume, a counter of optimizer updates restored from a count of microbatches (or the reverse)",
        meaning=(
            "after resume the counter is off by a factor A: the scheduler, the logs and the stop condition jump"
        ),
        fix=(
            "convert between units on restore (updates = microbatches // A, microbatches = updates * A), or save both "
            "counters"
        ),
        runtime=Runtime(
            needs="resume",
            evidence="at attach, the optimizer's own update count (state['step']) against the LR scheduler's "
                     "position (last_epoch), with the scheduler stepped once per update while probed",
        ),
    ),
)
"""Every rule class's spec, in code order."""

BY_CODE: dict[str, RuleSpec] = {spec.code: spec for spec in (*ENGINE_CODES, *RULES)}


def spec_of(code: str) -> RuleSpec:
    """The spec of ``code`` (case-insensitive); ``KeyError`` for an unknown code."""
    return BY_CODE[code.strip().upper()]


#: Between the spec's fix and the part of the help that is specific to a finding's site.
HERE = "; here: "


def help_text(spec: RuleSpec | None, site: str = "") -> str:
    """The help a finding of the rule ``spec`` prints, in both engines: the spec's ``fix``, then
    what is specific to the finding's site (the variable, the call, which of the fix's
    alternatives applies), after :data:`HERE`. A rule without a spec (a test's stand-in rule)
    gets ``site`` alone."""
    if spec is None:
        return site
    return f"{spec.fix}{HERE}{site}" if site else spec.fix


#: ACC005's site parts, in the words of both engines: where the epoch's last partial group is
#: applied but weighted r/A, and where it is left unapplied (leaks into the next epoch, or never)
WEIGHTED_TAIL = "the tail is already applied: divide its losses by its true size r"
UNAPPLIED_TAIL = "to drop the tail on purpose instead, reset the gradients (and the counter) at the start of each epoch"
