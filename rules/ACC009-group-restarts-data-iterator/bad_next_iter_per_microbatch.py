"""A trainer class that fetches each microbatch with next(iter(loader)): always the loader's first batch."""
import torch

ACCUMULATION_STEPS = 4


class Trainer:
    def __init__(self):
        torch.manual_seed(0)
        self.model = torch.nn.Linear(8, 1)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.05)
        data = torch.utils.data.TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
        self.train_loader = torch.utils.data.DataLoader(data, batch_size=4)

    def update(self):
        for _ in range(ACCUMULATION_STEPS):
            x, y = next(iter(self.train_loader))  # expect: ACC009
            loss = torch.nn.functional.mse_loss(self.model(x), y) / ACCUMULATION_STEPS
            loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad()

    def fit(self, updates):
        for _ in range(updates):
            self.update()


Trainer().fit(8)
