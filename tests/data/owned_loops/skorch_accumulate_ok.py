# expect: nothing -- reset after the gated update (the skorch accumulation recipe's shape)
from skorch import NeuralNetClassifier


class AccumNet(NeuralNetClassifier):
    def __init__(self, *args, k=4, **kwargs):
        super().__init__(*args, **kwargs)
        self.k = k
        self.seen = 0

    def get_loss(self, *args, **kwargs):
        return super().get_loss(*args, **kwargs) / self.k

    def train_step(self, batch, **fit_params):
        out = self.train_step_single(batch, **fit_params)
        self.seen += 1
        if self.seen % self.k == 0:
            self.optimizer_.step()
            self.optimizer_.zero_grad()
        return out
