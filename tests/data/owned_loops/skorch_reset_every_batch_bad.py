# expect: ACC001 line 11 -- the override resets before the inherited train_step_single's backward on every batch
from skorch import NeuralNetClassifier


class AccumNet(NeuralNetClassifier):
    def __init__(self, *args, k=4, **kwargs):
        super().__init__(*args, **kwargs)
        self.k = k

    def train_step(self, batch, **fit_params):
        self.optimizer_.zero_grad()
        out = self.train_step_single(batch, **fit_params)
        self.seen = getattr(self, "seen", 0) + 1
        if self.seen % self.k == 0:
            self.optimizer_.step()
        return out
