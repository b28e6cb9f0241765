"""A helper fetches each microbatch with next(iter(loader)): every microbatch is the loader's first batch."""
import torch

ACCUMULATION_STEPS = 4


def get_batch(loader):
    return next(iter(loader))  # expect: ACC009


def main():
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    data = torch.utils.data.TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    train_loader = torch.utils.data.DataLoader(data, batch_size=4)
    for step in range(32):
        x, y = get_batch(train_loader)
        loss = torch.nn.functional.mse_loss(model(x), y) / ACCUMULATION_STEPS
        loss.backward()
        if (step + 1) % ACCUMULATION_STEPS == 0:
            optimizer.step()
            optimizer.zero_grad()


if __name__ == "__main__":
    main()
