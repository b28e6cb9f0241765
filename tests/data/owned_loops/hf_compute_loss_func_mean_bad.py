# expect: ACC105 line 6 -- the Trainer does not divide a compute_loss_func's loss by A: 8 means are summed
import torch
from transformers import Trainer, TrainingArguments


def token_loss(outputs, labels, num_items_in_batch=None):
    logits = outputs.logits[..., :-1, :]
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels[..., 1:].flatten())


def train(model, data):
    args = TrainingArguments("out", gradient_accumulation_steps=8)
    Trainer(model=model, args=args, train_dataset=data, compute_loss_func=token_loss).train()
