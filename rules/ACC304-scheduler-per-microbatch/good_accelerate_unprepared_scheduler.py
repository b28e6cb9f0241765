"""ACC304 good: twin of bad_accelerate_unprepared_scheduler.py.

The scheduler goes through accelerator.prepare(); inside accumulate() the prepared
scheduler skips the calls of non-sync microbatches, so it advances once per optimizer
update. Runs on CPU when `accelerate` is installed.
"""
import torch
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ACCUMULATION_STEPS = 4  # A: microbatches per optimizer update
MICROBATCH_SIZE = 8
GROUPS_PER_EPOCH = 3
EPOCHS = 2


def make_loader():
    inputs = torch.randn(GROUPS_PER_EPOCH * ACCUMULATION_STEPS * MICROBATCH_SIZE, 16)
    targets = inputs.sum(dim=1, keepdim=True)
    return DataLoader(TensorDataset(inputs, targets), batch_size=MICROBATCH_SIZE, shuffle=True)


def main():
    accelerator = Accelerator(gradient_accumulation_steps=ACCUMULATION_STEPS, cpu=True)
    torch.manual_seed(0)
    loader = make_loader()
    model = nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    # sized in optimizer updates of the single-process run, from the unprepared loader
    total_updates = EPOCHS * len(loader) // ACCUMULATION_STEPS
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda updates_done: max(0.0, 1.0 - updates_done / total_updates)
    )
    loss_fn = nn.MSELoss()
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    assert len(loader) % ACCUMULATION_STEPS == 0  # no partial final group

    for epoch in range(EPOCHS):
        epoch_loss = 0.0
        for x, y in loader:
            with accelerator.accumulate(model):
                loss = loss_fn(model(x), y)
                accelerator.backward(loss)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            epoch_loss += loss.item()
        accelerator.print(f"epoch {epoch}: mean microbatch loss {epoch_loss / len(loader):.4f}")
    accelerator.print(f"final learning rate {scheduler.get_last_lr()[0]:.4f}")


if __name__ == "__main__":
    main()
