"""ACC505 bad: a trainer class keeps the engine's update count in step with its own counter.

The trainer's `seen` counts microbatches; `_log` writes it into `engine.global_steps`
after every microbatch. The engine's update count (its checkpoint tags, its curriculum
and `steps_per_print` logging) becomes a microbatch count: with A = 4 it reads 4x the
updates applied; a checkpoint saved after 3 updates is tagged global_step12 and a resume
from it restores 12 as the engine's update count.

Parse-only example: it needs DeepSpeed (launch with `deepspeed bad_trainer_global_steps.py`),
which the CPU test environment does not install. The catalogue tests only parse it.
"""
import deepspeed
import torch
from torch import nn
from torch.utils.data import TensorDataset

ACCUMULATION_STEPS = 4  # A: microbatches per optimizer update
MICROBATCH_SIZE = 8
GROUPS_PER_EPOCH = 3


class Trainer:
    def __init__(self, model, optimizer, dataset, config):
        self.engine, self.optimizer, self.loader, _ = deepspeed.initialize(
            model=model, optimizer=optimizer, training_data=dataset, config=config
        )
        self.loss_fn = nn.MSELoss()
        self.seen = 0

    def _log(self, loss):
        self.seen += 1
        self.engine.global_steps = self.seen
        print(f"microbatch {self.seen}: loss {loss.item():.4f}")

    def train_epoch(self):
        for x, y in self.loader:
            loss = self.loss_fn(self.engine(x), y)
            self.engine.backward(loss)
            self.engine.step()
            self._log(loss)  # expect: ACC505


def main():
    torch.manual_seed(0)
    inputs = torch.randn(GROUPS_PER_EPOCH * ACCUMULATION_STEPS * MICROBATCH_SIZE, 16)
    dataset = TensorDataset(inputs, inputs.sum(dim=1, keepdim=True))
    model = nn.Linear(16, 1)
    config = {"train_micro_batch_size_per_gpu": MICROBATCH_SIZE, "gradient_accumulation_steps": ACCUMULATION_STEPS}
    Trainer(model, torch.optim.SGD(model.parameters(), lr=0.05), dataset, config).train_epoch()


if __name__ == "__main__":
    main()
