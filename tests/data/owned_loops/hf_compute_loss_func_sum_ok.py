# expect: nothing -- the loss function divides the summed loss by the group's item count
import torch
from transformers import Trainer, TrainingArguments


def token_loss(outputs, labels, num_items_in_batch=None):
    logits = outputs.logits[..., :-1, :]
    total = torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels[..., 1:].flatten(), reduction="sum")
    return total / num_items_in_batch


def train(model, data):
    args = TrainingArguments("out", gradient_accumulation_steps=8)
    Trainer(model=model, args=args, train_dataset=data, compute_loss_func=token_loss).train()
