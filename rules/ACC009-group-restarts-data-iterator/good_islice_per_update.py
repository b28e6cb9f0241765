"""One iterator per epoch; each update takes the next A microbatches from it."""
import itertools

import torch

ACCUMULATION_STEPS = 4
torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
data = torch.utils.data.TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
loader = torch.utils.data.DataLoader(data, batch_size=4)  # 16 microbatches, not shuffled


def train_one_update(batches):
    for x, y in itertools.islice(batches, ACCUMULATION_STEPS):
        loss = torch.nn.functional.mse_loss(model(x), y) / ACCUMULATION_STEPS
        loss.backward()
    optimizer.step()
    optimizer.zero_grad()


for epoch in range(2):
    batches = iter(loader)
    for update in range(len(loader) // ACCUMULATION_STEPS):
        train_one_update(batches)
