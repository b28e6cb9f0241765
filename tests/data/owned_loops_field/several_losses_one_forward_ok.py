# expect: nothing -- one forward, then one backward per loss of that batch: no microbatches, BatchNorm sees the batch
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.norm = nn.Conv2d(3, 6, 3), nn.BatchNorm2d(6)

    def forward(self, x):
        return self.norm(self.conv(x))


def update(model, optimizer, images, n_losses):
    optimizer.zero_grad()
    out = model(images)
    for k in range(n_losses):
        (out.mean() * (k + 1)).backward(retain_graph=True)
    optimizer.step()
