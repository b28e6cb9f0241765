"""ACC309 bad: manual optimization with a per-epoch decay in a scheduler config dict.

`configure_optimizers` returns `{"optimizer": ..., "lr_scheduler": {"scheduler": StepLR,
"interval": "epoch"}}`. The config's interval is read only under automatic optimization;
under manual optimization Lightning steps no scheduler and the module has no
`on_train_epoch_end` that does: the learning rate never halves (0.05 after 3 epochs
instead of 0.00625). The update helper `_update` is a method of the module. Runs on CPU
when `lightning` is installed (the catalogue only parses it where it is not).
"""
import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ACCUMULATION_STEPS = 4  # A: microbatches per optimizer update
MICROBATCH_SIZE = 8
GROUPS_PER_EPOCH = 3
EPOCHS = 3


class Regressor(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.automatic_optimization = False
        self.model = nn.Linear(16, 1)

    def _update(self, optimizer):
        optimizer.step()
        optimizer.zero_grad()

    def training_step(self, batch, batch_idx):
        x, y = batch
        self.manual_backward(nn.functional.mse_loss(self.model(x), y) / ACCUMULATION_STEPS)
        if (batch_idx + 1) % ACCUMULATION_STEPS == 0:
            self._update(self.optimizers())

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.05)
        decay = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": decay, "interval": "epoch"}}  # expect: ACC309


def main():
    torch.manual_seed(0)
    inputs = torch.randn(GROUPS_PER_EPOCH * ACCUMULATION_STEPS * MICROBATCH_SIZE, 16)
    loader = DataLoader(TensorDataset(inputs, inputs.sum(dim=1, keepdim=True)), batch_size=MICROBATCH_SIZE)
    module = Regressor()
    trainer = L.Trainer(accelerator="cpu", devices=1, max_epochs=EPOCHS, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(module, loader)
    print(f"learning rate after {EPOCHS} epochs: {module.optimizers().param_groups[0]['lr']:.5f}")


if __name__ == "__main__":
    main()
