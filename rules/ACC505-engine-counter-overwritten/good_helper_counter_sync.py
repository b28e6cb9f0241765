"""ACC505 good: twin of bad_helper_counter_sync.py.

The counters are restored once, from a checkpoint, before the loop (what
`engine.load_checkpoint` does itself); inside the loop the engine keeps them.

Parse-only example: it needs DeepSpeed (launch with `deepspeed good_helper_counter_sync.py`),
which the CPU test environment does not install. The catalogue tests only parse it.
"""
import deepspeed
import torch
from torch import nn
from torch.utils.data import TensorDataset

ACCUMULATION_STEPS = 4  # A: microbatches per optimizer update
MICROBATCH_SIZE = 8
GROUPS_PER_EPOCH = 3


def restore_counters(model_engine, state):
    model_engine.global_steps = state["global_steps"]
    model_engine.micro_steps = state["global_steps"] * ACCUMULATION_STEPS


def train(model_engine, loader, state):
    loss_fn = nn.MSELoss()
    restore_counters(model_engine, state)
    for x, y in loader:
        loss = loss_fn(model_engine(x), y)
        model_engine.backward(loss)
        model_engine.step()


def main():
    torch.manual_seed(0)
    inputs = torch.randn(GROUPS_PER_EPOCH * ACCUMULATION_STEPS * MICROBATCH_SIZE, 16)
    dataset = TensorDataset(inputs, inputs.sum(dim=1, keepdim=True))
    model = nn.Linear(16, 1)
    config = {"train_micro_batch_size_per_gpu": MICROBATCH_SIZE, "gradient_accumulation_steps": ACCUMULATION_STEPS}
    model_engine, _, loader, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                                      training_data=dataset, config=config)
    train(model_engine, loader, {"global_steps": 0})


if __name__ == "__main__":
    main()
