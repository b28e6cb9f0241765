"""ACC004 bad: the loss is divided by A, but the optimizer updates on every microbatch.

The update is not gated, so A updates happen per intended group, each on one microbatch
with its gradient divided by A: no accumulation at all, and the learning rate is
effectively lr / A. Plain PyTorch, runs on CPU.
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

    for epoch in range(EPOCHS):
        epoch_loss = 0.0
        for x, y in loader:
            loss = loss_fn(model(x), y) / ACCUMULATION_STEPS
            loss.backward()
            epoch_loss += loss.item()
            optimizer.step()  # expect: ACC004
            optimizer.zero_grad()
        print(f"epoch {epoch}: mean group loss {epoch_loss / GROUPS_PER_EPOCH:.4f}")


if __name__ == "__main__":
    main()
