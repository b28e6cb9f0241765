"""HF transformers (owned-loop section; the coordinator merges it with the module's other rows)."""

from __future__ import annotations

# --- owned loop: the user's loss function inside Trainer.training_step ---

#: ``Trainer(compute_loss_func=f)``: ``compute_loss`` returns ``f(outputs, labels,
#: num_items_in_batch=...)``, and ``training_step`` then takes the loss as already normalized for
#: the group and does not divide it by A (transformers 5.24.0 ``trainer.py``
#: ``training_step``: ``loss_is_scaled_for_ga = (...) or self.compute_loss_func is not None``;
#: ``compute_loss``: the call of ``compute_loss_func``). ``loss_is_scaled_for_ga`` on the
#: instance overrides that decision.
COMPUTE_LOSS_FUNC = "compute_loss_func"
COUNT_PARAMETER = "num_items_in_batch"
#: the keyword that sets A (``TrainingArguments``; transformers 5.24.0 ``training_args.py``)
ACCUMULATION_KEYWORD = "gradient_accumulation_steps"
SCALED_FOR_GA = frozenset({"loss_is_scaled_for_ga"})
SOURCE = "transformers 5.24.0 trainer.py Trainer.training_step, Trainer.compute_loss"
