"""ACC310 good: twin of bad_helper_unscale_then_skip.py.

The skip path calls `scaler.update()` before `continue`: on an overflow the scale is
lowered and the next group unscales afresh. Plain PyTorch, runs on CPU.
"""
import math

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ACCUMULATION_STEPS = 4  # A: microbatches per optimizer update
MICROBATCH_SIZE = 8
GROUPS_PER_EPOCH = 3


def unscale_and_clip(scaler, optimizer, model, max_norm=1.0):
    scaler.unscale_(optimizer)
    return torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm).item()


def train(model, loader, optimizer, scaler):
    loss_fn = nn.MSELoss()
    for step, (x, y) in enumerate(loader):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = loss_fn(model(x).float(), y) / ACCUMULATION_STEPS
        scaler.scale(loss).backward()
        if (step + 1) % ACCUMULATION_STEPS == 0:
            norm = unscale_and_clip(scaler, optimizer, model)
            if math.isnan(norm) or math.isinf(norm):
                scaler.update()
                optimizer.zero_grad(set_to_none=True)
                continue
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)


def main():
    torch.manual_seed(0)
    inputs = torch.randn(GROUPS_PER_EPOCH * ACCUMULATION_STEPS * MICROBATCH_SIZE, 16)
    loader = DataLoader(TensorDataset(inputs, inputs.sum(dim=1, keepdim=True)), batch_size=MICROBATCH_SIZE)
    model = nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    train(model, loader, optimizer, torch.amp.GradScaler("cpu"))
    print("done")


if __name__ == "__main__":
    main()
