"""ACC108 good: the validation loss computed without the training 1/A.

`compute_loss` divides by A for the training backward passes only; `evaluate` takes the
microbatch's mean loss itself, so the printed validation loss is the mean over the
validation set whatever A is. Plain PyTorch, runs on CPU.
"""
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

ACCUMULATION_STEPS = 4  # A: microbatches per optimizer update
MICROBATCH_SIZE = 8
GROUPS_PER_EPOCH = 3
EPOCHS = 2


def make_loader(groups):
    inputs = torch.randn(groups * ACCUMULATION_STEPS * MICROBATCH_SIZE, 16)
    return DataLoader(TensorDataset(inputs, inputs.sum(dim=1, keepdim=True)), batch_size=MICROBATCH_SIZE)


def compute_loss(model, x, y):
    """The microbatch's share of the group's mean loss."""
    return F.mse_loss(model(x), y) / ACCUMULATION_STEPS


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    total = 0.0
    for x, y in loader:
        total += F.mse_loss(model(x), y).item()
    model.train()
    return total / len(loader)


def main():
    torch.manual_seed(0)
    train_loader, val_loader = make_loader(GROUPS_PER_EPOCH), make_loader(1)
    model = nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(EPOCHS):
        for i, (x, y) in enumerate(train_loader):
            compute_loss(model, x, y).backward()
            if (i + 1) % ACCUMULATION_STEPS == 0:
                optimizer.step()
                optimizer.zero_grad()
        print(f"epoch {epoch}: validation loss {evaluate(model, val_loader):.4f}")


if __name__ == "__main__":
    main()
