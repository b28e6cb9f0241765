"""ACC504 good: twin of bad_batch_idx_gate_skips_closure.py.

Lightning accumulates (`Trainer(accumulate_grad_batches=ACCUMULATION_STEPS)`) and calls
`optimizer_step` once per optimizer update; the override keeps its own work (a linear
warmup of the learning rate over the first 2 updates) and hands on the closure every time
it is called. All 12 batches are trained on. Runs on CPU when `lightning` is installed (the
catalogue only parses it where it is not).
"""
import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ACCUMULATION_STEPS = 4  # A: microbatches per optimizer update
MICROBATCH_SIZE = 8
GROUPS_PER_EPOCH = 3
WARMUP_UPDATES = 2
LEARNING_RATE = 0.05


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
        scale = min(1.0, (self.trainer.global_step + 1) / WARMUP_UPDATES)
        for group in optimizer.param_groups:
            group["lr"] = scale * LEARNING_RATE
        optimizer.step(closure=optimizer_closure)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=LEARNING_RATE)


def main():
    torch.manual_seed(0)
    inputs = torch.randn(GROUPS_PER_EPOCH * ACCUMULATION_STEPS * MICROBATCH_SIZE, 16)
    loader = DataLoader(TensorDataset(inputs, inputs.sum(dim=1, keepdim=True)), batch_size=MICROBATCH_SIZE)
    module = Regressor()
    trainer = L.Trainer(accelerator="cpu", devices=1, max_epochs=1, accumulate_grad_batches=ACCUMULATION_STEPS,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(module, loader)
    print(f"batches trained on: {module.trained_batches} of {len(loader)}, optimizer updates: {trainer.global_step}")


if __name__ == "__main__":
    main()
