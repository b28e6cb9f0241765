"""ACC101 bad: loss divided by A before DeepSpeed's engine.backward().

engine.backward() scales the loss by 1/gradient_accumulation_steps (scale_wrt_gas=True
by default); the manual division makes the update gradient 1/A of the group mean and
makes grad norms depend on A.

Parse-only example: it needs DeepSpeed (launch with `deepspeed bad_deepspeed_backward_divided.py`),
which the CPU test environment does not install. The catalogue tests only parse it.
"""
import deepspeed
import torch
from torch import nn
from torch.utils.data import TensorDataset

ACCUMULATION_STEPS = 4  # A: microbatches per optimizer update
MICROBATCH_SIZE = 8
GROUPS_PER_EPOCH = 3
EPOCHS = 2

DS_CONFIG = {
    "train_micro_batch_size_per_gpu": MICROBATCH_SIZE,
    "gradient_accumulation_steps": ACCUMULATION_STEPS,
}


def make_dataset():
    inputs = torch.randn(GROUPS_PER_EPOCH * ACCUMULATION_STEPS * MICROBATCH_SIZE, 16)
    targets = inputs.sum(dim=1, keepdim=True)
    return TensorDataset(inputs, targets)


def main():
    torch.manual_seed(0)
    model = nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    engine, optimizer, loader, _ = deepspeed.initialize(
        model=model, optimizer=optimizer, training_data=make_dataset(), config=DS_CONFIG
    )
    assert len(loader) % ACCUMULATION_STEPS == 0  # no partial final group
    loss_fn = nn.MSELoss()

    for epoch in range(EPOCHS):
        epoch_loss = 0.0
        for x, y in loader:
            loss = loss_fn(engine(x.to(engine.device)), y.to(engine.device))
            loss = loss / ACCUMULATION_STEPS  # expect: ACC101
            engine.backward(loss)
            engine.step()
            epoch_loss += loss.item()
        print(f"epoch {epoch}: mean group loss {epoch_loss / GROUPS_PER_EPOCH:.4f}")


if __name__ == "__main__":
    main()
