# expect: ACC301 line 8 -- the callback clips on every batch, the optimizer callback steps every 4th
import torch
from catalyst import dl


class ClipEveryBatch(dl.Callback):
    def on_batch_end(self, runner):
        torch.nn.utils.clip_grad_norm_(runner.model.parameters(), 1.0)


def callbacks():
    return [dl.BackwardCallback(metric_key="loss"),
            dl.OptimizerCallback(metric_key="loss", accumulation_steps=4),
            ClipEveryBatch(order=dl.CallbackOrder.Optimizer)]
