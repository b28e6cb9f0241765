"""ACC103 bad: a gated accumulation loop that never divides the loss by A.

Each microbatch backpropagates its full mean loss and the update runs every A = 4
microbatches, so `.grad` holds the *sum* of 4 microbatch gradients: 4 times the
gradient of the group's mean loss. With SGD that is a learning rate 4 times the one
configured, and it changes again whenever A is changed to fit memory. Plain PyTorch,
runs on CPU. (ACC103 is off by default: enable it with `--extend-select ACC103`.)
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
    model = nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.MSELoss()

    for epoch in range(EPOCHS):
        for i, (x, y) in enumerate(loader):
            loss = loss_fn(model(x), y)
            loss.backward()  # expect: ACC103
            if (i + 1) % ACCUMULATION_STEPS == 0:
                optimizer.step()
                optimizer.zero_grad()
        print(f"epoch {epoch}: last microbatch loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
