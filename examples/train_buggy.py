"""A small regression training script with three gradient-accumulation bugs.

Each bug is marked on its line with the rule code accumlint reports there:
  ACC001  optimizer.zero_grad() at the top of the loop: only the last of the A
          microbatches of a group reaches the optimizer update;
  ACC201  `epoch_loss += loss` keeps every microbatch graph alive until the epoch ends;
  ACC304  scheduler.step() on every microbatch: the warmup/decay schedule, sized in
          optimizer updates, runs A times too fast.
train_fixed.py is the corrected twin. Plain PyTorch, runs on CPU in a few seconds.
"""
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ACCUMULATION_STEPS = 4  # A: microbatches per optimizer update
MICROBATCH_SIZE = 16
GROUPS_PER_EPOCH = 8
EPOCHS = 3
WARMUP_UPDATES = 4
PEAK_LR = 3e-3


def make_loader():
    features = torch.randn(GROUPS_PER_EPOCH * ACCUMULATION_STEPS * MICROBATCH_SIZE, 32)
    weights = torch.randn(32, 1)
    targets = torch.tanh(features @ weights) + 0.05 * torch.randn(len(features), 1)
    return DataLoader(TensorDataset(features, targets), batch_size=MICROBATCH_SIZE, shuffle=True)


def warmup_then_linear_decay(total_updates):
    def factor(updates_done):
        if updates_done < WARMUP_UPDATES:
            return (updates_done + 1) / WARMUP_UPDATES
        return max(0.0, (total_updates - updates_done) / (total_updates - WARMUP_UPDATES))

    return factor


def main():
    torch.manual_seed(0)
    loader = make_loader()
    assert len(loader) % ACCUMULATION_STEPS == 0  # no partial final group
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=PEAK_LR, weight_decay=0.01)
    total_updates = EPOCHS * len(loader) // ACCUMULATION_STEPS
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_then_linear_decay(total_updates))
    loss_fn = nn.MSELoss()

    updates_done = 0
    for epoch in range(EPOCHS):
        model.train()
        epoch_loss = 0.0
        for i, (x, y) in enumerate(loader):
            optimizer.zero_grad()  # expect: ACC001
            loss = loss_fn(model(x), y) / ACCUMULATION_STEPS
            loss.backward()
            epoch_loss += loss  # expect: ACC201
            if (i + 1) % ACCUMULATION_STEPS == 0:
                optimizer.step()
                updates_done += 1
            scheduler.step()  # expect: ACC304
        mean_group_loss = epoch_loss.item() / (len(loader) // ACCUMULATION_STEPS)
        print(
            f"epoch {epoch}: mean group loss {mean_group_loss:.4f}, "
            f"updates {updates_done}/{total_updates}, lr {scheduler.get_last_lr()[0]:.2e}"
        )


if __name__ == "__main__":
    main()
