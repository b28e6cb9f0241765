"""A realistic large training script with gradient-accumulation bugs, for the fix benchmarks.

    python benchmarks/training_script.py [--lines 3000] > train_big.py

:func:`build` writes one module of about ``lines`` lines: configuration dataclasses, data
transforms, metrics and logging helpers (the bulk of a real ``train.py``, none of it a finding)
around six training loops (plain PyTorch, AMP, Accelerate) whose bugs give about 15 findings,
most of them of codes with a fix (ACC001, ACC006, ACC101, ACC201, ACC304).
:data:`EXPECTED` lists the codes the loops are written to produce (``benchmarks/fix_latency.py``
prints what a check reports). Deterministic: the same ``lines`` always gives the same text.
"""

from __future__ import annotations

import argparse
import sys

HEADER = '''"""Fine-tuning entry point: configuration, data, metrics and the training loops."""
import dataclasses
import json
import logging
import math
import os
import time

import torch
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader

logger = logging.getLogger(__name__)

'''

#: one helper block: a configuration section, a transform, a metric and a logging helper
#: (``{n}`` numbers the copies so that every name is defined once)
HELPERS = '''
@dataclasses.dataclass
class Section{n}Config:
    """Settings of section {n} of the run."""

    learning_rate: float = 3e-4
    weight_decay: float = 0.01
    warmup_ratio: float = 0.06
    max_grad_norm: float = 1.0
    label_smoothing: float = 0.0
    dropout: float = 0.1
    seed: int = {n}

    def to_dict(self):
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, path):
        with open(path) as handle:
            values = json.load(handle)
        known = {{field.name for field in dataclasses.fields(cls)}}
        return cls(**{{key: value for key, value in values.items() if key in known}})


def normalize_batch_{n}(batch, mean, std):
    """Scale the inputs of a batch to zero mean and unit variance."""
    inputs = batch["inputs"].float()
    inputs = (inputs - mean) / std.clamp_min(1e-6)
    batch = dict(batch)
    batch["inputs"] = inputs
    if "mask" in batch:
        batch["mask"] = batch["mask"].bool()
    return batch


def random_crop_{n}(tensor, size, generator=None):
    """A random window of ``size`` along the last dimension."""
    length = tensor.shape[-1]
    if length <= size:
        return torch.nn.functional.pad(tensor, (0, size - length))
    start = int(torch.randint(0, length - size + 1, (1,), generator=generator))
    return tensor[..., start:start + size]


class RunningMetric{n}:
    """A running mean of a scalar metric, reset at each evaluation."""

    def __init__(self, name):
        self.name = name
        self.total = 0.0
        self.count = 0

    def update(self, value, weight=1):
        self.total += float(value) * weight
        self.count += weight

    def compute(self):
        return self.total / max(self.count, 1)

    def reset(self):
        self.total = 0.0
        self.count = 0


def accuracy_{n}(logits, labels, ignore_index=-100):
    """The share of the labelled positions the logits predict."""
    keep = labels != ignore_index
    predicted = logits.argmax(dim=-1)
    correct = (predicted == labels) & keep
    return correct.sum().item() / max(keep.sum().item(), 1)


def log_metrics_{n}(step, metrics, prefix="train"):
    """Write the metrics of one step to the log, rounded for reading."""
    parts = [f"{{prefix}}/{{name}}={{value:.4f}}" for name, value in sorted(metrics.items())]
    logger.info("step %d %s", step, " ".join(parts))


def save_checkpoint_{n}(model, optimizer, step, directory):
    """Save the model and optimizer state of ``step`` under ``directory``."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"step-{{step:07d}}.pt")
    torch.save({{"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}}, path)
    return path


@torch.no_grad()
def evaluate_{n}(model, loader, loss_fn):
    """Mean loss and accuracy of ``model`` over ``loader``."""
    model.eval()
    loss_metric, accuracy_metric = RunningMetric{n}("loss"), RunningMetric{n}("accuracy")
    for batch in loader:
        logits = model(batch["inputs"])
        loss_metric.update(loss_fn(logits, batch["labels"]).item(), len(batch["labels"]))
        accuracy_metric.update(accuracy_{n}(logits, batch["labels"]), len(batch["labels"]))
    model.train()
    return {{"loss": loss_metric.compute(), "accuracy": accuracy_metric.compute()}}
'''

