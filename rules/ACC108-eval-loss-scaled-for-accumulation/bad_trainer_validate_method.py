"""ACC108 bad: a trainer class's loss method, scaled by 1/A for training, reused by `validate`.

`Trainer.loss` divides by `self.accumulation_steps` so that a group's A backward passes sum to
its mean gradient. `validate` runs the same method under `torch.no_grad()` and logs the mean:
the validation loss it prints is A times too small. Plain PyTorch, runs on CPU.
"""
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ACCUMULATION_STEPS = 4  # A: microbatches per optimizer update
MICROBATCH_SIZE = 8
GROUPS_PER_EPOCH = 3


def make_loader(groups):
    inputs = torch.randn(groups * ACCUMULATION_STEPS * MICROBATCH_SIZE, 16)
    labels = (inputs.sum(dim=1) > 0).long()
    return DataLoader(TensorDataset(inputs, labels), batch_size=MICROBATCH_SIZE)


class Trainer:
    def __init__(self, model, accumulation_steps):
        self.model = model
        self.accumulation_steps = accumulation_steps
        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        self.criterion = nn.CrossEntropyLoss()

    def loss(self, x, labels):
        return self.criterion(self.model(x), labels) / self.accumulation_steps

    def train_epoch(self, loader):
        self.model.train()
        for i, (x, labels) in enumerate(loader):
            self.loss(x, labels).backward()
            if (i + 1) % self.accumulation_steps == 0:
                self.optimizer.step()
                self.optimizer.zero_grad()

    def validate(self, loader):
        self.model.eval()
        losses = []
        with torch.no_grad():
            for x, labels in loader:
                losses.append(self.loss(x, labels).item())  # expect: ACC108
        return sum(losses) / len(losses)


def main():
    torch.manual_seed(0)
    trainer = Trainer(nn.Linear(16, 2), ACCUMULATION_STEPS)
    trainer.train_epoch(make_loader(GROUPS_PER_EPOCH))
    print(f"validation loss {trainer.validate(make_loader(1)):.4f}")


if __name__ == "__main__":
    main()
