"""ACC001 bad: a skorch ``train_step`` override that accumulates but resets on every batch.

skorch's ``fit`` calls ``train_step`` once per batch; the inherited ``train_step_single`` runs
that batch's forward and backward. Resetting before it on every batch leaves only the last
microbatch's gradient for the gated update. Runs on CPU when `skorch` is installed.
"""
import torch
from skorch import NeuralNetRegressor
from torch import nn

ACCUMULATION_STEPS = 4  # A: microbatches per optimizer update
MICROBATCH_SIZE = 8
GROUPS_PER_EPOCH = 3


class AccumulatingNet(NeuralNetRegressor):
    seen = 0

    def get_loss(self, *args, **kwargs):
        return super().get_loss(*args, **kwargs) / ACCUMULATION_STEPS

    def train_step(self, batch, **fit_params):
        self.optimizer_.zero_grad()  # expect: ACC001
        step = self.train_step_single(batch, **fit_params)
        self.seen += 1
        if self.seen % ACCUMULATION_STEPS == 0:
            self.optimizer_.step()
        return step


def main():
    torch.manual_seed(0)
    inputs = torch.randn(GROUPS_PER_EPOCH * ACCUMULATION_STEPS * MICROBATCH_SIZE, 16)
    net = AccumulatingNet(nn.Linear(16, 1), max_epochs=1, lr=0.05, batch_size=MICROBATCH_SIZE,
                          train_split=None, verbose=0)
    net.fit(inputs, inputs.sum(dim=1, keepdim=True))


if __name__ == "__main__":
    main()
