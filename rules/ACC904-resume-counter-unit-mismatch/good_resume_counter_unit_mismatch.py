"""ACC904 good: the checkpoint stores both counters, and resume restores each from its own.

Plain PyTorch, runs on CPU; the resumed run makes the updates that were left.
"""
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ACCUMULATION_STEPS = 4  # A: microbatches per optimizer update
MICROBATCH_SIZE = 8
GROUPS_PER_EPOCH = 3
TOTAL_UPDATES = 6


def train(model, optimizer, loader, state):
    micro_step = 0
    completed_updates = 0
    if state is not None:
        micro_step = state["micro_step"]
        completed_updates = state["completed_updates"]
    made = 0
    for i, (x, y) in enumerate(loader):
        if completed_updates >= TOTAL_UPDATES:
            break
        loss = nn.functional.mse_loss(model(x), y) / ACCUMULATION_STEPS
        loss.backward()
        micro_step += 1
        if (i + 1) % ACCUMULATION_STEPS == 0:
            optimizer.step()
            optimizer.zero_grad()
            completed_updates += 1
            made += 1
    return {"micro_step": micro_step, "completed_updates": completed_updates}, made


def main():
    torch.manual_seed(0)
    inputs = torch.randn(GROUPS_PER_EPOCH * ACCUMULATION_STEPS * MICROBATCH_SIZE, 16)
    loader = DataLoader(TensorDataset(inputs, inputs.sum(dim=1, keepdim=True)), batch_size=MICROBATCH_SIZE)
    model = nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    state, first = train(model, optimizer, loader, None)
    _, resumed = train(model, optimizer, loader, state)
    print(f"first run: {first} updates; resumed run: {resumed} updates (wanted {TOTAL_UPDATES - first})")


if __name__ == "__main__":
    main()
