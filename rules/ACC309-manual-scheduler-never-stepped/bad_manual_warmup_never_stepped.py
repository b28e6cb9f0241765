"""ACC309 bad: manual optimization with a warmup scheduler nobody steps.

`configure_optimizers` returns a linear warmup over the first 4 updates, and
`training_step` accumulates ACCUMULATION_STEPS batches and steps the optimizer by hand;
under manual optimization Lightning steps no scheduler, and the module never calls
`sch.step()`: the learning rate stays at the warmup's first value (0.05 * 0.25 = 0.0125)
for the whole run. Runs on CPU when `lightning` is installed (the catalogue only parses
it where it is not).
"""
import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ACCUMULATION_STEPS = 4  # A: microbatches per optimizer update
MICROBATCH_SIZE = 8
GROUPS_PER_EPOCH = 3
EPOCHS = 2


def make_loader():
    inputs = torch.randn(GROUPS_PER_EPOCH * ACCUMULATION_STEPS * MICROBATCH_SIZE, 16)
    targets = inputs.sum(dim=1, keepdim=True)
    return DataLoader(TensorDataset(inputs, targets), batch_size=MICROBATCH_SIZE)


class Regressor(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.automatic_optimization = False
        self.model = nn.Linear(16, 1)
        self.loss_fn = nn.MSELoss()

    def training_step(self, batch, batch_idx):
        optimizer = self.optimizers()
        x, y = batch
        loss = self.loss_fn(self.model(x), y) / ACCUMULATION_STEPS
        self.manual_backward(loss)
        if (batch_idx + 1) % ACCUMULATION_STEPS == 0:
            optimizer.step()
            optimizer.zero_grad()

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.05)
        warmup = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.25, total_iters=4)
        return [optimizer], [warmup]  # expect: ACC309


def main():
    torch.manual_seed(0)
    module = Regressor()
    trainer = L.Trainer(accelerator="cpu", devices=1, max_epochs=EPOCHS, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(module, make_loader())
    print(f"learning rate after training: {module.optimizers().param_groups[0]['lr']:.4f} (wanted 0.05)")


if __name__ == "__main__":
    main()
