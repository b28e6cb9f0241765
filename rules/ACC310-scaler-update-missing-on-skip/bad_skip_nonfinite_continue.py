"""ACC310 bad: a group with non-finite gradients is skipped with `continue` after
`scaler.unscale_(optimizer)`, before `scaler.update()`.

The skip is taken only when the unscaled gradient norm is not finite, which with a
float16 GradScaler happens whenever the scale overflows (often in the first updates, with
the initial scale of 65536). Then `scaler.update()` does not run: the scale is not
lowered, and the next group's `scaler.unscale_(optimizer)` raises RuntimeError
("unscale_() has already been called on this optimizer since the last update()").
This run's gradients stay finite, so it never takes the skip. Plain PyTorch, runs on CPU.
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
            optimizer.zero_grad()
            skipped += 1
            continue
        scaler.step(optimizer)
        scaler.update()  # expect: ACC310
        optimizer.zero_grad()
    print(f"groups skipped for non-finite gradients: {skipped}, scale {scaler.get_scale():g}")


if __name__ == "__main__":
    main()
