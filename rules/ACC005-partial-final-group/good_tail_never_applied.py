"""ACC005 good: twin of bad_tail_never_applied.py.

The update test also fires on the epoch's last microbatch, and each loss is divided by
the size of its own group (4, 4, 4, then 2): the 2 leftover microbatches form a last
update of their own, weighted like any other group, and nothing is left in `.grad` at
the end of an epoch. Plain PyTorch, runs on CPU.
"""
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ACCUMULATION_STEPS = 4  # A: microbatches per optimizer update
MICROBATCH_SIZE = 8
MICROBATCHES_PER_EPOCH = 14  # 3 full groups of A, then 2 microbatches left over
EPOCHS = 2


def make_loader():
    inputs = torch.randn(MICROBATCHES_PER_EPOCH * MICROBATCH_SIZE, 16)
    targets = inputs.sum(dim=1, keepdim=True)
    return DataLoader(TensorDataset(inputs, targets), batch_size=MICROBATCH_SIZE, shuffle=True)


def main():
    torch.manual_seed(0)
    loader = make_loader()
    full_groups = len(loader) // ACCUMULATION_STEPS
    print(f"{len(loader)} microbatches per epoch: {full_groups} full groups of {ACCUMULATION_STEPS}")
    model = nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.MSELoss()

    pending = 0  # microbatches backpropagated since the last optimizer update
    applied = []  # microbatches that reached each optimizer update
    for epoch in range(EPOCHS):
        for i, (x, y) in enumerate(loader):
            group_start = i - i % ACCUMULATION_STEPS
            group_size = min(ACCUMULATION_STEPS, len(loader) - group_start)  # the tail's true size
            loss = loss_fn(model(x), y) / group_size
            loss.backward()
            pending += 1
            if (i + 1) % ACCUMULATION_STEPS == 0 or (i + 1) == len(loader):
                optimizer.step()
                optimizer.zero_grad()
                applied.append(pending)
                pending = 0
        print(f"epoch {epoch}: last microbatch loss {loss.item() * group_size:.4f}")
    print(f"microbatches per optimizer update: {applied}")
    print(f"microbatches backpropagated but never applied: {pending}")


if __name__ == "__main__":
    main()
