"""ACC004 bad: an mmengine ``OptimWrapper`` configured to accumulate, stepped by hand on every iteration.

Only ``update_params`` counts the microbatches against ``accumulative_counts``; the wrapper's
own ``backward()``, ``step()`` and ``zero_grad()`` do what they say on every call. Calling them
on every iteration updates on every microbatch: the configured accumulation does nothing.
Runs on CPU when `mmengine` is installed.
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
        loss = nn.functional.mse_loss(model(x), y)
        optim_wrapper.backward(loss)
        optim_wrapper.step()  # expect: ACC004
        optim_wrapper.zero_grad()


if __name__ == "__main__":
    main()
