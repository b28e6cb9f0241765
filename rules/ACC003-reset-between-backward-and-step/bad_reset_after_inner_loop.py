"""ACC003 bad: model.zero_grad(set_to_none=True) between the inner microbatch loop and the update.

The group's microbatches are backpropagated in an inner loop; the reset that follows it
sets every .grad to None, so optimizer.step() skips every parameter and no update is
ever applied. Plain PyTorch, runs on CPU.
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
    model = nn.Linear(16, 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loss_fn = nn.MSELoss()

    for epoch in range(EPOCHS):
        microbatches = list(loader)
        epoch_loss = 0.0
        for start in range(0, len(microbatches), ACCUMULATION_STEPS):
            group = microbatches[start:start + ACCUMULATION_STEPS]
            for x, y in group:
                loss = loss_fn(model(x), y) / len(group)
                loss.backward()
                epoch_loss += loss.item()
            model.zero_grad(set_to_none=True)  # expect: ACC003
            optimizer.step()
        print(f"epoch {epoch}: mean group loss {epoch_loss / GROUPS_PER_EPOCH:.4f}")


if __name__ == "__main__":
    main()
