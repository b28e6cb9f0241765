# expect: nothing -- a wrapper known by its name alone: its accumulative_counts is not in view
import torch

ACCUMULATION_STEPS = 4


def train(model, batches, optim_wrapper):
    for x, y in batches:
        loss = torch.nn.functional.mse_loss(model(x), y) / ACCUMULATION_STEPS
        optim_wrapper.update_params(loss)
