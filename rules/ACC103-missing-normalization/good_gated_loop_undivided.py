"""ACC103 good: twin of bad_gated_loop_undivided.py.

Each microbatch's loss is divided by A = 4 before its backward, so the accumulated
gradient is the gradient of the group's mean loss and the configured learning rate is
the one applied, whatever A is. Plain PyTorch, runs on CPU.
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
        for i, (x, y) in enumerate(loader):
            loss = loss_fn(model(x), y) / ACCUMULATION_STEPS
            loss.backward()
            if (i + 1) % ACCUMULATION_STEPS == 0:
                optimizer.step()
                optimizer.zero_grad()
        print(f"epoch {epoch}: last microbatch loss {loss.item() * ACCUMULATION_STEPS:.4f}")


if __name__ == "__main__":
    main()
