"""ACC902 good: twin of bad_step_counts_microbatches.py.

`global_step` advances with the optimizer update, so the logged curve puts the 6 updates
at x = 1, ..., 6; the microbatch index keeps a name that says what it counts. Plain
PyTorch, runs on CPU.
"""
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ACCUMULATION_STEPS = 4  # A: microbatches per optimizer update
MICROBATCH_SIZE = 8
GROUPS_PER_EPOCH = 3
EPOCHS = 2


class CurveLog:
    """A stand-in for TensorBoard's SummaryWriter: add_scalar(tag, value, global_step)."""

    def __init__(self):
        self.points = []

    def add_scalar(self, tag, value, global_step):
        self.points.append((tag, global_step, round(value, 4)))


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
    writer = CurveLog()

    global_step = 0  # optimizer updates
    for epoch in range(EPOCHS):
        for microbatch, (x, y) in enumerate(loader):
            loss = loss_fn(model(x), y) / ACCUMULATION_STEPS
            loss.backward()
            if (microbatch + 1) % ACCUMULATION_STEPS == 0:
                optimizer.step()
                optimizer.zero_grad()
                global_step += 1
                writer.add_scalar("train/loss", loss.item() * ACCUMULATION_STEPS, global_step)
    print(f"x positions of the logged updates: {[step for _, step, _ in writer.points]}")


if __name__ == "__main__":
    main()
