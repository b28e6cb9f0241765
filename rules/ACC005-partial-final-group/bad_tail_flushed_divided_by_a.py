"""ACC005 bad: the last partial group is applied, but its losses are still divided by A.

The update test has the usual tail clause `or (i + 1) == len(loader)`, so the 2
microbatches left after the 3 full groups do get an update — yet each of their losses
is divided by A = 4, not by 2: that update applies half the mean gradient of its
microbatches (r/A = 2/4), a smaller effective learning rate for those examples. Plain
PyTorch, runs on CPU.
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
    model = nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.MSELoss()

    updates = 0
    for epoch in range(EPOCHS):
        for i, (x, y) in enumerate(loader):
            loss = loss_fn(model(x), y) / ACCUMULATION_STEPS
            loss.backward()
            if (i + 1) % ACCUMULATION_STEPS == 0 or (i + 1) == len(loader):  # expect: ACC005
                optimizer.step()
                optimizer.zero_grad()
                updates += 1
        print(f"epoch {epoch}: last microbatch loss {loss.item() * ACCUMULATION_STEPS:.4f}")
    print(f"optimizer updates: {updates}")


if __name__ == "__main__":
    main()
