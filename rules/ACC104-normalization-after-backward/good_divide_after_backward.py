"""ACC104 good: twin of bad_divide_after_backward.py.

The division comes first and the divided loss is the one backpropagated: the update
applies the gradient of the group's mean loss, and the logged group loss is that mean.
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

    for epoch in range(EPOCHS):
        group_loss = 0.0
        for i, (x, y) in enumerate(loader):
            loss = loss_fn(model(x), y)
            loss = loss / ACCUMULATION_STEPS
            loss.backward()
            group_loss += loss.item()
            if (i + 1) % ACCUMULATION_STEPS == 0:
                optimizer.step()
                optimizer.zero_grad()
                print(f"epoch {epoch}: group loss {group_loss:.4f}")
                group_loss = 0.0


if __name__ == "__main__":
    main()
