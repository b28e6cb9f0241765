"""ACC307 bad: a summed token loss, then the gradients divided by the microbatch's token count
after every backward, while the optimizer update runs once per group.

Each division also shrinks what the earlier microbatches of the group left in `.grad`, so
microbatch k of the group is divided by the token counts of microbatches k..A. Plain PyTorch,
runs on CPU; it prints the relative weight of each microbatch in the first update.
"""
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ACCUMULATION_STEPS = 4  # A: microbatches per optimizer update
MICROBATCH_SIZE = 8
GROUPS_PER_EPOCH = 3


def divide_grads_(params, denominator):
    for p in params:
        if p.grad is not None:
            p.grad.div_(denominator)


def main():
    torch.manual_seed(0)
    inputs = torch.randn(GROUPS_PER_EPOCH * ACCUMULATION_STEPS * MICROBATCH_SIZE, 16)
    loader = DataLoader(TensorDataset(inputs, inputs.sum(dim=1, keepdim=True)), batch_size=MICROBATCH_SIZE)
    model = nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    weights = []  # weight of each microbatch of the first group in its update, relative to the last
    for i, (x, y) in enumerate(loader):
        loss = nn.functional.mse_loss(model(x), y, reduction="sum")
        loss.backward()
        tokens = float(x.shape[0])
        divide_grads_(model.parameters(), tokens)  # expect: ACC307
        if i < ACCUMULATION_STEPS:
            weights = [w / tokens for w in weights] + [1.0 / tokens]
        if (i + 1) % ACCUMULATION_STEPS == 0:
            optimizer.step()
            optimizer.zero_grad()
    relative = [round(w / weights[-1], 6) for w in weights]
    print(f"first update: relative weight of microbatches 1..{ACCUMULATION_STEPS}: {relative} (wanted: all 1.0)")


if __name__ == "__main__":
    main()
