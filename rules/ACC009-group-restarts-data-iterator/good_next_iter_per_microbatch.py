"""A trainer class that keeps one iterator and starts a new one only when the epoch ends."""
import torch

ACCUMULATION_STEPS = 4


class Trainer:
    def __init__(self):
        torch.manual_seed(0)
        self.model = torch.nn.Linear(8, 1)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.05)
        data = torch.utils.data.TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
        self.train_loader = torch.utils.data.DataLoader(data, batch_size=4)

    def update(self, batches):
        for _ in range(ACCUMULATION_STEPS):
            x, y = next(batches)
            loss = torch.nn.functional.mse_loss(self.model(x), y) / ACCUMULATION_STEPS
            loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad()

    def fit(self, epochs):
        for _ in range(epochs):
            batches = iter(self.train_loader)
            for _ in range(len(self.train_loader) // ACCUMULATION_STEPS):
                self.update(batches)


Trainer().fit(2)
