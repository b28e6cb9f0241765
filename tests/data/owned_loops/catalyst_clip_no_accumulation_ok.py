# expect: nothing -- the optimizer callback steps every batch: clipping each batch is once per update
import torch
from catalyst import dl


class ClipEveryBatch(dl.Callback):
    def on_batch_end(self, runner):
        torch.nn.utils.clip_grad_norm_(runner.model.parameters(), 1.0)


def callbacks():
    return [dl.BackwardCallback(metric_key="loss"), dl.OptimizerCallback(metric_key="loss"),
            ClipEveryBatch(order=dl.CallbackOrder.Optimizer)]
