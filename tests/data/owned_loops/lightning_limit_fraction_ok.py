# expect: nothing -- a fractional limit is a share of the loader, whose length the code does not show
import lightning as L


class M(L.LightningModule):
    def training_step(self, batch, batch_idx):
        return self.net(batch).sum()


def smoke(loader):
    L.Trainer(limit_train_batches=0.25, accumulate_grad_batches=4).fit(M(), loader)
    L.Trainer(limit_train_batches=8, accumulate_grad_batches=4).fit(M(), loader)
