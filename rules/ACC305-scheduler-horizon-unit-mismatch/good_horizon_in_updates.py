"""ACC305 good: twin of bad_horizon_in_microbatches.py.

The horizon counts optimizer updates, `ceil(len(loader) / A) * EPOCHS` (6), the unit in
which the scheduler is stepped: the cosine decay ends with the last update. Plain
PyTorch, runs on CPU.
"""
import math

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ACCUMULATION_STEPS = 4  # A: microbatches per optimizer update
MICROBATCH_SIZE = 8
GROUPS_PER_EPOCH = 3
EPOCHS = 2


def make_loader():
    inputs = torch.randn(GROUPS_PER_EPOCH * ACCUMULATION_STEPS * MICROBATCH_SIZE, 16)
    targets = inputs.sum(dim=1, keepdim=True)
    return DataLoader(TensorDataset(inputs, targets), batch_size=MICROBATCH_SIZE, shuffle=True)


def main():
    torch.manual_seed(0)
    loader = make_loader()
    assert len(loader) % ACCUMULATION_STEPS == 0  # no partial final group
    model = nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    total_updates = EPOCHS * math.ceil(len(loader) / ACCUMULATION_STEPS)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=total_updates)
    loss_fn = nn.MSELoss()

    update_lrs = []  # learning rate used by each optimizer update
    for epoch in range(EPOCHS):
        for i, (x, y) in enumerate(loader):
            loss = loss_fn(model(x), y) / ACCUMULATION_STEPS
            loss.backward()
            if (i + 1) % ACCUMULATION_STEPS == 0:
                update_lrs.append(optimizer.param_groups[0]["lr"])
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
        print(f"epoch {epoch}: last microbatch loss {loss.item() * ACCUMULATION_STEPS:.4f}")
    print(f"learning rates of the {len(update_lrs)} updates: {[round(lr, 4) for lr in update_lrs]}")
    print(f"learning rate at the end of training: {scheduler.get_last_lr()[0]:.4f} (planned: 0)")


if __name__ == "__main__":
    main()
