"""ACC303 bad: scaler.unscale_() after every microbatch backward, scaler.step/update once per group.

GradScaler allows one unscale_ per optimizer between two update() calls: the second
microbatch's unscale_ raises RuntimeError (the symptom reported in Swin-Transformer
#311). Had it run only once, too early, the later contributions would stay multiplied by
the scale. Plain PyTorch with torch.amp.GradScaler("cpu"), runs on CPU; it catches and
prints the error to show where training stops.
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

    norms = []  # gradient norm logged after each microbatch
    try:
        for i, (x, y) in enumerate(loader):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = loss_fn(model(x).float(), y) / ACCUMULATION_STEPS
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)  # expect: ACC303
            norms.append(grad_norm(model))
            if (i + 1) % ACCUMULATION_STEPS == 0:
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad()
    except RuntimeError as error:
        print(f"training stopped at microbatch {i + 1}: RuntimeError: {error}")
        return
    print(f"gradient norms: {norms}")


if __name__ == "__main__":
    main()
