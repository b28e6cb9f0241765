"""ACC308 good: twin of bad_dict_config_lambda_warmup.py.

The config says `"interval": "step"`: Lightning steps the warmup after each optimizer update,
and the learning rate reaches 0.05 with the 6th update. Runs on CPU when `lightning`
is installed (the catalogue only parses it where it is not).
"""
import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ACCUMULATION_STEPS = 4  # A: microbatches per optimizer update
MICROBATCH_SIZE = 8
GROUPS_PER_EPOCH = 3
EPOCHS = 2


class Regressor(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.model = nn.Linear(16, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self.model(x), y)

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.05)
        updates = self.trainer.estimated_stepping_batches  # the run's optimizer updates
        warmup = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda update: min(1.0, (update + 1) / updates))
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": warmup, "interval": "step"},
        }


def main():
    torch.manual_seed(0)
    inputs = torch.randn(GROUPS_PER_EPOCH * ACCUMULATION_STEPS * MICROBATCH_SIZE, 16)
    loader = DataLoader(TensorDataset(inputs, inputs.sum(dim=1, keepdim=True)), batch_size=MICROBATCH_SIZE)
    module = Regressor()
    trainer = L.Trainer(accelerator="cpu", devices=1, max_epochs=EPOCHS, accumulate_grad_batches=ACCUMULATION_STEPS,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(module, loader)
    print(f"learning rate after {trainer.global_step} optimizer updates: "
          f"{module.optimizers().param_groups[0]['lr']:.4f} (warmed up: 0.0500)")


if __name__ == "__main__":
    main()
