"""ACC107 good: the task loss and the load-balancing term are divided by A together.

Plain PyTorch, runs on CPU. The update applies the group's mean of (task + AUX_WEIGHT × balance).
"""
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ACCUMULATION_STEPS = 4  # A: microbatches per optimizer update
MICROBATCH_SIZE = 8
GROUPS_PER_EPOCH = 3
AUX_WEIGHT = 0.01  # the configured coefficient of the load-balancing loss


class TwoExperts(nn.Module):
    """A router over two linear experts; returns the mixture and a load-balancing loss."""

    def __init__(self):
        super().__init__()
        self.router = nn.Linear(16, 2)
        self.experts = nn.ModuleList([nn.Linear(16, 1), nn.Linear(16, 1)])

    def forward(self, x):
        probs = self.router(x).softmax(dim=-1)
        mixed = probs[:, :1] * self.experts[0](x) + probs[:, 1:] * self.experts[1](x)
        balance = 2 * (probs.mean(dim=0) ** 2).sum()  # 1.0 when both experts get half the tokens
        return mixed, balance


def main():
    torch.manual_seed(0)
    inputs = torch.randn(GROUPS_PER_EPOCH * ACCUMULATION_STEPS * MICROBATCH_SIZE, 16)
    loader = DataLoader(TensorDataset(inputs, inputs.sum(dim=1, keepdim=True)), batch_size=MICROBATCH_SIZE)
    model = TwoExperts()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for i, (x, y) in enumerate(loader):
        out, balance = model(x)
        loss = (nn.functional.mse_loss(out, y) + AUX_WEIGHT * balance) / ACCUMULATION_STEPS
        loss.backward()
        if (i + 1) % ACCUMULATION_STEPS == 0:
            optimizer.step()
            optimizer.zero_grad()


if __name__ == "__main__":
    main()
