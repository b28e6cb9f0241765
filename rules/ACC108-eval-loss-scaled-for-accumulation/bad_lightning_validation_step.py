"""ACC108 bad: a LightningModule's shared loss step, divided by A, reused in `validation_step`.

Under manual optimization `_shared_loss` divides by A before `self.manual_backward`, the
documented accumulation pattern. `validation_step` calls the same method (Lightning runs it
under `torch.no_grad()` with the module in eval mode) and logs `val_loss` A times too small.
Runs on CPU when `lightning` is installed.
"""
import lightning as L
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

ACCUMULATION_STEPS = 4  # A: microbatches per optimizer update
MICROBATCH_SIZE = 8
GROUPS_PER_EPOCH = 3
EPOCHS = 2


def make_loader(groups):
    inputs = torch.randn(groups * ACCUMULATION_STEPS * MICROBATCH_SIZE, 16)
    targets = inputs.sum(dim=1, keepdim=True)
    return DataLoader(TensorDataset(inputs, targets), batch_size=MICROBATCH_SIZE)


class Regressor(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.automatic_optimization = False
        self.model = nn.Linear(16, 1)

    def _shared_loss(self, batch):
        x, y = batch
        return F.mse_loss(self.model(x), y) / ACCUMULATION_STEPS

    def training_step(self, batch, batch_idx):
        optimizer = self.optimizers()
        self.manual_backward(self._shared_loss(batch))
        if (batch_idx + 1) % ACCUMULATION_STEPS == 0:
            optimizer.step()
            optimizer.zero_grad()

    def validation_step(self, batch, batch_idx):
        loss = self._shared_loss(batch)
        self.log("val_loss", loss)  # expect: ACC108

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main():
    torch.manual_seed(0)
    train_loader, val_loader = make_loader(GROUPS_PER_EPOCH), make_loader(1)
    assert len(train_loader) % ACCUMULATION_STEPS == 0  # no partial final group
    trainer = L.Trainer(accelerator="cpu", devices=1, max_epochs=EPOCHS, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Regressor(), train_loader, val_loader)
    print(f"validation loss {trainer.callback_metrics['val_loss']:.4f}")


if __name__ == "__main__":
    main()
