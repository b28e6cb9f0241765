"""ACC503 good: TODO: one line on what this loop does right.

Plain PyTorch, runs on CPU.
"""
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ACCUMULATION_STEPS = 4  # A: microbatches per optimizer update
MICROBATCH_SIZE = 8
GROUPS_PER_EPOCH = 3


def main():
    torch.manual_seed(0)
    inputs = torch.randn(GROUPS_PER_EPOCH * ACCUMULATION_STEPS * MICROBATCH_SIZE, 16)
    loader = DataLoader(TensorDataset(inputs, inputs.sum(dim=1, keepdim=True)), batch_size=MICROBATCH_SIZE)
    model = nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for i, (x, y) in enumerate(loader):
        loss = nn.functional.mse_loss(model(x), y) / ACCUMULATION_STEPS
        loss.backward()
        if (i + 1) % ACCUMULATION_STEPS == 0:
            optimizer.step()
            optimizer.zero_grad()


if __name__ == "__main__":
    main()
