"""ACC004 bad: a pytorch-ignite process function that divides the loss by A but steps on every iteration.

ignite's ``Engine`` calls the process function once per batch (one microbatch): the loop is
the framework's, its body is the user's. Stepping there unconditionally applies an update per
microbatch with a gradient A times too small, so the accumulation does nothing but shrink
the learning rate. Runs on CPU when `pytorch-ignite` is installed.
"""
import torch
from ignite.engine import Engine
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ACCUMULATION_STEPS = 4  # A: microbatches per optimizer update
MICROBATCH_SIZE = 8
GROUPS_PER_EPOCH = 3


def main():
    torch.manual_seed(0)
    model = nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    inputs = torch.randn(GROUPS_PER_EPOCH * ACCUMULATION_STEPS * MICROBATCH_SIZE, 16)
    loader = DataLoader(TensorDataset(inputs, inputs.sum(dim=1, keepdim=True)), batch_size=MICROBATCH_SIZE)

    def update(engine, batch):
        x, y = batch
        loss = nn.functional.mse_loss(model(x), y) / ACCUMULATION_STEPS
        loss.backward()
        optimizer.step()  # expect: ACC004
        optimizer.zero_grad()
        return loss.item()

    Engine(update).run(loader, max_epochs=1)


if __name__ == "__main__":
    main()
