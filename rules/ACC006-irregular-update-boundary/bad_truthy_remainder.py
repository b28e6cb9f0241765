"""ACC006 bad: `if batches_done % A:` — the remainder used as a truth value.

The test is true on A-1 of every A microbatches: 18 updates instead of 6, groups of 2,
1 and 1 microbatches, each still divided by A (and with A = 1 it never updates at all).
Plain PyTorch, runs on CPU.
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
    loss_fn = nn.MSELoss()

    group_sizes = []  # microbatches that reached each optimizer update
    in_group = 0
    for epoch in range(EPOCHS):
        for i, (x, y) in enumerate(loader):
            batches_done = epoch * len(loader) + i
            loss = loss_fn(model(x), y) / ACCUMULATION_STEPS
            loss.backward()
            in_group += 1
            if batches_done % ACCUMULATION_STEPS:  # expect: ACC006
                optimizer.step()
                optimizer.zero_grad()
                group_sizes.append(in_group)
                in_group = 0
        print(f"epoch {epoch}: last microbatch loss {loss.item() * ACCUMULATION_STEPS:.4f}")
    print(f"{len(group_sizes)} updates, group sizes {group_sizes}")


if __name__ == "__main__":
    main()
