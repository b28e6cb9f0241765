# expect: ACC304 line 16 -- manual optimization: the scheduler from self.lr_schedulers() steps every microbatch
import lightning as L


class M(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch, batch_idx):
        opt, sched = self.optimizers(), self.lr_schedulers()
        self.manual_backward(self.net(batch).sum() / 4)
        if (batch_idx + 1) % 4 == 0:
            opt.step()
            opt.zero_grad()
        sched.step()
