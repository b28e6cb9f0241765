"""ACC107 good: a trainer adds the z-loss to the cross entropy, then divides the sum by A.

Plain PyTorch in a trainer class, runs on CPU. Both terms keep their configured weights.
"""
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

ACCUMULATION_STEPS = 4  # A: microbatches per optimizer update
MICROBATCH_SIZE = 8
GROUPS_PER_EPOCH = 3
Z_WEIGHT = 1e-3  # coefficient of the z-loss (squared log-partition of the logits)


class Trainer:
    def __init__(self, model, accumulation_steps):
        self.model = model
        self.accumulation_steps = accumulation_steps
        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.05)

    def microbatch_loss(self, x, y):
        logits = self.model(x)
        loss = F.cross_entropy(logits, y)
        loss += Z_WEIGHT * logits.logsumexp(dim=-1).pow(2).mean()
        return loss / self.accumulation_steps

    def fit(self, loader):
        for i, (x, y) in enumerate(loader):
            self.microbatch_loss(x, y).backward()
            if (i + 1) % self.accumulation_steps == 0:
                self.optimizer.step()
                self.optimizer.zero_grad()


def main():
    torch.manual_seed(0)
    inputs = torch.randn(GROUPS_PER_EPOCH * ACCUMULATION_STEPS * MICROBATCH_SIZE, 16)
    labels = torch.randint(0, 4, (len(inputs),))
    Trainer(nn.Linear(16, 4), ACCUMULATION_STEPS).fit(
        DataLoader(TensorDataset(inputs, labels), batch_size=MICROBATCH_SIZE))


if __name__ == "__main__":
    main()
