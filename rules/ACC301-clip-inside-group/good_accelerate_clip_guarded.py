"""ACC301 good: twin of bad_accelerate_clip_unguarded.py.

The clip sits under `if accelerator.sync_gradients:` inside accumulate(): it runs once
per group, on the microbatch whose backward completes the group, right before the
prepared optimizer's real step. Runs on CPU when `accelerate` is installed.
"""
import torch
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ACCUMULATION_STEPS = 4  # A: microbatches per optimizer update
MICROBATCH_SIZE = 8
GROUPS_PER_EPOCH = 3
MAX_GRAD_NORM = 1.0


def make_loader():
    inputs = torch.randn(GROUPS_PER_EPOCH * ACCUMULATION_STEPS * MICROBATCH_SIZE, 16)
    targets = 3.0 * inputs.sum(dim=1, keepdim=True)
    return DataLoader(TensorDataset(inputs, targets), batch_size=MICROBATCH_SIZE, shuffle=True)


def main():
    accelerator = Accelerator(gradient_accumulation_steps=ACCUMULATION_STEPS, cpu=True)
    torch.manual_seed(0)
    loader = make_loader()
    model = nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.MSELoss()
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    assert len(loader) % ACCUMULATION_STEPS == 0  # no partial final group

    clips = 0
    for x, y in loader:
        with accelerator.accumulate(model):
            loss = loss_fn(model(x), y)
            accelerator.backward(loss)
            if accelerator.sync_gradients:
                accelerator.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)
                clips += 1
            optimizer.step()
            optimizer.zero_grad()
    updates = len(loader) // ACCUMULATION_STEPS
    accelerator.print(f"{clips} clips for {updates} optimizer updates ({clips // updates} per update, wanted 1)")


if __name__ == "__main__":
    main()
