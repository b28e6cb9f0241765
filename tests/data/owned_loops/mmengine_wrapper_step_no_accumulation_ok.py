# expect: nothing -- accumulative_counts=1: a step per iteration is what the wrapper is configured for
import torch
from mmengine.optim import OptimWrapper


def train(model, batches):
    optim_wrapper = OptimWrapper(torch.optim.AdamW(model.parameters()), accumulative_counts=1)
    for x, y in batches:
        optim_wrapper.backward(torch.nn.functional.mse_loss(model(x), y))
        optim_wrapper.step()
        optim_wrapper.zero_grad()
