"""ACC305 bad: the schedule's horizon counts microbatches, the scheduler steps per update.

`T_max = EPOCHS * len(loader)` is the number of microbatches (24), but the scheduler is
stepped once per optimizer update (6 times): training ends a quarter of the way into the
cosine decay, and the learning rate never comes down. Plain PyTorch, runs on CPU.
"""
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
    total_steps = EPOCHS * len(loader)  # microbatches, not optimizer updates
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(
        optimizer, T_max=total_steps  # expect: ACC305
    )
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
