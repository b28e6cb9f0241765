"""ACC002 good: twin of bad_update_function_no_reset.py.

train_one_update() clears the gradients right after its optimizer update, so each call
applies exactly its own group. Plain PyTorch, runs on CPU.
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


def train_one_update(model, optimizer, loss_fn, microbatches):
    """Backpropagate one group of microbatches, then apply one optimizer update."""
    group_loss = 0.0
    for x, y in microbatches:
        loss = loss_fn(model(x), y) / len(microbatches)
        loss.backward()
        group_loss += loss.item()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return group_loss


def main():
    torch.manual_seed(0)
    loader = make_loader()
    model = nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.MSELoss()

    for epoch in range(EPOCHS):
        microbatches = list(loader)
        losses = [
            train_one_update(model, optimizer, loss_fn, microbatches[start:start + ACCUMULATION_STEPS])
            for start in range(0, len(microbatches), ACCUMULATION_STEPS)
        ]
        print(f"epoch {epoch}: mean group loss {sum(losses) / len(losses):.4f}")


if __name__ == "__main__":
    main()
