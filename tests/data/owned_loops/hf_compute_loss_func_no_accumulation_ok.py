# expect: nothing -- no accumulation configured: a mean per microbatch is the update's loss
import torch
from transformers import Trainer, TrainingArguments


def token_loss(outputs, labels, num_items_in_batch=None):
    return torch.nn.functional.cross_entropy(outputs.logits.flatten(0, 1), labels.flatten())


def train(model, data):
    args = TrainingArguments("out", per_device_train_batch_size=8)
    Trainer(model=model, args=args, train_dataset=data, compute_loss_func=token_loss).train()
