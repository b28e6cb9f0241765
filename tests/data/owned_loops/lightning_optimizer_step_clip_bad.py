# expect: ACC301 line 13 -- the clip runs before optimizer.step(closure=...) runs the last backward
import pytorch_lightning as pl
import torch


class Model(pl.LightningModule):
    def training_step(self, batch, batch_idx):
        return self.net(batch).mean()

    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure=None):
        if self.trainer.global_step < 100:
            optimizer.param_groups[0]["lr"] = 1e-4
        torch.nn.utils.clip_grad_norm_(self.parameters(), 1.0)
        optimizer.step(closure=optimizer_closure)
