# expect: nothing -- the per-batch method has a caller in the module: that loop is read instead
from trainkit import BaseTrainer


class T(BaseTrainer):
    def batch_update(self, batch):
        self.forward_and_backward(batch)
        self.optim.step()
        self.optim.zero_grad()

    def fit(self, loader):
        for batch in loader:
            self.batch_update(batch)
