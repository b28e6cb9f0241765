# expect: nothing -- the wrapper's arguments come through **cfg: its accumulative_counts is not in view
import torch
from mmengine.optim import OptimWrapper


def train(model, batches, cfg):
    optim_wrapper = OptimWrapper(torch.optim.AdamW(model.parameters()), **cfg)
    for x, y in batches:
        optim_wrapper.backward(torch.nn.functional.mse_loss(model(x), y))
        optim_wrapper.step()
        optim_wrapper.zero_grad()
