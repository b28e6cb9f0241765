# expect: nothing -- the clip callback tests the same counter boundary as the update callback
import torch
from trainlib import Callback


class Clip(Callback):
    def __init__(self, every=4):
        self.every = every

    def on_after_backward(self, runner):
        if (runner.batch_index + 1) % self.every == 0:
            torch.nn.utils.clip_grad_norm_(runner.model.parameters(), 1.0)
            runner.optimizer.step()
            runner.optimizer.zero_grad()
