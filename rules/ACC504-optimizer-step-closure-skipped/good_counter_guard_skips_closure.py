"""ACC504 good: twin of bad_counter_guard_skips_closure.py.

On the batches that do not end a group the override runs the closure itself
(`optimizer_closure()`: `training_step` and the backward) before returning, and the
optimizer's step runs it on the last one: all 12 batches are trained on, and the 3 updates
each apply the sum of 4 backwards (`optimizer_zero_grad` is a no-op; the reset follows each
update). Runs on CPU when `lightning` is installed (the catalogue only parses it where it is
not).
"""
import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ACCUMULATION_STEPS = 4  # A: microbatches per optimizer update
MICROBATCH_SIZE = 8
GROUPS_PER_EPOCH = 3


class Regressor(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.model = nn.Linear(16, 1)
        self.calls = 0
        self.trained_batches = 0

    def training_step(self, batch, batch_idx):
        self.trained_batches += 1
        x, y = batch
        return nn.functional.mse_loss(self.model(x), y)

    def optimizer_zero_grad(self, epoch, batch_idx, optimizer):
        pass  # the gradients are reset after each update in optimizer_step

    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure):
        self.calls += 1
        if self.calls % ACCUMULATION_STEPS != 0:
            optimizer_closure()
            return
        optimizer.step(closure=optimizer_closure)
        optimizer.zero_grad()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05 / ACCUMULATION_STEPS)  # a sum of A backwards per update


def main():
    torch.manual_seed(0)
    inputs = torch.randn(GROUPS_PER_EPOCH * ACCUMULATION_STEPS * MICROBATCH_SIZE, 16)
    loader = DataLoader(TensorDataset(inputs, inputs.sum(dim=1, keepdim=True)), batch_size=MICROBATCH_SIZE)
    module = Regressor()
    trainer = L.Trainer(accelerator="cpu", devices=1, max_epochs=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(module, loader)
    print(f"batches trained on: {module.trained_batches} of {len(loader)}")


if __name__ == "__main__":
    main()
