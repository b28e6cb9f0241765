# expect: nothing -- a Lightning Callback: Lightning calls other hooks than a generic runner's
import torch
from lightning.pytorch.callbacks import Callback


class Clip(Callback):
    def on_after_backward(self, trainer, module):
        torch.nn.utils.clip_grad_norm_(module.parameters(), 1.0)


class Step(Callback):
    def on_batch_end(self, trainer, module):
        self.n = getattr(self, "n", 0) + 1
        if self.n % 4 == 0:
            trainer.optimizers[0].step()
