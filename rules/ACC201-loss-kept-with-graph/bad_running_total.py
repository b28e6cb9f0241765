"""ACC201 bad: `epoch_loss += loss` keeps a tensor sum with its graph.

Starting from the float 0.0, `+= loss` turns epoch_loss into a tensor whose grad_fn
chains through every microbatch of the epoch (one AddBackward node per microbatch, each
pinning that microbatch's graph). Plain PyTorch, runs on CPU.
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
        for i, (x, y) in enumerate(loader):
            loss = loss_fn(model(x), y) / ACCUMULATION_STEPS
            loss.backward()
            epoch_loss += loss  # expect: ACC201
            if (i + 1) % ACCUMULATION_STEPS == 0:
                optimizer.step()
                optimizer.zero_grad()
        print(f"epoch {epoch}: mean group loss {epoch_loss.item() / GROUPS_PER_EPOCH:.4f}")


if __name__ == "__main__":
    main()
