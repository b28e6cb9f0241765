"""Accelerate: the log point on the update counter sits under `if accelerator.sync_gradients:`."""
import torch
from accelerate import Accelerator

ACCUMULATION_STEPS = 4
LOG_EVERY = 2  # optimizer updates


def main():
    torch.manual_seed(0)
    accelerator = Accelerator(gradient_accumulation_steps=ACCUMULATION_STEPS, cpu=True)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    data = torch.utils.data.TensorDataset(torch.randn(16 * ACCUMULATION_STEPS, 8), torch.randn(16 * ACCUMULATION_STEPS, 1))
    loader = torch.utils.data.DataLoader(data, batch_size=4)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    completed_updates = 0
    for epoch in range(2):
        for x, y in loader:
            with accelerator.accumulate(model):
                loss = torch.nn.functional.mse_loss(model(x), y)
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
            if accelerator.sync_gradients:
                completed_updates += 1
                if completed_updates % LOG_EVERY == 0:
                    accelerator.log({"loss": loss.item()}, step=completed_updates)


if __name__ == "__main__":
    main()
