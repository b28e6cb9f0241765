"""ACC004 good: the pytorch-ignite process function steps on the last iteration of every group.

``engine.state.iteration`` is 1-based (ignite 0.5.5 increments it before calling the process
function), so ``iteration % A == 0`` is true on the A-th, 2A-th, ... microbatch.
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
        if engine.state.iteration % ACCUMULATION_STEPS == 0:
            optimizer.step()
            optimizer.zero_grad()
        return loss.item()

    Engine(update).run(loader, max_epochs=1)


if __name__ == "__main__":
    main()
