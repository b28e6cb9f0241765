"""ACC903 bad: examples per second logged at each optimizer update from the last microbatch's
size over the time of the whole group.

The group processed A microbatches in that time, so the figure is A times too small. Plain
PyTorch, runs on CPU; it prints the logged rate next to the true one.
"""
import time

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
    seen = 0
    t0 = time.perf_counter()
    for i, (x, y) in enumerate(loader):
        n_examples = x.shape[0]
        loss = nn.functional.mse_loss(model(x), y) / ACCUMULATION_STEPS
        loss.backward()
        seen += n_examples
        if (i + 1) % ACCUMULATION_STEPS == 0:
            optimizer.step()
            optimizer.zero_grad()
            elapsed = time.perf_counter() - t0
            examples_per_sec = n_examples / elapsed  # expect: ACC903
            print(f"logged {examples_per_sec:.0f} examples/s, true {seen / elapsed:.0f} examples/s "
                  f"(ratio {seen / n_examples:.0f} = A)")
            seen = 0
            t0 = time.perf_counter()


if __name__ == "__main__":
    main()
