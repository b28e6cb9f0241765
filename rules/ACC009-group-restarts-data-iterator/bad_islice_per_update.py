"""Each update takes its A microbatches with islice over the loader itself: a new iterator every time."""
import itertools

import torch

ACCUMULATION_STEPS = 4
torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
data = torch.utils.data.TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
loader = torch.utils.data.DataLoader(data, batch_size=4)  # 16 microbatches, not shuffled


def train_one_update():
    for x, y in itertools.islice(loader, ACCUMULATION_STEPS):  # expect: ACC009
        loss = torch.nn.functional.mse_loss(model(x), y) / ACCUMULATION_STEPS
        loss.backward()
    optimizer.step()
    optimizer.zero_grad()


for update in range(8):  # 8 updates: 32 microbatches, but only the loader's first 4, eight times
    train_one_update()
