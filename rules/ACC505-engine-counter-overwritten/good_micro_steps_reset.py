"""ACC505 good: twin of bad_micro_steps_reset.py.

engine.step() runs after every microbatch and the engine keeps its own counters; the
loop counts its microbatches in a variable of its own.

Parse-only example: it needs DeepSpeed (launch with `deepspeed good_micro_steps_reset.py`),
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
    loss_fn = nn.MSELoss()

    seen = 0
    for epoch in range(EPOCHS):
        for x, y in loader:
            loss = loss_fn(engine(x.to(engine.device)), y.to(engine.device))
            engine.backward(loss)
            engine.step()
            seen += 1
        print(f"epoch {epoch}: {seen} microbatches, updates applied {engine.global_steps}")


if __name__ == "__main__":
    main()
