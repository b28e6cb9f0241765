# expect: nothing -- the epoch hook resets the gradients with the counter: the tail is dropped on purpose
from trainkit import BaseTrainer


class T(BaseTrainer):
    k = 4

    def on_epoch_start(self):
        self.seen = 0
        self.optim.zero_grad()

    def batch_update(self, batch):
        self.forward_and_backward(batch, scale=1.0 / self.k)
        self.seen += 1
        if self.seen % self.k == 0:
            self.optim.step()
            self.optim.zero_grad()
