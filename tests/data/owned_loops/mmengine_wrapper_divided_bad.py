# expect: ACC101 line 10 -- OptimWrapper(accumulative_counts=A).update_params divides by A itself
import torch
from mmengine.optim import OptimWrapper as Wrapper


def train(model, batches, accumulation_steps):
    wrapper = Wrapper(torch.optim.SGD(model.parameters(), lr=0.1), accumulative_counts=accumulation_steps)
    for x, y in batches:
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss = loss / accumulation_steps
        wrapper.update_params(loss)
