"""ACC301 bad: accelerator.clip_grad_norm_ inside accumulate() without `if accelerator.sync_gradients:`.

Accelerate gates the prepared optimizer's step() and zero_grad(), not the clip: it runs
on every microbatch and clips partial sums of the group's gradient (under fp16 it also
unscales every time, and the second unscale before the update raises). Runs on CPU when
`accelerate` is installed; it prints how many times the clip ran per optimizer update.
"""
import torch
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ACCUMULATION_STEPS = 4  # A: microbatches per optimizer update
MICROBATCH_SIZE = 8
GROUPS_PER_EPOCH = 3
MAX_GRAD_NORM = 1.0


def make_loader():
    inputs = torch.randn(GROUPS_PER_EPOCH * ACCUMULATION_STEPS * MICROBATCH_SIZE, 16)
    targets = 3.0 * inputs.sum(dim=1, keepdim=True)
    return DataLoader(TensorDataset(inputs, targets), batch_size=MICROBATCH_SIZE, shuffle=True)


def main():
    accelerator = Accelerator(gradient_accumulation_steps=ACCUMULATION_STEPS, cpu=True)
    torch.manual_seed(0)
    loader = make_loader()
    model = nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.MSELoss()
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    assert len(loader) % ACCUMULATION_STEPS == 0  # no partial final group

    clips = 0
    for x, y in loader:
        with accelerator.accumulate(model):
            loss = loss_fn(model(x), y)
            accelerator.backward(loss)
            accelerator.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)  # expect: ACC301
            clips += 1
            optimizer.step()
            optimizer.zero_grad()
    updates = len(loader) // ACCUMULATION_STEPS
    accelerator.print(f"{clips} clips for {updates} optimizer updates ({clips // updates} per update, wanted 1)")


if __name__ == "__main__":
    main()
