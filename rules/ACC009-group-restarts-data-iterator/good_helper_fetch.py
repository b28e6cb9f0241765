"""The helper draws from one iterator and makes a new one only when the loader's epoch ends."""
import torch

ACCUMULATION_STEPS = 4


def get_batch(state, loader):
    try:
        return next(state["batches"])
    except StopIteration:
        state["batches"] = iter(loader)
        return next(state["batches"])


def main():
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    data = torch.utils.data.TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    train_loader = torch.utils.data.DataLoader(data, batch_size=4)
    state = {"batches": iter(train_loader)}
    for step in range(32):
        x, y = get_batch(state, train_loader)
        loss = torch.nn.functional.mse_loss(model(x), y) / ACCUMULATION_STEPS
        loss.backward()
        if (step + 1) % ACCUMULATION_STEPS == 0:
            optimizer.step()
            optimizer.zero_grad()


if __name__ == "__main__":
    main()
