"""The checkpoint test on the update counter runs under the update gate: once per update."""
import os
import tempfile

import torch

ACCUMULATION_STEPS = 4
SAVE_EVERY = 2  # optimizer updates
LOG_EVERY = 3  # microbatches
torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
data = torch.utils.data.TensorDataset(torch.randn(16 * ACCUMULATION_STEPS, 8), torch.randn(16 * ACCUMULATION_STEPS, 1))
loader = torch.utils.data.DataLoader(data, batch_size=4)  # 16 microbatches: whole groups
checkpoint = os.path.join(tempfile.mkdtemp(), "model.pt")

completed_updates = 0
for epoch in range(2):
    for i, (x, y) in enumerate(loader):
        loss = torch.nn.functional.mse_loss(model(x), y) / ACCUMULATION_STEPS
        loss.backward()
        if i % LOG_EVERY == 0:  # a microbatch counter, meant per microbatch
            print(f"microbatch {i}: loss {loss.item():.4f}")
        if (i + 1) % ACCUMULATION_STEPS == 0:
            optimizer.step()
            optimizer.zero_grad()
            completed_updates += 1
            if completed_updates % SAVE_EVERY == 0:
                torch.save(model.state_dict(), checkpoint)
