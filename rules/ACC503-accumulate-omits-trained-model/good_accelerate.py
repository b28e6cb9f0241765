"""ACC503 good: both prepared models the backward trains are passed to one `accumulate()`.

Accelerate on CPU: both DDP wrappers (under `accelerate launch`) defer their all-reduce to the
group's last microbatch.
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
    labels = torch.randint(0, 4, (len(inputs),))
    loader = DataLoader(TensorDataset(inputs, labels), batch_size=MICROBATCH_SIZE)
    encoder = nn.Sequential(nn.Linear(16, 32), nn.ReLU())
    head = nn.Linear(32, 4)
    encoder_optimizer = torch.optim.AdamW(encoder.parameters(), lr=1e-3)
    head_optimizer = torch.optim.AdamW(head.parameters(), lr=1e-2)
    encoder, head, encoder_optimizer, head_optimizer, loader = accelerator.prepare(
        encoder, head, encoder_optimizer, head_optimizer, loader)
    for x, y in loader:
        with accelerator.accumulate(encoder, head):
            loss = F.cross_entropy(head(encoder(x)), y)
            accelerator.backward(loss)
            encoder_optimizer.step()
            head_optimizer.step()
            encoder_optimizer.zero_grad()
            head_optimizer.zero_grad()


if __name__ == "__main__":
    main()
