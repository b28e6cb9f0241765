"""ACC501 bad: Accelerator(gradient_accumulation_steps=A), but accumulate() is never entered.

accelerator.backward() divides every loss by A, yet outside accumulate() the sync flag
stays True and the prepared optimizer is not gated: it updates on every microbatch
(observed: 4 updates in 4 microbatches), each with 1/A of the gradient. Runs on CPU
when `accelerate` is installed.
"""
import torch
from accelerate import Accelerator
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
    accelerator = Accelerator(gradient_accumulation_steps=ACCUMULATION_STEPS, cpu=True)
    torch.manual_seed(0)
    loader = make_loader()
    model = nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.MSELoss()
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    assert len(loader) % ACCUMULATION_STEPS == 0  # no partial final group

    for epoch in range(EPOCHS):
        epoch_loss = 0.0
        for x, y in loader:
            loss = loss_fn(model(x), y)
            accelerator.backward(loss)  # divides by ACCUMULATION_STEPS
            optimizer.step()  # expect: ACC501
            optimizer.zero_grad()
            epoch_loss += loss.item()
        accelerator.print(f"epoch {epoch}: mean microbatch loss {epoch_loss / len(loader):.4f}")


if __name__ == "__main__":
    main()
