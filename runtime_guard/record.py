"""Everything one probe observed, in one object that the checks and the card read."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from runtime_guard.events import RESET
from runtime_guard.frameworks import DataParallelSize
from runtime_guard.trace import LoggedFigure, ObservedEvent, ObservedGroup


@dataclass
class RunRecord:
    """The probed run: setup facts, the groups with their events, and what could not be seen.

    ``accumulation_steps`` is A as given (or read from the Accelerator); ``None`` means it is
    inferred from the observed groups by the checks and the card.
    """

    accumulation_steps: int | None = None
    accumulation_source: str = ""
    expected_effective_batch: int | None = None
    groups: list[ObservedGroup] = field(default_factory=list)
    before_first_forward: list[ObservedEvent] = field(default_factory=list)
    script: str = ""  # the program's __main__ file (the script under `run`), relative to the cwd
    model_class: str = ""
    optimizer_class: str = ""
    # the optimizer's class when its update ignores a constant factor on the gradients (Adam, AdamW, ...;
    # runtime_guard.frameworks.scale_invariant_optimizer): an undivided sum of A gradients then moves only a clip
    optimizer_scale_invariant: str = ""
    parameters: int = 0
    param_dtypes: list[str] = field(default_factory=list)
    param_devices: list[str] = field(default_factory=list)
    ddp: bool = False
    fsdp2: bool = False
    accelerate: bool = False
    accelerate_num_steps: int | None = None
    # a microbatch ran with Accelerate's sync flag off: accumulate() (or its gradient state) drives the cadence
    accumulate_seen: bool = False
    scaler_given: bool = False
    scheduler_given: bool = False
    scheduler_steps_per_update: int = 1
    # a framework that steps the given scheduler outside the probed groups (Lightning's default
    # interval="epoch"): every step by the user's code is then one too many (ACC306)
    scheduler_owner: str = ""
    # the loop's LR schedule counts microbatches (horizon and warmup too, litgpt style): a learning rate
    # written into param_groups every microbatch is then by design (rules-spec ACC304 exemption)
    lr_in_microbatches: bool = False
    data_parallel: DataParallelSize | None = None
    batchnorm: list[str] = field(default_factory=list)
    bn_training: bool = False
    ce_possible: bool = True
    ce_reason: str = ""
    comm_buckets: int | None = None
    replica_hashes: list[list[int]] | None = None
    # what replica_hashes fingerprint: the rows a DataLoader yielded, the model's input rows, or both
    replica_hashes_of: str = ""
    replica_ce: list[list[tuple[float, int]]] | None = None
    unobservable: list[str] = field(default_factory=list)
    # a framework contract that leaves the loss normalization over the group to the user's loss (ACC105), e.g.
    # "HF Trainer: ... passes num_items_in_batch and does not divide by A"; "" when none is known
    user_normalizes: str = ""
    # the factor the loop deliberately puts on its cross-entropy loss (a task weight): the per-token weights
    # of a group are expected to sum to it
    loss_scale: float = 1.0
    # the declared loss convention: "mean" (weights of a group sum to loss_scale) or "sum" (to its token count)
    loss_convention: str = "mean"
    # a framework quirk named on the card explains weights summing to neither 1, 1/A nor A (no finding then)
    weight_sum_explained: bool = False
    # copies of the probed parameters found at install (weight EMA, averaged model), by what holds them;
    # None: not searched (or the search failed: ``shadow_search`` says why)
    shadow_copies: list[str] | None = None
    shadow_search: str = ""
    # a probed check found a copy apart from the parameters (a move toward them is measurable)
    shadows_apart: bool = False
    # rates the loop logged while probed, through runtime_guard.log() or a hooked logger (ACC903)
    figures: list[LoggedFigure] = field(default_factory=list)
    # the loggers hooked because the program had imported them, at install or by an update (wandb.log, ...)
    loggers: list[str] = field(default_factory=list)
    # at attach: the optimizer's own count of applied updates (state["step"]; None: its state holds none) and the
    # LR scheduler's position (last_epoch; None: no scheduler): a resumed run's restored counters (ACC904)
    updates_at_attach: int | None = None
    scheduler_position: int | None = None
    # grad-enabled forwards of the probed model with every parameter frozen (no microbatches: observe.forward)
    frozen_forwards: int = 0
    notes: list[str] = field(default_factory=list)
    # the guard's own code that raised while probing (contained, runtime_guard.contain): every check is then
    # "not observed" with the first of these as the reason
    guard_failures: list[str] = field(default_factory=list)
    clean_exit: bool = True
    extra: dict[str, Any] = field(default_factory=dict)
    # probe at an epoch end (``at="epoch_end"``): batches per epoch (None: no len()), the epoch whose end is
    # watched, the seq of its epoch-end event, and why the end could not be watched
    at_epoch_end: bool = False
    loader_length: int | None = None
    watched_epoch: int | None = None
    epoch_end_seq: int | None = None
    epoch_unobserved: str = ""
    loader_unprepared: bool = False  # the watched loader is known and is not an Accelerate-prepared one

    @property
    def accelerate_accumulates(self) -> bool:
        """Accelerate's own accumulation drives the loop (a microbatch ran with its sync flag off, as
        inside ``accumulate()``): group-structure and reset findings are then ACC501's. A prepared
        optimizer in a loop that gates its updates by hand (sync always on) keeps the plain codes,
        also with Accelerate's A > 1 configured (its ``backward`` then only divides by A)."""
        return self.accelerate and self.accumulate_seen

    @property
    def full_groups(self) -> list[ObservedGroup]:
        """Groups closed by an update attempt, without the watched tail and the groups at an epoch
        boundary (the partial group and the next epoch's first: ACC005's business)."""
        return [g for g in self.groups if g.closed and not g.tail and not g.role]

    def group_sizes(self) -> list[int]:
        """Microbatches (grad-enabled forwards, a loaded batch's later passes joined) per closed group."""
        return [len(g.microbatches) for g in self.full_groups]

    def several_models(self) -> str:
        """Why the probed model's forwards are not one microbatch each ("" when they are): a closed group
        in which a backward reached the output of some forwards but not of others. The model then also
        feeds another model that never backpropagates into it (a GAN's generator, forwarded once for the
        discriminator's step, detached, and once for its own), or runs extra grad-enabled forwards: which
        of them are microbatches cannot be told, so the group sizes are not observable. Likewise when the
        model also ran frozen for another model's loss (a GAN's discriminator) and its microbatches cannot
        be counted in the batches a DataLoader yielded: its real and fake passes read as two each; and when
        the groups hold A passes on fewer loaded batches (a pass or a batch per microbatch: either reading)."""
        for g in self.groups:
            if not g.closed:
                continue
            reached = sum(1 for mb in g.microbatches if mb.output_reached or mb.backwards)
            if 0 < reached < len(g.microbatches):
                return (f"several models: group {g.index} had {len(g.microbatches)} forwards of the probed model and "
                        f"only {reached} of them reached by a backward (its output also feeds another model, e.g. a "
                        "GAN's generator, or it runs extra grad-enabled forwards)")
        if self.frozen_forwards and any(mb.fresh_batch is not True for g in self.full_groups for mb in g.microbatches):
            return (f"several models: {self.frozen_forwards} forward(s) of the probed model ran with its parameters "
                    "frozen (it also "
                    "serves another model's loss, e.g. a GAN discriminator in the generator's pass) and its forwards "
                    "did not each follow a DataLoader yield the probe saw: how many of its own forward/backward "
                    "passes make one microbatch (a discriminator's real and fake passes) cannot be told")
        a, sizes = self.accumulation_steps, self.group_sizes()
        passes = [sum(mb.passes for mb in g.microbatches) for g in self.full_groups]
        if a is not None and passes != sizes and all(n == a for n in passes):
            return (f"several passes per loaded batch: each group held A = {a} forward/backward passes on {sizes} "
                    "batches a DataLoader yielded: whether each pass is a microbatch (repeated augmentation) or each "
                    "batch is (a GAN discriminator's real and fake passes) cannot be told")
        return ""

    def resets_after(self) -> list[int]:
        """Indices of the closed groups followed by a gradient reset (between their update attempt
        and the next group's first forward)."""
        return [g.index for g in self.groups if g.closed and any(
            e.kind == RESET and e.seq > (g.boundary_seq or 0) and (e.detail.get("zeroed") or e.detail.get("changed"))
            for e in g.events)]

    def reset_period(self) -> int | None:
        """A inferred from the resets when A was not given and every closed group held one
        microbatch: the loop updates every microbatch but resets every k >= 2 updates, regularly
        from the start (Lightning manual optimization with the step outside its gate), so k is
        the accumulation the loop meant; ``None`` otherwise (needs two resets)."""
        if self.accumulation_steps is not None:
            return None
        groups = self.full_groups
        if not groups or any(len(g.microbatches) != 1 for g in groups):
            return None
        resets = self.resets_after()
        if len(resets) < 2:
            return None
        k = resets[1] - resets[0]
        if k < 2 or resets[0] != k - 1 or any(b - a != k for a, b in zip(resets, resets[1:], strict=False)):
            return None
        return k

    def effective_a(self) -> tuple[int | None, str]:
        """A and where it comes from: given, read from a framework, inferred from a reset
        cadence (``reset_period``) or inferred (most common observed group size); ``(None,
        reason)`` when no group closed or the forwards are not one microbatch each (``several_models``)."""
        if self.accumulation_steps is not None:
            return self.accumulation_steps, self.accumulation_source or "given to the probe"
        period = self.reset_period()
        if period is not None:
            return period, (f"inferred from the gradient resets: one every {period} updates while every update "
                            "followed one microbatch")
        several = self.several_models()
        if several:  # forwards per update are not microbatches per update
            return None, f"not inferred: {several}"
        sizes = self.group_sizes()
        if not sizes:
            return None, "not inferred: no optimizer update attempt observed"
        common = max(set(sizes), key=lambda s: (sizes.count(s), s))
        return common, f"inferred from observed group sizes {sizes}"
