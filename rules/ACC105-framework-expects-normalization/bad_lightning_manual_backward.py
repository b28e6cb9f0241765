"""ACC105 bad: Lightning manual optimization accumulating A microbatches without dividing.

With `automatic_optimization = False` Lightning neither divides the loss nor gates the
update: the module steps every ACCUMULATION_STEPS batches by hand, but
`self.manual_backward(loss)` backpropagates the full microbatch loss, so each update
applies the sum of 4 microbatch gradients, 4 times the group mean. Runs on CPU when
`lightning` is installed (not a dependency of the test environment: there the catalogue
only parses it).
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
    return DataLoader(TensorDataset(inputs, targets), batch_size=MICROBATCH_SIZE, shuffle=True)


class Regressor(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.automatic_optimization = False
        self.model = nn.Linear(16, 1)
        self.loss_fn = nn.MSELoss()

    def training_step(self, batch, batch_idx):
        optimizer = self.optimizers()
        x, y = batch
        loss = self.loss_fn(self.model(x), y)
        self.manual_backward(loss)  # expect: ACC105
        if (batch_idx + 1) % ACCUMULATION_STEPS == 0:
            optimizer.step()
            optimizer.zero_grad()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main():
    torch.manual_seed(0)
    loader = make_loader()
    assert len(loader) % ACCUMULATION_STEPS == 0  # no partial final group
    trainer = L.Trainer(accelerator="cpu", devices=1, max_epochs=EPOCHS, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Regressor(), loader)
    print(f"optimizer updates: {trainer.global_step}")


if __name__ == "__main__":
    main()
