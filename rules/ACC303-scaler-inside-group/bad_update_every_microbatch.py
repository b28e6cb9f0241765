"""ACC303 bad: scaler.update() on every microbatch while scaler.step() runs once per group.

update() is meant to follow a step() attempt: called on a microbatch with no step since
the last update it raises AssertionError ("No inf checks were recorded prior to
update."). Where it did not raise, it would change the scale inside the group, so the
microbatches' contributions would be summed at different scales. Plain PyTorch with
torch.amp.GradScaler("cpu"), runs on CPU; it catches and prints the error.
"""
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ACCUMULATION_STEPS = 4  # A: microbatches per optimizer update
MICROBATCH_SIZE = 8
GROUPS_PER_EPOCH = 3


def make_loader():
    inputs = torch.randn(GROUPS_PER_EPOCH * ACCUMULATION_STEPS * MICROBATCH_SIZE, 16)
    targets = inputs.sum(dim=1, keepdim=True)
    return DataLoader(TensorDataset(inputs, targets), batch_size=MICROBATCH_SIZE, shuffle=True)


def main():
    torch.manual_seed(0)
    loader = make_loader()
    assert len(loader) % ACCUMULATION_STEPS == 0  # no partial final group
    model = nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler("cpu")
    loss_fn = nn.MSELoss()

    try:
        for i, (x, y) in enumerate(loader):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = loss_fn(model(x).float(), y) / ACCUMULATION_STEPS
            scaler.scale(loss).backward()
            if (i + 1) % ACCUMULATION_STEPS == 0:
                scaler.step(optimizer)
                optimizer.zero_grad()
            scaler.update()  # expect: ACC303
    except AssertionError as error:
        print(f"training stopped at microbatch {i + 1}: AssertionError: {error}")
        return
    print("finished")


if __name__ == "__main__":
    main()
