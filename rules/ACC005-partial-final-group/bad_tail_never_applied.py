"""ACC005 bad: the update gate `(i + 1) % A == 0` ignores the epoch's last microbatches.

The loader holds 14 microbatches, not a multiple of A = 4 (the script even counts
`len(loader) // A` full groups): after the 3 full groups the last 2 microbatches are
backpropagated, but no update follows. Their gradients stay in `.grad`, join the first
update of the next epoch (6 microbatches, weighted 6/4), and the last epoch's tail is
never applied. Plain PyTorch, runs on CPU.
"""
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ACCUMULATION_STEPS = 4  # A: microbatches per optimizer update
MICROBATCH_SIZE = 8
MICROBATCHES_PER_EPOCH = 14  # 3 full groups of A, then 2 microbatches left over
EPOCHS = 2


def make_loader():
    inputs = torch.randn(MICROBATCHES_PER_EPOCH * MICROBATCH_SIZE, 16)
    targets = inputs.sum(dim=1, keepdim=True)
    return DataLoader(TensorDataset(inputs, targets), batch_size=MICROBATCH_SIZE, shuffle=True)


def main():
    torch.manual_seed(0)
    loader = make_loader()
    full_groups = len(loader) // ACCUMULATION_STEPS
    print(f"{len(loader)} microbatches per epoch: {full_groups} full groups of {ACCUMULATION_STEPS}")
    model = nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.MSELoss()

    pending = 0  # microbatches backpropagated since the last optimizer update
    applied = []  # microbatches that reached each optimizer update
    for epoch in range(EPOCHS):
        for i, (x, y) in enumerate(loader):
            loss = loss_fn(model(x), y) / ACCUMULATION_STEPS
            loss.backward()
            pending += 1
            if (i + 1) % ACCUMULATION_STEPS == 0:  # expect: ACC005
                optimizer.step()
                optimizer.zero_grad()
                applied.append(pending)
                pending = 0
        print(f"epoch {epoch}: last microbatch loss {loss.item() * ACCUMULATION_STEPS:.4f}")
    print(f"microbatches per optimizer update: {applied}")
    print(f"microbatches backpropagated but never applied: {pending}")


if __name__ == "__main__":
    main()
