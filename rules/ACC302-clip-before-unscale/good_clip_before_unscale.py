"""ACC302 good: twin of bad_clip_before_unscale.py.

`scaler.unscale_(optimizer)` runs once per group, right before the clip: the clip sees
the true gradient and each update applies a gradient of norm max_norm (1.0 here);
scaler.step() does not unscale a second time. Plain PyTorch, runs on CPU.
"""
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ACCUMULATION_STEPS = 4  # A: microbatches per optimizer update
MICROBATCH_SIZE = 8
GROUPS_PER_EPOCH = 3
MAX_GRAD_NORM = 1.0
LEARNING_RATE = 0.05


def make_loader():
    inputs = torch.randn(GROUPS_PER_EPOCH * ACCUMULATION_STEPS * MICROBATCH_SIZE, 16)
    targets = 3.0 * inputs.sum(dim=1, keepdim=True)
    return DataLoader(TensorDataset(inputs, targets), batch_size=MICROBATCH_SIZE, shuffle=True)


def main():
    torch.manual_seed(0)
    loader = make_loader()
    assert len(loader) % ACCUMULATION_STEPS == 0  # no partial final group
    model = nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
    scaler = torch.amp.GradScaler("cpu")
    loss_fn = nn.MSELoss()

    applied_norms = []  # norm of the gradient each optimizer update applied (parameter change / lr)
    for i, (x, y) in enumerate(loader):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = loss_fn(model(x).float(), y) / ACCUMULATION_STEPS
        scaler.scale(loss).backward()
        if (i + 1) % ACCUMULATION_STEPS == 0:
            before = torch.cat([p.detach().flatten().clone() for p in model.parameters()])
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
            after = torch.cat([p.detach().flatten() for p in model.parameters()])
            applied_norms.append(((before - after).norm() / LEARNING_RATE).item())
    print(f"gradient norm applied by each update: {[f'{n:.2e}' for n in applied_norms]} (wanted {MAX_GRAD_NORM})")


if __name__ == "__main__":
    main()
