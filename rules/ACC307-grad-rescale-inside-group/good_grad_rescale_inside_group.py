"""ACC307 good: a summed token loss, the tokens counted over the group, and the gradients
divided once per group by the group's token count, right before the optimizer update.

Plain PyTorch, runs on CPU; every microbatch enters the update with the same weight.
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
    group_tokens = 0.0
    updates = 0
    for i, (x, y) in enumerate(loader):
        loss = nn.functional.mse_loss(model(x), y, reduction="sum")
        loss.backward()
        group_tokens += float(x.shape[0])
        if (i + 1) % ACCUMULATION_STEPS == 0:
            divide_grads_(model.parameters(), group_tokens)
            optimizer.step()
            optimizer.zero_grad()
            group_tokens = 0.0
            updates += 1
    print(f"{updates} updates, each the mean gradient over its group's {ACCUMULATION_STEPS * MICROBATCH_SIZE} examples")


if __name__ == "__main__":
    main()
