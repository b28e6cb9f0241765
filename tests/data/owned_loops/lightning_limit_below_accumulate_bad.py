# expect: ACC005 line 11 -- two batches per epoch with A = 4: every update is half a group divided by 4
import lightning as L


class M(L.LightningModule):
    def training_step(self, batch, batch_idx):
        return self.net(batch).sum()


def smoke(loader):
    trainer = L.Trainer(max_epochs=3, limit_train_batches=2, accumulate_grad_batches=4)
    trainer.fit(M(), loader)
