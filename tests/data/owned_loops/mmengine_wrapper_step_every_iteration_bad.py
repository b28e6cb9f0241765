# expect: ACC004 line 10 -- only update_params counts against accumulative_counts; step() always steps
import torch
from mmengine.optim import OptimWrapper


def train(model, batches):
    optim_wrapper = OptimWrapper(torch.optim.AdamW(model.parameters()), accumulative_counts=8)
    for x, y in batches:
        optim_wrapper.backward(torch.nn.functional.mse_loss(model(x), y))
        optim_wrapper.step()
        optim_wrapper.zero_grad()
