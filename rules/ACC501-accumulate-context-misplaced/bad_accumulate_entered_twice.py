"""ACC501 bad: accelerator.accumulate() entered twice per microbatch, once per model.

Each entry advances Accelerate's step counter, so with A = 4 the sync comes every 2
microbatches: the prepared optimizer updates twice per group of 4, each time on half a
group divided by A. Runs on CPU when `accelerate` is installed; it prints the number of
optimizer updates.
"""
import torch
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ACCUMULATION_STEPS = 4  # A: microbatches per optimizer update
MICROBATCH_SIZE = 8
GROUPS_PER_EPOCH = 3


def main():
    accelerator = Accelerator(gradient_accumulation_steps=ACCUMULATION_STEPS, cpu=True)
    torch.manual_seed(0)
    inputs = torch.randn(GROUPS_PER_EPOCH * ACCUMULATION_STEPS * MICROBATCH_SIZE, 16)
    loader = DataLoader(TensorDataset(inputs, inputs.sum(dim=1, keepdim=True)), batch_size=MICROBATCH_SIZE)
    encoder, decoder = nn.Linear(16, 8), nn.Linear(8, 1)
    optimizer = torch.optim.SGD(list(encoder.parameters()) + list(decoder.parameters()), lr=0.05)
    encoder, decoder, optimizer, loader = accelerator.prepare(encoder, decoder, optimizer, loader)
    updates = 0
    for x, y in loader:
        with accelerator.accumulate(encoder), accelerator.accumulate(decoder):  # expect: ACC501
            loss = nn.functional.mse_loss(decoder(encoder(x)), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            updates += int(accelerator.sync_gradients)
    accelerator.print(f"optimizer updates: {updates} for {len(loader)} microbatches (wanted {GROUPS_PER_EPOCH})")


if __name__ == "__main__":
    main()
