# expect: ACC301 line 14 -- on_after_backward runs after every microbatch's backward: A = 8 partial sums are clipped
import lightning.pytorch as pl
import torch


class Net(pl.LightningModule):
    def training_step(self, batch, batch_idx):
        return self.model(batch).mean()

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters())

    def on_after_backward(self):
        torch.nn.utils.clip_grad_norm_(self.parameters(), 0.5)


def fit(data):
    pl.Trainer(accumulate_grad_batches=8).fit(Net(), data)
