"""ACC305 good: twin of bad_horizon_times_accumulation.py.

The warmup is given in optimizer updates, the unit in which the scheduler is stepped:
it reaches the peak learning rate after WARMUP_UPDATES updates. Plain PyTorch, runs on CPU.
"""
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ACCUMULATION_STEPS = 4  # A: microbatches per optimizer update
MICROBATCH_SIZE = 8
MAX_UPDATES = 8
WARMUP_UPDATES = 2


def make_loader():
    inputs = torch.randn(MAX_UPDATES * ACCUMULATION_STEPS * MICROBATCH_SIZE, 16)
    targets = inputs.sum(dim=1, keepdim=True)
    return DataLoader(TensorDataset(inputs, targets), batch_size=MICROBATCH_SIZE, shuffle=True)


def main():
    torch.manual_seed(0)
    loader = make_loader()
    assert len(loader) % ACCUMULATION_STEPS == 0  # no partial final group
    model = nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    warmup = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.1, total_iters=WARMUP_UPDATES)
    loss_fn = nn.MSELoss()

    update_lrs = []  # learning rate used by each optimizer update
    for i, (x, y) in enumerate(loader):
        loss = loss_fn(model(x), y) / ACCUMULATION_STEPS
        loss.backward()
        if (i + 1) % ACCUMULATION_STEPS == 0:
            update_lrs.append(optimizer.param_groups[0]["lr"])
            optimizer.step()
            warmup.step()
            optimizer.zero_grad()
    print(f"learning rates of the {len(update_lrs)} updates: {[round(lr, 4) for lr in update_lrs]}")


if __name__ == "__main__":
    main()
