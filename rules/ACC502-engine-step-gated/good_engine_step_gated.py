"""ACC502 good: twin of bad_engine_step_gated.py.

engine.step() after every engine.backward(): the engine advances its micro-step counter
each time and applies the update (and the reset) on every A-th microbatch.

Parse-only example: it needs DeepSpeed (launch with `deepspeed good_engine_step_gated.py`),
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
            engine.backward(loss)
            engine.step()  # every microbatch: the engine decides the boundary
            epoch_loss += loss.item()
        print(f"epoch {epoch}: mean microbatch loss {epoch_loss / len(loader):.4f}")


if __name__ == "__main__":
    main()
