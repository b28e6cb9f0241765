# expect: nothing -- on_before_optimizer_step runs once per update, after the group's last backward
import lightning.pytorch as pl
import torch


class Net(pl.LightningModule):
    def training_step(self, batch, batch_idx):
        return self.model(batch).mean()

    def on_before_optimizer_step(self, optimizer):
        torch.nn.utils.clip_grad_norm_(self.parameters(), 0.5)


def fit(data, k):
    pl.Trainer(accumulate_grad_batches=k).fit(Net(), data)
