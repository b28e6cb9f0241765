"""ACC505 bad: a helper, called once per group, sets the engine's micro-step counter from
the loop's own index.

The loop steps the engine after every microbatch, and at each of its own boundaries calls
`sync_counters(engine, i)`, which writes `engine.micro_steps = i`. With a 0-based `i` the
engine's counter is moved back by one at every group end: the engine's boundary
`(micro_steps + 1) % A == 0` then falls one microbatch later in each group (A = 4:
updates after microbatches 4, 9, 14, ... instead of 4, 8, 12), and the groups drift.

Parse-only example: it needs DeepSpeed (launch with `deepspeed bad_helper_counter_sync.py`),
which the CPU test environment does not install. The catalogue tests only parse it.
"""
import deepspeed
import torch
from torch import nn
from torch.utils.data import TensorDataset

ACCUMULATION_STEPS = 4  # A: microbatches per optimizer update
MICROBATCH_SIZE = 8
GROUPS_PER_EPOCH = 3


def sync_counters(model_engine, index):
    model_engine.micro_steps = index


def train(model_engine, loader):
    loss_fn = nn.MSELoss()
    for i, (x, y) in enumerate(loader):
        loss = loss_fn(model_engine(x), y)
        model_engine.backward(loss)
        model_engine.step()
        if (i + 1) % ACCUMULATION_STEPS == 0:
            sync_counters(model_engine, i)  # expect: ACC505


def main():
    torch.manual_seed(0)
    inputs = torch.randn(GROUPS_PER_EPOCH * ACCUMULATION_STEPS * MICROBATCH_SIZE, 16)
    dataset = TensorDataset(inputs, inputs.sum(dim=1, keepdim=True))
    model = nn.Linear(16, 1)
    config = {"train_micro_batch_size_per_gpu": MICROBATCH_SIZE, "gradient_accumulation_steps": ACCUMULATION_STEPS}
    model_engine, _, loader, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                                      training_data=dataset, config=config)
    train(model_engine, loader)


if __name__ == "__main__":
    main()
