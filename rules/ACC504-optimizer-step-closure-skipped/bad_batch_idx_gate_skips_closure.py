"""ACC504 bad: an `optimizer_step` override that hands on the closure every A-th batch only.

The override accumulates by hand: `optimizer.step(closure=optimizer_closure)` runs when
`(batch_idx + 1) % ACCUMULATION_STEPS == 0`. But the closure is what runs `training_step`
and the backward: on the 3 batches in between nothing is computed, and Lightning stops at
the first of them with "The closure hasn't been executed" (older versions trained on every
A-th batch only). The script catches the error and prints it. Runs on CPU when `lightning`
is installed (the catalogue only parses it where it is not).
"""
import lightning as L
import torch
from lightning.pytorch.utilities.exceptions import MisconfigurationException
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ACCUMULATION_STEPS = 4  # A: microbatches per optimizer update
MICROBATCH_SIZE = 8
GROUPS_PER_EPOCH = 3


class Regressor(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.model = nn.Linear(16, 1)
        self.trained_batches = 0

    def training_step(self, batch, batch_idx):
        self.trained_batches += 1
        x, y = batch
        return nn.functional.mse_loss(self.model(x), y)

    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure):
        if (batch_idx + 1) % ACCUMULATION_STEPS == 0:
            optimizer.step(closure=optimizer_closure)  # expect: ACC504

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05 / ACCUMULATION_STEPS)  # a sum of A backwards per update


def main():
    torch.manual_seed(0)
    inputs = torch.randn(GROUPS_PER_EPOCH * ACCUMULATION_STEPS * MICROBATCH_SIZE, 16)
    loader = DataLoader(TensorDataset(inputs, inputs.sum(dim=1, keepdim=True)), batch_size=MICROBATCH_SIZE)
    module = Regressor()
    trainer = L.Trainer(accelerator="cpu", devices=1, max_epochs=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    try:
        trainer.fit(module, loader)
    except MisconfigurationException as error:
        print(f"Lightning stopped: {str(error).split('.')[0]}")
    print(f"batches trained on: {module.trained_batches} of {len(loader)}")


if __name__ == "__main__":
    main()
