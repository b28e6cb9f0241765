"""ACC301 bad: clip_grad_norm_ after every microbatch backward, optimizer update once per group.

The clip acts on the partial sum of the group's gradient: the first microbatches are
clipped again and again, the last one not at all, so the update applies a gradient that
is neither the accumulated gradient nor its clipped version. Plain PyTorch, runs on CPU;
it prints the applied first-update gradient next to the correctly clipped one.
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
    factors = []  # clip factor of each microbatch of the first group
    for i, (x, y) in enumerate(loader):
        loss = loss_fn(model(x), y) / ACCUMULATION_STEPS
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)  # expect: ACC301
        factors.append(min(1.0, MAX_GRAD_NORM / (float(norm) + 1e-6)))
        if (i + 1) % ACCUMULATION_STEPS == 0:
            applied.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
            optimizer.step()
            optimizer.zero_grad()
    # microbatch k of the first group is multiplied by the clip factors of microbatches k..A
    weights = [torch.tensor(factors[k:ACCUMULATION_STEPS]).prod().item() for k in range(ACCUMULATION_STEPS)]
    relative = [round(w / weights[-1], 3) for w in weights]
    cosine = torch.nn.functional.cosine_similarity(applied[0], wanted, dim=0).item()
    print(f"first update: relative weight of microbatches 1..{ACCUMULATION_STEPS}: {relative} (wanted: all 1.0)")
    print(f"first update: cosine between applied and correctly clipped gradient {cosine:.3f}")


if __name__ == "__main__":
    main()
