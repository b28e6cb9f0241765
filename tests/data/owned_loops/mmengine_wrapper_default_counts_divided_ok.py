# expect: nothing -- OptimWrapper without accumulative_counts divides by 1: the manual division is the only one
import torch
from mmengine.optim import OptimWrapper

ACCUMULATION_STEPS = 4


def train(model, batches):
    optim_wrapper = OptimWrapper(torch.optim.SGD(model.parameters(), lr=0.1))
    for x, y in batches:
        loss = torch.nn.functional.mse_loss(model(x), y) / ACCUMULATION_STEPS
        optim_wrapper.update_params(loss)
