"""ACC301 bad: gradients clipped in a LightningModule's ``on_after_backward`` under accumulation.

Lightning calls ``on_after_backward`` after every microbatch's backward (lightning 2.6.6
``plugins/precision/precision.py`` ``post_backward``). With ``accumulate_grad_batches = 4`` the
clip there acts on partial sums of the group's gradient: early microbatches are clipped up to
four times, and the update applies no clipped accumulated gradient. Runs on CPU when
`lightning` is installed.
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
        self.layer = nn.Linear(16, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self.layer(x), y)

    def on_after_backward(self):
        torch.nn.utils.clip_grad_norm_(self.parameters(), 1.0)  # expect: ACC301

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main():
    torch.manual_seed(0)
    inputs = torch.randn(GROUPS_PER_EPOCH * ACCUMULATION_STEPS * MICROBATCH_SIZE, 16)
    targets = 3.0 * inputs.sum(dim=1, keepdim=True)
    loader = DataLoader(TensorDataset(inputs, targets), batch_size=MICROBATCH_SIZE)
    trainer = L.Trainer(max_epochs=1, accumulate_grad_batches=ACCUMULATION_STEPS, accelerator="cpu",
                        logger=False, enable_checkpointing=False, enable_progress_bar=False)
    trainer.fit(Regressor(), loader)


if __name__ == "__main__":
    main()
