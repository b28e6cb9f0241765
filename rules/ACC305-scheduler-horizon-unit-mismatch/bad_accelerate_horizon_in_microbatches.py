"""ACC305 bad: Accelerate, a prepared scheduler sized in microbatches of the prepared loader.

Inside `accelerator.accumulate()` the prepared scheduler advances once per optimizer update
(times `num_processes`), but its horizon `len(loader) * EPOCHS` counts microbatches (the
shape of Accelerate's own `by_feature/gradient_accumulation.py`): on one process the run
ends a quarter of the way into the linear decay. Runs on CPU when `accelerate` is installed.
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
    model = nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model, optimizer, loader = accelerator.prepare(model, optimizer, make_loader())
    assert len(loader) % ACCUMULATION_STEPS == 0  # no partial final group
    scheduler = torch.optim.lr_scheduler.LinearLR(
        optimizer, start_factor=1.0, end_factor=0.0,
        total_iters=len(loader) * EPOCHS,  # expect: ACC305
    )
    scheduler = accelerator.prepare(scheduler)
    loss_fn = nn.MSELoss()

    update_lrs = []  # learning rate used by each optimizer update
    for epoch in range(EPOCHS):
        for x, y in loader:
            with accelerator.accumulate(model):
                loss = loss_fn(model(x), y)
                accelerator.backward(loss)
                if accelerator.sync_gradients:
                    update_lrs.append(optimizer.param_groups[0]["lr"])
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
        accelerator.print(f"epoch {epoch}: last microbatch loss {loss.item():.4f}")
    accelerator.print(f"learning rates of the {len(update_lrs)} updates: {[round(lr, 4) for lr in update_lrs]}")
    accelerator.print(f"learning rate at the end of training: {scheduler.get_last_lr()[0]:.4f} (planned: 0)")


if __name__ == "__main__":
    main()
