# expect: nothing -- A = 1: each backward's gradient is the update's, clipping after it is fine
import lightning.pytorch as pl
import torch


class Net(pl.LightningModule):
    def training_step(self, batch, batch_idx):
        return self.model(batch).mean()

    def on_after_backward(self):
        torch.nn.utils.clip_grad_norm_(self.parameters(), 0.5)


def fit(data):
    pl.Trainer(accumulate_grad_batches=1).fit(Net(), data)
