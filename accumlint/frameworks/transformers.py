"""Hugging Face Transformers (transformers 5.24.0 ``trainer.py``, ``optimization.py``): the
Trainer divides by the group's microbatch count, or leaves the normalization to a loss that
takes ``num_items_in_batch``.
"""

from __future__ import annotations

from accumlint.frameworks.contracts import FrameworkTail, GroupContract, Owner, Role, Source, TailTreatment

VERSION = "5.24.0"
#: Every version a fact of this module was read in (the installed one first). 4.31.0: the
#: Trainer's fairscale/fp16 scaler branch (``BACKEND_FLAGS``), gone from later versions.
READ_VERSIONS = (VERSION, "4.31.0")

CONTRACT = GroupContract(
    "HF Trainer", "transformers.Trainer(args=TrainingArguments(gradient_accumulation_steps=A))",
    divides=Owner.FRAMEWORK,
    divisor="the group's microbatch count, or nothing (the loss is normalized by the group's token count "
            "num_items_in_batch) when loss_is_scaled_for_ga, model_accepts_loss_kwargs or a compute_loss_func",
    resets=Owner.FRAMEWORK, gates_update=Owner.FRAMEWORK, steps_scheduler=Owner.FRAMEWORK, clips=Owner.FRAMEWORK,
    sync="no_sync through accelerator.accumulate() off the boundary", tail=TailTreatment.TRUE_COUNT,
    a_from="TrainingArguments(gradient_accumulation_steps=)", packages=("transformers",),
    source=Source("transformers", VERSION, "trainer.py _inner_training_loop / training_step"),
)

CONSTRUCTORS: dict[str, Role] = {
    "transformers.AdamW": Role.OPTIMIZER,
    "transformers.Adafactor": Role.OPTIMIZER,
    "transformers.get_scheduler": Role.SCHEDULER,
}
CONSTRUCTOR_PREFIXES: tuple[tuple[str, Role], ...] = (("transformers.optimization.get_", Role.SCHEDULER),)

#: ``TrainingArguments(gradient_accumulation_steps=)``: the value passed is A whatever its name.
ACCUMULATION_KEYWORD = "gradient_accumulation_steps"

#: Trainer classes whose ``training_step`` decides the division by A from
#: ``model_accepts_loss_kwargs`` (``training_step``; the group count ``num_items_in_batch``
#: exists only when batches carry ``"labels"``, ``_get_num_items_in_batch``). Subclasses from
#: other packages (trl, unsloth) may declare their own normalization, so only these bases are judged.
TRAINER_CLASSES = frozenset({
    "transformers.Trainer", "transformers.trainer.Trainer",
    "transformers.Seq2SeqTrainer", "transformers.trainer_seq2seq.Seq2SeqTrainer",
})
#: the classes' own names, whatever module they are imported from
TRAINER_CLASS_NAMES = frozenset(name.rsplit(".", 1)[-1] for name in TRAINER_CLASSES)
#: the Trainer method a subclass overrides to compute the loss of a microbatch
COMPUTE_LOSS = "compute_loss"
#: the Trainer method called once per microbatch (``_inner_training_loop`` → ``training_step``)
#: and the update counter it can read: ``self.state.global_step`` advances once per optimizer
#: update, after the group's last microbatch
TRAINING_STEP = "training_step"
UPDATE_COUNTER = "self.state.global_step"
#: ``compute_loss``'s parameter holding the group's supervised-token count, and the batch key
#: without which the Trainer counts nothing and divides by A itself (``_get_num_items_in_batch``)
COUNT_PARAMETER = "num_items_in_batch"
COUNTED_KEY = "labels"
#: Packages whose Trainer classes a module subclasses (trl's trainers derive from transformers').
TRAINER_PACKAGES = ("transformers", "trl")
#: What makes ``training_step`` leave the division to the loss: ``loss_is_scaled_for_ga`` when
#: set, else ``model_accepts_loss_kwargs`` or a ``compute_loss_func`` (``training_step``).
EXPLICIT_SCALED_ATTR = "loss_is_scaled_for_ga"
LOSS_KWARGS_ATTR = "model_accepts_loss_kwargs"
LOSS_FUNC_ATTR = "compute_loss_func"
#: Trainer attributes that ``Trainer.__init__`` sets from how the Trainer was built, choosing a backward
#: path of its own ``training_step`` that a subclass copies: ``do_grad_scaling`` is True only with
#: fairscale ``sharded_ddp`` and fp16 (transformers 4.31.0 ``trainer.py`` ``Trainer.__init__``, "Mixed
#: precision setup"; the attribute is gone from later versions); every other path backpropagates
#: through ``self.accelerator.backward``, which divides by A. A branch on it is the framework's
#: configuration, not a loop the subclass chose.
BACKEND_FLAGS = frozenset({"self.do_grad_scaling"})
BACKEND_FLAGS_SOURCE = Source("transformers", "4.31.0", "trainer.py Trainer.__init__ (mixed precision setup)")
#: The class attributes a Trainer subclass declares its loss's normalization with.
NORMALIZATION_ATTRS = frozenset({LOSS_KWARGS_ATTR, EXPLICIT_SCALED_ATTR})

