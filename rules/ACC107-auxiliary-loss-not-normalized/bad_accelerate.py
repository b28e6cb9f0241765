"""ACC107 bad: Accelerate without its own accumulation; the loop divides the task loss by A by
hand and adds an L2 penalty on every microbatch.

Accelerate on CPU. The Accelerator is not told A, so `accelerator.backward` divides nothing:
the penalty weighs A × L2_WEIGHT in each update.
"""
import torch
from accelerate import Accelerator
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

ACCUMULATION_STEPS = 4  # A: microbatches per optimizer update
MICROBATCH_SIZE = 8
GROUPS_PER_EPOCH = 3
L2_WEIGHT = 1e-4


def main():
    torch.manual_seed(0)
    accelerator = Accelerator(cpu=True)
    inputs = torch.randn(GROUPS_PER_EPOCH * ACCUMULATION_STEPS * MICROBATCH_SIZE, 16)
    loader = DataLoader(TensorDataset(inputs, inputs.sum(dim=1, keepdim=True)), batch_size=MICROBATCH_SIZE)
    model = nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for i, (x, y) in enumerate(loader):
        task = F.mse_loss(model(x), y)
        penalty = sum(p.pow(2).sum() for p in model.parameters())
        accelerator.backward(task / ACCUMULATION_STEPS + L2_WEIGHT * penalty)  # expect: ACC107
        if (i + 1) % ACCUMULATION_STEPS == 0:
            optimizer.step()
            optimizer.zero_grad()


if __name__ == "__main__":
    main()
