"""ACC310 good: twin of bad_skip_nonfinite_continue.py.

The skip path calls `scaler.update()` before it leaves the group: the scale is lowered
and the next group's `scaler.unscale_(optimizer)` starts afresh. Plain PyTorch, runs on CPU.
"""
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ACCUMULATION_STEPS = 4  # A: microbatches per optimizer update
MICROBATCH_SIZE = 8
GROUPS_PER_EPOCH = 3
MAX_GRAD_NORM = 1.0


def make_loader():
    inputs = torch.randn(GROUPS_PER_EPOCH * ACCUMULATION_STEPS * MICROBATCH_SIZE, 16)
    targets = inputs.sum(dim=1, keepdim=True)
    return DataLoader(TensorDataset(inputs, targets), batch_size=MICROBATCH_SIZE)


def main():
    torch.manual_seed(0)
    loader = make_loader()
    model = nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler("cpu")
    loss_fn = nn.MSELoss()

    skipped = 0
    for i, (x, y) in enumerate(loader):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = loss_fn(model(x).float(), y) / ACCUMULATION_STEPS
        scaler.scale(loss).backward()
        if (i + 1) % ACCUMULATION_STEPS != 0:
            continue
        scaler.unscale_(optimizer)
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)
        if not torch.isfinite(grad_norm):
            scaler.update()
            optimizer.zero_grad()
            skipped += 1
            continue
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
    print(f"groups skipped for non-finite gradients: {skipped}, scale {scaler.get_scale():g}")


if __name__ == "__main__":
    main()
