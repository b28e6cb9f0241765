"""ACC106 bad: Accelerate, a mean loss multiplied by the number of processes.

`nn.CrossEntropyLoss()` averages over the microbatch of this process; the model that
`accelerator.prepare` wraps in DDP averages the processes' gradients. Multiplying by
`accelerator.num_processes` "to undo the averaging" makes every update D times the mean
over the effective batch. Runs on CPU when `accelerate` is installed.
"""
import torch
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ACCUMULATION_STEPS = 4  # A: microbatches per optimizer update
MICROBATCH_SIZE = 8
GROUPS_PER_EPOCH = 3


def make_loader():
    inputs = torch.randn(GROUPS_PER_EPOCH * ACCUMULATION_STEPS * MICROBATCH_SIZE, 16)
    labels = (inputs.sum(dim=1) > 0).long()
    return DataLoader(TensorDataset(inputs, labels), batch_size=MICROBATCH_SIZE, shuffle=True)


def main():
    accelerator = Accelerator(gradient_accumulation_steps=ACCUMULATION_STEPS, cpu=True)
    torch.manual_seed(0)
    model = nn.Linear(16, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    criterion = nn.CrossEntropyLoss()
    model, optimizer, loader = accelerator.prepare(model, optimizer, make_loader())
    total = 0.0
    for x, labels in loader:
        with accelerator.accumulate(model):
            loss = criterion(model(x), labels)
            accelerator.backward(loss * accelerator.num_processes)  # expect: ACC106
            optimizer.step()
            optimizer.zero_grad()
        total += loss.item()
    accelerator.print(f"mean microbatch loss {total / len(loader):.4f}")


if __name__ == "__main__":
    main()