#: the training loops, each with the codes it is written to produce
LOOPS: list[tuple[str, tuple[str, ...]]] = [
    ('''
def train_plain(model, loader, optimizer, scheduler, loss_fn, accumulation_steps, epochs):
    """Plain PyTorch: the reset, the running loss and the scheduler are per microbatch."""
    for epoch in range(epochs):
        epoch_loss = 0.0
        for i, batch in enumerate(loader):
            optimizer.zero_grad()
            loss = loss_fn(model(batch["inputs"]), batch["labels"]) / accumulation_steps
            loss.backward()
            epoch_loss += loss
            if (i + 1) % accumulation_steps == 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
            scheduler.step()
        logger.info("epoch %d loss %.4f", epoch, epoch_loss.item())
''', ("ACC001", "ACC201", "ACC304")),
    ('''
def train_first_batch(model, loader, optimizer, loss_fn, accumulation_steps):
    """The update fires on the first microbatch of the run, one group early."""
    losses = []
    for step, batch in enumerate(loader):
        loss = loss_fn(model(batch["inputs"]), batch["labels"]) / accumulation_steps
        loss.backward()
        losses.append(loss)
        if step % accumulation_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
    return losses
''', ("ACC006", "ACC201")),
    ('''
def train_amp(model, loader, optimizer, scheduler, loss_fn, accumulation_steps, epochs):
    """Mixed precision with a gradient scaler."""
    scaler = torch.amp.GradScaler("cuda")
    for epoch in range(epochs):
        for itr, batch in enumerate(loader):
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.float16):
                loss = loss_fn(model(batch["inputs"]), batch["labels"]) / accumulation_steps
            scaler.scale(loss).backward()
            if (itr + 1) % accumulation_steps == 0:
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                scaler.step(optimizer)
                scaler.update()
            scheduler.step()
''', ("ACC001", "ACC304")),
    ('''
def train_accelerate(model, loader, optimizer, scheduler, loss_fn, accumulation_steps):
    """Accelerate: its accumulate() already divides the loss and gates the update."""
    accelerator = Accelerator(gradient_accumulation_steps=accumulation_steps)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    for batch in loader:
        with accelerator.accumulate(model):
            loss = loss_fn(model(batch["inputs"]), batch["labels"])
            loss = loss / accumulation_steps
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()
            model.zero_grad()
''', ("ACC101", "ACC001")),
    ('''
def train_inner_loop(model, batches, optimizer, loss_fn, micro_batches):
    """nanoGPT style: an inner loop over the microbatches of each update."""
    history = []
    for it, batch in enumerate(batches):
        for micro in batch.chunk(micro_batches):
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(micro)) / micro_batches
            loss.backward()
            history.append(loss)
        optimizer.step()
    return history
''', ("ACC001", "ACC201")),
    ('''
def train_summed(model, loader, optimizer, scheduler, loss_fn, accumulation_steps):
    """A running total of the loss for the progress bar."""
    total = 0.0
    for index, batch in enumerate(loader):
        loss = loss_fn(model(batch["inputs"]), batch["labels"]) / accumulation_steps
        loss.backward()
        total += loss
        if index % accumulation_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
        scheduler.step()
    return total
''', ("ACC006", "ACC201", "ACC304")),
]

#: the codes the loops are written to produce (one entry per finding)
EXPECTED: tuple[str, ...] = tuple(code for _, codes in LOOPS for code in codes)

FOOTER = '''

def main():
    config = Section0Config()
    torch.manual_seed(config.seed)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    loader = DataLoader(list(range(64)), batch_size=8)
    started = time.time()
    train_plain(model, loader, optimizer, scheduler, nn.CrossEntropyLoss(), 4, 1)
    logger.info("trained in %.1f s (%.2f nats)", time.time() - started, math.log(10))


if __name__ == "__main__":
    main()
'''


def build(lines: int = 3000) -> str:
    """The script's text, of about ``lines`` lines (at least the loops and one helper block):
    helper blocks, with a training loop after every few of them."""
    helper_lines = HELPERS.count("\n")
    fixed = HEADER.count("\n") + FOOTER.count("\n") + sum(loop.count("\n") for loop, _ in LOOPS)
    blocks = max(1, (lines - fixed) // helper_lines)
    parts = [HEADER]
    every = max(1, blocks // len(LOOPS))
    pending = [loop for loop, _ in LOOPS]
    for n in range(blocks):
        parts.append(HELPERS.format(n=n))
        if n % every == every - 1 and pending:
            parts.append(pending.pop(0))
    parts.extend(pending)
    parts.append(FOOTER)
    return "".join(parts)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=3000, help="about how many lines (default 3000)")
    args = parser.parse_args(argv)
    sys.stdout.write(build(args.lines))


if __name__ == "__main__":
    main()
