"""ACC101 bad: a loss divided by A before mmengine's ``OptimWrapper.update_params``.

``OptimWrapper(optimizer, accumulative_counts=A)`` counts the microbatches itself:
``update_params(loss)`` divides the loss by A, backpropagates, and steps and resets on every
A-th call. Dividing by A again makes every update A times too small. Runs on CPU when
`mmengine` is installed.
"""
import torch
from mmengine.optim import OptimWrapper
from torch import nn

ACCUMULATION_STEPS = 4  # A: microbatches per optimizer update
MICROBATCH_SIZE = 8
GROUPS_PER_EPOCH = 3


def main():
    torch.manual_seed(0)
    model = nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    optim_wrapper = OptimWrapper(optimizer, accumulative_counts=ACCUMULATION_STEPS)
    inputs = torch.randn(GROUPS_PER_EPOCH * ACCUMULATION_STEPS * MICROBATCH_SIZE, 16)
    targets = inputs.sum(dim=1, keepdim=True)
    for x, y in zip(inputs.split(MICROBATCH_SIZE), targets.split(MICROBATCH_SIZE)):
        loss = nn.functional.mse_loss(model(x), y) / ACCUMULATION_STEPS  # expect: ACC101
        optim_wrapper.update_params(loss)


if __name__ == "__main__":
    main()
