"""ACC503 good: distillation from a prepared teacher that is only run under `no_grad` and is in
no optimizer: `accumulate(student)` names every model the block trains.

Accelerate on CPU.
"""
import torch
from accelerate import Accelerator
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

ACCUMULATION_STEPS = 4  # A: microbatches per optimizer update
MICROBATCH_SIZE = 8
GROUPS_PER_EPOCH = 3


def main():
    torch.manual_seed(0)
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=ACCUMULATION_STEPS)
    inputs = torch.randn(GROUPS_PER_EPOCH * ACCUMULATION_STEPS * MICROBATCH_SIZE, 16)
    loader = DataLoader(TensorDataset(inputs), batch_size=MICROBATCH_SIZE)
    student = nn.Linear(16, 4)
    teacher = nn.Linear(16, 4)
    optimizer = torch.optim.SGD(student.parameters(), lr=0.05)
    student, teacher, optimizer, loader = accelerator.prepare(student, teacher, optimizer, loader)
    teacher.eval()
    for (x,) in loader:
        with accelerator.accumulate(student):
            with torch.no_grad():
                target = teacher(x).softmax(dim=-1)
            loss = F.kl_div(student(x).log_softmax(dim=-1), target, reduction="batchmean")
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()


if __name__ == "__main__":
    main()
