# expect: nothing -- the closure runs first (forward and backward), then the clip and the update
import pytorch_lightning as pl
import torch


class Model(pl.LightningModule):
    def training_step(self, batch, batch_idx):
        return self.net(batch).mean()

    def optimizer_step(self, epoch, batch_idx, optimizer, closure):
        closure()
        torch.nn.utils.clip_grad_norm_(self.parameters(), 1.0)
        optimizer.step()
