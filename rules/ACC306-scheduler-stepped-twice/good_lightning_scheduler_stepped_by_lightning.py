"""ACC306 good: twin of bad_lightning_scheduler_stepped_twice.py.

The scheduler returned by `configure_optimizers` with `interval="step"` is stepped by
Lightning once per optimizer update, and sized with `estimated_stepping_batches` (updates).
Runs on CPU when `lightning` is installed (not a dependency of the test environment:
there the catalogue only parses it).
"""
import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ACCUMULATION_STEPS = 4  # A: accumulate_grad_batches
MICROBATCH_SIZE = 8
GROUPS_PER_EPOCH = 3
EPOCHS = 2


class Regressor(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(16, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.05)
        scheduler = torch.optim.lr_scheduler.LinearLR(
            optimizer, start_factor=1.0, end_factor=0.0, total_iters=self.trainer.estimated_stepping_batches
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def main():
    torch.manual_seed(0)
    inputs = torch.randn(GROUPS_PER_EPOCH * ACCUMULATION_STEPS * MICROBATCH_SIZE, 16)
    loader = DataLoader(TensorDataset(inputs, inputs.sum(dim=1, keepdim=True)), batch_size=MICROBATCH_SIZE)
    trainer = L.Trainer(max_epochs=EPOCHS, accumulate_grad_batches=ACCUMULATION_STEPS, accelerator="cpu",
                        logger=False, enable_checkpointing=False, enable_progress_bar=False)
    trainer.fit(Regressor(), loader)


if __name__ == "__main__":
    main()
