"""ACC102 good: twin of bad_token_mean_divided_by_a.py.

Each microbatch backpropagates the *sum* of its token losses (`reduction="sum"`); the
group's supervised tokens are counted as the microbatches come, and at the group
boundary the accumulated gradients are divided by that count (torchtune's recipe). The
update follows the group's mean over tokens: every supervised token weighs the same,
whatever the microbatch it sits in. Plain PyTorch, runs on CPU.
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

    group_tokens = 0  # supervised tokens of the current group
    for epoch in range(EPOCHS):
        for i, (x, y) in enumerate(loader):
            logits = model(x)
            loss_sum = F.cross_entropy(logits.view(-1, VOCAB), y.view(-1), ignore_index=-100, reduction="sum")
            loss_sum.backward()
            tokens = int((y != -100).sum())
            group_tokens += tokens
            if (i + 1) % ACCUMULATION_STEPS == 0:
                for p in model.parameters():
                    p.grad /= group_tokens  # gradient of the group's token mean
                optimizer.step()
                optimizer.zero_grad()
                group_tokens = 0
        print(f"epoch {epoch}: last microbatch token-mean loss {loss_sum.item() / tokens:.4f}")


if __name__ == "__main__":
    main()
