# expect: ACC105 line 11 -- a lambda that drops the count: the group's gradient is A microbatch means summed
import torch
from transformers import Trainer, TrainingArguments


def train(model, data, accum):
    args = TrainingArguments("out", gradient_accumulation_steps=accum)
    trainer = Trainer(
        model=model, args=args, train_dataset=data,
        compute_loss_func=(
            lambda outputs, labels, num_items_in_batch=None: torch.nn.functional.mse_loss(outputs.logits, labels)
        ),
    )
    trainer.train()
