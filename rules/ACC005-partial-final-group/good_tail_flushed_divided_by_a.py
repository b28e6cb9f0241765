"""ACC005 good: twin of bad_tail_flushed_divided_by_a.py.

Same tail clause, but the microbatches of the last partial group are divided by the
group's true size (`len(loader) % A` = 2), so the tail update applies the mean gradient
of its microbatches, like every full group. Plain PyTorch, runs on CPU.
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
    tail_size = len(loader) % ACCUMULATION_STEPS  # microbatches in the last, partial group
    tail_start = len(loader) - tail_size
    model = nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.MSELoss()

    updates = 0
    for epoch in range(EPOCHS):
        for i, (x, y) in enumerate(loader):
            group_size = tail_size if i >= tail_start else ACCUMULATION_STEPS
            loss = loss_fn(model(x), y) / group_size
            loss.backward()
            if (i + 1) % ACCUMULATION_STEPS == 0 or (i + 1) == len(loader):
                optimizer.step()
                optimizer.zero_grad()
                updates += 1
        print(f"epoch {epoch}: last microbatch loss {loss.item() * group_size:.4f}")
    print(f"optimizer updates: {updates}")


if __name__ == "__main__":
    main()
