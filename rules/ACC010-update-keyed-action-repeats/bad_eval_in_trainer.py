"""A trainer class evaluates on its update counter from the per-microbatch method: A evaluations per update."""
import torch

ACCUMULATION_STEPS = 4
EVAL_EVERY = 2  # optimizer updates


def evaluate(model, loader):
    model.eval()
    total = 0.0
    with torch.no_grad():
        for x, y in loader:
            total += torch.nn.functional.mse_loss(model(x), y).item()
    model.train()
    return total / len(loader)


class Trainer:
    def __init__(self):
        torch.manual_seed(0)
        self.model = torch.nn.Linear(8, 1)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.05)
        train = torch.utils.data.TensorDataset(torch.randn(16 * ACCUMULATION_STEPS, 8), torch.randn(16 * ACCUMULATION_STEPS, 1))
        val = torch.utils.data.TensorDataset(torch.randn(16, 8), torch.randn(16, 1))
        self.train_loader = torch.utils.data.DataLoader(train, batch_size=4)
        self.val_loader = torch.utils.data.DataLoader(val, batch_size=4)
        self.updates = 0

    def fit(self, epochs):
        for _ in range(epochs):
            for i, (x, y) in enumerate(self.train_loader):
                loss = torch.nn.functional.mse_loss(self.model(x), y) / ACCUMULATION_STEPS
                loss.backward()
                if (i + 1) % ACCUMULATION_STEPS == 0:
                    self.optimizer.step()
                    self.optimizer.zero_grad()
                    self.updates += 1
                if self.updates % EVAL_EVERY == 1:
                    val = evaluate(self.model, self.val_loader)  # expect: ACC010
                    print(f"update {self.updates}: val {val:.4f}")


Trainer().fit(2)
