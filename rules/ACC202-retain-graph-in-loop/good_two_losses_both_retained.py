"""ACC202 good: twin of bad_two_losses_both_retained.py.

Only the first of the two backwards through the shared graph retains it; the last one
frees the saved activations as it goes. (Backpropagating `loss_a + loss_b` once would
need no `retain_graph` at all.) Plain PyTorch, runs on CPU.
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
    targets = torch.stack([inputs.sum(dim=1), inputs[:, :8].sum(dim=1)], dim=1)  # two tasks
    return DataLoader(TensorDataset(inputs, targets), batch_size=MICROBATCH_SIZE, shuffle=True)


def main():
    torch.manual_seed(0)
    loader = make_loader()
    assert len(loader) % ACCUMULATION_STEPS == 0  # no partial final group
    model = nn.Sequential(nn.Linear(16, 256), nn.ReLU(), nn.Linear(256, 2))  # shared trunk, two outputs
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.MSELoss()

    for epoch in range(EPOCHS):
        for i, (x, y) in enumerate(loader):
            output = model(x)
            loss_a = loss_fn(output[:, 0], y[:, 0]) / ACCUMULATION_STEPS
            loss_b = loss_fn(output[:, 1], y[:, 1]) / ACCUMULATION_STEPS
            loss_a.backward(retain_graph=True)  # loss_b still needs the graph
            loss_b.backward()  # the last backward through the graph frees it
            if (i + 1) % ACCUMULATION_STEPS == 0:
                optimizer.step()
                optimizer.zero_grad()
        print(f"epoch {epoch}: last microbatch losses {loss_a.item() * ACCUMULATION_STEPS:.4f}, "
              f"{loss_b.item() * ACCUMULATION_STEPS:.4f}")


if __name__ == "__main__":
    main()
