"""ACC103 bad: Lightning Fabric loop with hand-gated updates and an undivided loss.

`fabric.backward(loss)` does not divide by anything (Fabric has no accumulation
setting): with the update every A = 4 microbatches, the accumulated gradient is 4 times
the group mean. `no_backward_sync` covers forward and backward of the accumulating
microbatches, as it should. Runs on CPU when `lightning` is installed (not a dependency
of the test environment: there the catalogue only parses it). (ACC103 is off by
default: enable it with `--extend-select ACC103`.)
"""
import lightning as L
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
    fabric = L.Fabric(accelerator="cpu", devices=1)
    loader = make_loader()
    assert len(loader) % ACCUMULATION_STEPS == 0  # no partial final group
    model = nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model, optimizer = fabric.setup(model, optimizer)
    loader = fabric.setup_dataloaders(loader)
    loss_fn = nn.MSELoss()

    for epoch in range(EPOCHS):
        for i, (x, y) in enumerate(loader):
            is_accumulating = (i + 1) % ACCUMULATION_STEPS != 0
            with fabric.no_backward_sync(model, enabled=is_accumulating):
                loss = loss_fn(model(x), y)
                fabric.backward(loss)  # expect: ACC103
            if not is_accumulating:
                optimizer.step()
                optimizer.zero_grad()
        print(f"epoch {epoch}: last microbatch loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
