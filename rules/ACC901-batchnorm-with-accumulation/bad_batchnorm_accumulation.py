"""ACC901 (info): a BatchNorm layer in a model trained with gradient accumulation.

BatchNorm normalizes each forward pass with that microbatch's own mean and variance, and
updates its running estimates once per microbatch: with m = 4 and A = 4 the accumulated
gradient is not the gradient of one batch of 16 (the script prints the relative
difference, 0.42 here; 1e-07 for the LayerNorm twin). Runs on CPU.
"""
import torch
from torch import nn

ACCUMULATION_STEPS = 4  # A: microbatches per optimizer update
MICROBATCH_SIZE = 4
GROUPS = 3


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(8, 16),
        nn.BatchNorm1d(16),  # expect: ACC901
        nn.ReLU(),
        nn.Linear(16, 1),
    )


def gradient(model):
    return torch.cat([p.grad.flatten() for p in model.parameters()])


def main():
    torch.manual_seed(1)
    inputs = torch.randn(GROUPS * ACCUMULATION_STEPS * MICROBATCH_SIZE, 8) * 3
    inputs += torch.linspace(-2, 2, len(inputs)).unsqueeze(1)
    targets = inputs.sum(dim=1, keepdim=True)
    microbatches = list(zip(inputs.split(MICROBATCH_SIZE), targets.split(MICROBATCH_SIZE)))

    reference = make_model()  # one batch of m x A, A = 1
    group = slice(0, ACCUMULATION_STEPS * MICROBATCH_SIZE)
    nn.functional.mse_loss(reference(inputs[group]), targets[group]).backward()

    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for i, (x, y) in enumerate(microbatches):
        loss = nn.functional.mse_loss(model(x), y) / ACCUMULATION_STEPS
        loss.backward()
        if (i + 1) % ACCUMULATION_STEPS == 0:
            if i + 1 == ACCUMULATION_STEPS:
                difference = (gradient(model) - gradient(reference)).norm() / gradient(reference).norm()
                print(f"first update: relative gradient difference to one batch of m x A = {difference:.2g}")
            optimizer.step()
            optimizer.zero_grad()


if __name__ == "__main__":
    main()
