"""ACC301 good: twin of bad_clip_every_microbatch.py.

The clip runs once per group, under the update gate, after the group's last backward:
every microbatch keeps its weight and the update applies the clipped accumulated
gradient (cosine 1.0 with the reference). Plain PyTorch, runs on CPU.
"""
import copy

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ACCUMULATION_STEPS = 4  # A: microbatches per optimizer update
MICROBATCH_SIZE = 8
GROUPS_PER_EPOCH = 3
MAX_GRAD_NORM = 1.0


def make_loader():
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(GROUPS_PER_EPOCH * ACCUMULATION_STEPS * MICROBATCH_SIZE, 16, generator=generator)
    targets = 3.0 * inputs.sum(dim=1, keepdim=True)
    return DataLoader(TensorDataset(inputs, targets), batch_size=MICROBATCH_SIZE, shuffle=False)


def reference_first_gradient(model, loader, loss_fn):
    """The group's accumulated gradient, clipped once (what the first update should apply),
    computed on a copy: the trained model's gradients stay untouched."""
    model = copy.deepcopy(model)
    for i, (x, y) in enumerate(loader):
        if i == ACCUMULATION_STEPS:
            break
        (loss_fn(model(x), y) / ACCUMULATION_STEPS).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)
    return torch.cat([p.grad.flatten() for p in model.parameters()])


def main():
    torch.manual_seed(0)
    loader = make_loader()
    assert len(loader) % ACCUMULATION_STEPS == 0  # no partial final group
    model = nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.MSELoss()
    wanted = reference_first_gradient(model, loader, loss_fn)

    applied = []  # gradient applied by each optimizer update
    for i, (x, y) in enumerate(loader):
        loss = loss_fn(model(x), y) / ACCUMULATION_STEPS
        loss.backward()
        if (i + 1) % ACCUMULATION_STEPS == 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)
            applied.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
            optimizer.step()
            optimizer.zero_grad()
    cosine = torch.nn.functional.cosine_similarity(applied[0], wanted, dim=0).item()
    print(f"first update: cosine between applied and correctly clipped gradient {cosine:.3f}")


if __name__ == "__main__":
    main()
