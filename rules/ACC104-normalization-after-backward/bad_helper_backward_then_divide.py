"""ACC104 bad: a helper runs the microbatch's backward and returns the loss; the caller
divides what it gets back by A.

`train_microbatch` has already called `loss.backward()` on the undivided loss, so the
caller's `/ ACCUMULATION_STEPS` only changes the number that is logged: the gradients of
the 4 microbatches add up to 4 times the gradient of the group's mean loss. Plain
PyTorch, runs on CPU.
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


def train_microbatch(model, loss_fn, x, y):
    loss = loss_fn(model(x), y)
    loss.backward()
    return loss


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
            loss = train_microbatch(model, loss_fn, x, y) / ACCUMULATION_STEPS  # expect: ACC104
            group_loss += loss.item()
            if (i + 1) % ACCUMULATION_STEPS == 0:
                optimizer.step()
                optimizer.zero_grad()
                print(f"epoch {epoch}: group loss {group_loss:.4f}")
                group_loss = 0.0


if __name__ == "__main__":
    main()
