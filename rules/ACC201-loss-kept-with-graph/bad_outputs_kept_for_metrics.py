"""ACC201 bad: model outputs collected for an epoch metric without detach().

Each kept prediction tensor is the model output with its grad_fn: the graph nodes and
the output of every microbatch of the epoch stay alive until the metric is computed.
Plain PyTorch, runs on CPU.
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
        predictions, labels = [], []
        for i, (x, y) in enumerate(loader):
            output = model(x)
            loss = loss_fn(output, y) / ACCUMULATION_STEPS
            loss.backward()
            predictions.append(output)  # expect: ACC201
            labels.append(y)
            if (i + 1) % ACCUMULATION_STEPS == 0:
                optimizer.step()
                optimizer.zero_grad()
        with torch.no_grad():
            epoch_mae = (torch.cat(predictions) - torch.cat(labels)).abs().mean().item()
        print(f"epoch {epoch}: mean absolute error {epoch_mae:.4f}")


if __name__ == "__main__":
    main()
