"""ACC107 good: Accelerate owns the accumulation and divides the whole backpropagated loss by A,
task loss and L2 penalty alike.

Accelerate on CPU.
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
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=ACCUMULATION_STEPS)
    inputs = torch.randn(GROUPS_PER_EPOCH * ACCUMULATION_STEPS * MICROBATCH_SIZE, 16)
    loader = DataLoader(TensorDataset(inputs, inputs.sum(dim=1, keepdim=True)), batch_size=MICROBATCH_SIZE)
    model = nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for x, y in loader:
        with accelerator.accumulate(model):
            task = F.mse_loss(model(x), y)
            penalty = sum(p.pow(2).sum() for p in model.parameters())
            accelerator.backward(task + L2_WEIGHT * penalty)
            optimizer.step()
            optimizer.zero_grad()


if __name__ == "__main__":
    main()
