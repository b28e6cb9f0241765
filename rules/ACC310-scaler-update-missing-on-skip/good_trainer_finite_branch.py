"""ACC310 good: twin of bad_trainer_finite_branch.py.

`scaler.step` is called whatever the norm (it skips a non-finite update itself) and
`scaler.update()` runs after every unscale: on an overflow the scale is lowered and the
next group unscales afresh. The finite test only counts the updates. Plain PyTorch, runs
on CPU.
"""
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ACCUMULATION_STEPS = 4  # A: microbatches per optimizer update
MICROBATCH_SIZE = 8
GROUPS_PER_EPOCH = 3


class Trainer:
    def __init__(self, model, loader):
        self.model = model
        self.loader = loader
        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        self.scaler = torch.amp.GradScaler("cpu")
        self.loss_fn = nn.MSELoss()
        self.updates = 0

    def _optimizer_update(self):
        self.scaler.unscale_(self.optimizer)
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        if torch.isfinite(norm):
            self.updates += 1
        self.optimizer.zero_grad()

    def train_epoch(self):
        for i, (x, y) in enumerate(self.loader):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = self.loss_fn(self.model(x).float(), y) / ACCUMULATION_STEPS
            self.scaler.scale(loss).backward()
            if (i + 1) % ACCUMULATION_STEPS == 0:
                self._optimizer_update()


def main():
    torch.manual_seed(0)
    inputs = torch.randn(GROUPS_PER_EPOCH * ACCUMULATION_STEPS * MICROBATCH_SIZE, 16)
    loader = DataLoader(TensorDataset(inputs, inputs.sum(dim=1, keepdim=True)), batch_size=MICROBATCH_SIZE)
    trainer = Trainer(nn.Linear(16, 1), loader)
    trainer.train_epoch()
    print(f"updates applied: {trainer.updates}")


if __name__ == "__main__":
    main()
