"""ACC303 good: twin of bad_unscale_every_microbatch.py.

unscale_, step and update run once per group, after its last backward: the gradient
norm is logged once per optimizer update, on the unscaled accumulated gradient. Plain
PyTorch, runs on CPU.
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


def grad_norm(model):
    return torch.cat([p.grad.flatten() for p in model.parameters()]).norm().item()


def main():
    torch.manual_seed(0)
    loader = make_loader()
    assert len(loader) % ACCUMULATION_STEPS == 0  # no partial final group
    model = nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler("cpu")
    loss_fn = nn.MSELoss()

    norms = []  # gradient norm logged at each optimizer update
    try:
        for i, (x, y) in enumerate(loader):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = loss_fn(model(x).float(), y) / ACCUMULATION_STEPS
            scaler.scale(loss).backward()
            if (i + 1) % ACCUMULATION_STEPS == 0:
                scaler.unscale_(optimizer)
                norms.append(grad_norm(model))
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad()
    except RuntimeError as error:
        print(f"training stopped at microbatch {i + 1}: RuntimeError: {error}")
        return
    print(f"gradient norm at each of the {len(norms)} updates: {[round(n, 3) for n in norms]}")


if __name__ == "__main__":
    main()
