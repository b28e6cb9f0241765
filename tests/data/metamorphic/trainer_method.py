"""A training loop inside a method that reads its objects from ``self``: the shape the
``extract.own_method`` transformation needs and the catalogue's scripts do not have."""
import torch


class Trainer:
    def __init__(self, model, loader, accumulation_steps=4):
        self.model = model
        self.loader = loader
        self.accumulation_steps = accumulation_steps
        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def train_epoch(self):
        for i, (x, y) in enumerate(self.loader):
            loss = torch.nn.functional.mse_loss(self.model(x), y) / self.accumulation_steps
            loss.backward()
            if (i + 1) % self.accumulation_steps == 0:
                self.optimizer.step()
                self.optimizer.zero_grad()