#: The Trainer methods a subclass inherits that a training loop of its own calls on ``self`` (a
#: subclass that overrides ``_inner_training_loop`` and keeps ``self.training_step(model, inputs)``),
#: reduced to what they do to the group, as the Python text of a function the model runs where the
#: class does not define the method (``self.compute_loss`` then reaches the subclass's override).
#: ``training_step``: the loss of ``compute_loss`` divided by ``current_gradient_accumulation_steps``
#: (the group's microbatch count, set by the Trainer's own loop: a loop of the subclass that does not
#: set it leaves the divisor open) unless the loss is already scaled for the group, which needs a
#: ``num_items_in_batch`` (the test on it is a run-level choice where one is passed), then its
#: backward; ``compute_loss``: the model's forward on the batch's keys and the loss its output holds.
INHERITED_METHODS: dict[str, str] = {
    TRAINING_STEP: (
        "def training_step(self, model, inputs, num_items_in_batch=None):\n"
        "    loss = self.compute_loss(model, inputs, num_items_in_batch=num_items_in_batch)\n"
        "    if num_items_in_batch is None:\n"
        "        loss = loss / self.current_gradient_accumulation_steps\n"
        "    loss.backward()\n"
        "    return loss.detach()\n"),
    COMPUTE_LOSS: (
        "def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):\n"
        "    outputs = model(**inputs)\n"
        "    loss = outputs['loss']\n"
        "    return (loss, outputs) if return_outputs else loss\n"),
}
INHERITED_SOURCE = Source("transformers", VERSION, "trainer.py Trainer.training_step, Trainer.compute_loss")

#: ``optimization.py``: parameters that size a schedule (in scheduler steps); the
#: ``get_*_schedule_with_warmup`` functions take them by position too.
SCHEDULE_HORIZON_KEYWORDS = frozenset({"num_training_steps", "num_warmup_steps", "num_decay_steps"})
SCHEDULE_HORIZON_POSITIONS: dict[str, dict[int, str]] = {
    **{name: {1: "num_warmup_steps", 2: "num_training_steps"} for name in (
        "get_linear_schedule_with_warmup", "get_cosine_schedule_with_warmup",
        "get_cosine_with_hard_restarts_schedule_with_warmup", "get_polynomial_decay_schedule_with_warmup",
        "get_cosine_with_min_lr_schedule_with_warmup")},
    "get_constant_schedule_with_warmup": {1: "num_warmup_steps"},
}
#: ``optimization.py`` ``get_scheduler(name, optimizer, num_warmup_steps, num_training_steps)``: the
#: sizing parameters each named schedule reads (the others are ignored: ``"constant"`` returns
#: ``get_constant_schedule(optimizer)``); a name not listed reads both.
NAMED_SCHEDULE_READS: dict[str, frozenset[str]] = {
    "constant": frozenset(), "reduce_lr_on_plateau": frozenset(), "greedy": frozenset(),
    "constant_with_warmup": frozenset({"num_warmup_steps"}), "inverse_sqrt": frozenset({"num_warmup_steps"}),
}
#: pytorch-transformers 1.x ``WarmupLinearSchedule(warmup_steps, t_total)``.
LEGACY_SCHEDULE_HORIZON_KEYWORDS = frozenset({"warmup_steps", "t_total"})

TAILS: dict[str, FrameworkTail] = {
    "hf-trainer": FrameworkTail(
        "HF Trainer", TailTreatment.TRUE_COUNT,
        f"transformers {VERSION} trainer.py: the epoch's last update prefetches fewer batches and divides by "
        "their count"),
}


# --- owned loop: the user's loss function inside Trainer.training_step ---

#: ``Trainer(compute_loss_func=f)``: ``compute_loss`` returns ``f(outputs, labels,
#: num_items_in_batch=...)``, and ``training_step`` then takes the loss as already normalized for
#: the group and does not divide it by A (transformers 5.24.0 ``trainer.py``
#: ``training_step``: ``loss_is_scaled_for_ga = (...) or self.compute_loss_func is not None``;
#: ``compute_loss``: the call of ``compute_loss_func``). ``loss_is_scaled_for_ga`` on the
#: instance overrides that decision.
COMPUTE_LOSS_FUNC = "compute_loss_func"
SCALED_FOR_GA = frozenset({"loss_is_scaled_for_ga"})
SOURCE = "transformers 5.24.0 trainer.py Trainer.training_step, Trainer.compute_loss"

#: Collators that pad labels with -100 to each batch's longest sequence, so a model's
#: ``outputs.loss`` is a mean over a count of supervised tokens that varies per microbatch
#: (``data/data_collator.py``: ``DataCollatorForSeq2Seq`` and ``DataCollatorForTokenClassification``
#: pad labels with ``label_pad_token_id=-100``; the built-in losses, ``loss/loss_utils.py``, take
#: ``ignore_index=-100`` with a mean when no ``num_items_in_batch`` is passed). Not
#: ``DataCollatorForLanguageModeling``: over grouped fixed-length blocks its causal labels have no
#: padding, and its MLM masks a fixed ratio.
LABEL_MASKING_COLLATORS = frozenset({"DataCollatorForSeq2Seq", "DataCollatorForTokenClassification"})
