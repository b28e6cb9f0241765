"""ACC306 bad: a scheduler handed to deepspeed.initialize, stepped again by the user.

`engine.step()` steps the engine's `lr_scheduler` at every accumulation boundary; the
manual `lr_scheduler.step()` at the same boundary advances it a second time, so warmup
and decay run twice as fast. Needs DeepSpeed and a launcher: the catalogue only parses it.
"""
import deepspeed
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ACCUMULATION_STEPS = 4  # A: microbatches per optimizer update (the engine's GAS)
MICROBATCH_SIZE = 8
TOTAL_UPDATES = 100
WARMUP_UPDATES = 10
DS_CONFIG = {
    "train_micro_batch_size_per_gpu": MICROBATCH_SIZE,
    "gradient_accumulation_steps": ACCUMULATION_STEPS,
}


def warmup_then_linear_decay(update):
    if update < WARMUP_UPDATES:
        return (update + 1) / WARMUP_UPDATES
    return max(0.0, (TOTAL_UPDATES - update) / (TOTAL_UPDATES - WARMUP_UPDATES))


def main():
    inputs = torch.randn(TOTAL_UPDATES * ACCUMULATION_STEPS * MICROBATCH_SIZE, 16)
    loader = DataLoader(TensorDataset(inputs, inputs.sum(dim=1, keepdim=True)), batch_size=MICROBATCH_SIZE)
    model = nn.Linear(16, 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_then_linear_decay)
    engine, optimizer, _, lr_scheduler = deepspeed.initialize(
        model=model, optimizer=optimizer, lr_scheduler=scheduler, config=DS_CONFIG
    )
    loss_fn = nn.MSELoss()
    for x, y in loader:
        loss = loss_fn(engine(x.to(engine.device)), y.to(engine.device))
        engine.backward(loss)
        engine.step()  # steps lr_scheduler at the boundary
        if engine.is_gradient_accumulation_boundary():
            lr_scheduler.step()  # expect: ACC306


if __name__ == "__main__":
    main()
