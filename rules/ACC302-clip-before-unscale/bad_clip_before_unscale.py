"""ACC302 bad: clip_grad_norm_ on gradients still multiplied by the GradScaler's scale.

The clip runs at the group boundary (right cadence) but before `scaler.unscale_`: it
measures the scaled norm (x 65536 at first) and shrinks the gradients to max_norm in
*scaled* units; scaler.step() then divides by the scale, so every update moves the
parameters by a gradient of norm max_norm / 65536. Plain PyTorch with
torch.amp.GradScaler("cpu"), runs on CPU; it prints the norm each update applied.
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
            torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)  # expect: ACC302
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
            after = torch.cat([p.detach().flatten() for p in model.parameters()])
            applied_norms.append(((before - after).norm() / LEARNING_RATE).item())
    print(f"gradient norm applied by each update: {[f'{n:.2e}' for n in applied_norms]} (wanted {MAX_GRAD_NORM})")


if __name__ == "__main__":
    main()
