"""ACC102 bad: per-microbatch token-mean cross entropy divided by A on variable-length data.

Each microbatch's loss is the mean over its own supervised tokens (`ignore_index=-100`
skips the padding), then divided by A = 4. Sequence lengths vary (a few long ones among
many short ones), so the microbatches of a group hold very different token counts, yet
every microbatch weighs 1/4 of the update: a token in a short microbatch counts several
times more than a token in a long one. The update follows a mean of microbatch means,
not the group's mean over tokens. Plain PyTorch, runs on CPU.
"""
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ACCUMULATION_STEPS = 4  # A: microbatches per optimizer update
MICROBATCH_SIZE = 8
GROUPS_PER_EPOCH = 3
EPOCHS = 2
SEQ_LEN = 32  # padded sequence length
FEATURES = 16
VOCAB = 10


def make_loader():
    n = GROUPS_PER_EPOCH * ACCUMULATION_STEPS * MICROBATCH_SIZE
    inputs = torch.randn(n, SEQ_LEN, FEATURES)
    labels = inputs[..., :VOCAB].argmax(dim=-1)  # one label per token position
    long = torch.rand(n) < 0.25  # a quarter of the sequences are long, the rest short
    lengths = torch.where(long, torch.randint(17, SEQ_LEN + 1, (n,)), torch.randint(1, 9, (n,)))
    labels[torch.arange(SEQ_LEN) >= lengths[:, None]] = -100  # padding: not supervised
    return DataLoader(TensorDataset(inputs, labels), batch_size=MICROBATCH_SIZE, shuffle=True)


def main():
    torch.manual_seed(0)
    loader = make_loader()
    assert len(loader) % ACCUMULATION_STEPS == 0  # no partial final group
    model = nn.Linear(FEATURES, VOCAB)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)

    for epoch in range(EPOCHS):
        for i, (x, y) in enumerate(loader):
            logits = model(x)
            loss = F.cross_entropy(logits.view(-1, VOCAB), y.view(-1), ignore_index=-100)
            loss = loss / ACCUMULATION_STEPS  # expect: ACC102
            loss.backward()
            if (i + 1) % ACCUMULATION_STEPS == 0:
                optimizer.step()
                optimizer.zero_grad()
        print(f"epoch {epoch}: last microbatch token-mean loss {loss.item() * ACCUMULATION_STEPS:.4f}")


if __name__ == "__main__":
    main()
