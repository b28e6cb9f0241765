"""ACC007 bad: a weight EMA updated after every microbatch backward, while the optimizer
updates once per group.

The weights do not change inside a group, so the EMA averages the same weights A times per
optimizer update: with decay 0.99 it forgets like an EMA of decay 0.99**A. Plain PyTorch, runs
on CPU; it prints the effective decay per optimizer update.
"""
import copy

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ACCUMULATION_STEPS = 4  # A: microbatches per optimizer update
MICROBATCH_SIZE = 8
GROUPS_PER_EPOCH = 3
DECAY = 0.99


def update_ema(ema_model, model, decay):
    with torch.no_grad():
        for ema_p, p in zip(ema_model.parameters(), model.parameters()):
            ema_p.mul_(decay).add_(p, alpha=1 - decay)


def main():
    torch.manual_seed(0)
    inputs = torch.randn(GROUPS_PER_EPOCH * ACCUMULATION_STEPS * MICROBATCH_SIZE, 16)
    loader = DataLoader(TensorDataset(inputs, inputs.sum(dim=1, keepdim=True)), batch_size=MICROBATCH_SIZE)
    model = nn.Linear(16, 1)
    ema_model = copy.deepcopy(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    ema_calls = updates = 0
    for i, (x, y) in enumerate(loader):
        loss = nn.functional.mse_loss(model(x), y) / ACCUMULATION_STEPS
        loss.backward()
        update_ema(ema_model, model, DECAY)  # expect: ACC007
        ema_calls += 1
        if (i + 1) % ACCUMULATION_STEPS == 0:
            optimizer.step()
            optimizer.zero_grad()
            updates += 1
    per_update = DECAY ** (ema_calls / updates)
    print(f"{ema_calls} EMA updates for {updates} optimizer updates: decay per update {per_update:.4f} "
          f"(wanted {DECAY})")


if __name__ == "__main__":
    main()
