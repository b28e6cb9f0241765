"""ACC202 bad: `backward(retain_graph=True)` on every microbatch, with no second backward.

Nothing backpropagates through the microbatch's graph again, but `retain_graph=True`
keeps its saved activations after the backward: they stay alive until `loss` is rebound
on the next microbatch, so the next forward runs with the previous microbatch's
activations still in memory (the peak holds two microbatches' worth). Plain PyTorch,
runs on CPU.
"""
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ACCUMULATION_STEPS = 4  # A: microbatches per optimizer update
MICROBATCH_SIZE = 8
GROUPS_PER_EPOCH = 3
EPOCHS = 2


def make_loader():
    inputs = torch.randn(GROUPS_PER_EPOCH * ACCUMULATION_STEPS * MICROBATCH_SIZE, 16)
    targets = inputs.sum(dim=1, keepdim=True)
    return DataLoader(TensorDataset(inputs, targets), batch_size=MICROBATCH_SIZE, shuffle=True)


def main():
    torch.manual_seed(0)
    loader = make_loader()
    assert len(loader) % ACCUMULATION_STEPS == 0  # no partial final group
    model = nn.Sequential(nn.Linear(16, 256), nn.ReLU(), nn.Linear(256, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.MSELoss()

    for epoch in range(EPOCHS):
        for i, (x, y) in enumerate(loader):
            loss = loss_fn(model(x), y) / ACCUMULATION_STEPS
            loss.backward(retain_graph=True)  # expect: ACC202
            if (i + 1) % ACCUMULATION_STEPS == 0:
                optimizer.step()
                optimizer.zero_grad()
        print(f"epoch {epoch}: last microbatch loss {loss.item() * ACCUMULATION_STEPS:.4f}")


if __name__ == "__main__":
    main()
