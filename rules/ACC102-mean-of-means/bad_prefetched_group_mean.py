"""ACC102 bad: a causal-LM style loop over prefetched groups, each microbatch's mean
token loss divided by A.

The A microbatches of a group are taken from the loader first, then trained one after
the other. The criterion averages over each microbatch's supervised next-token
positions (`ignore_index=-100` skips padding), and the result is divided by A = 4: a
microbatch with 36 supervised positions weighs as much as one with 106. Plain PyTorch,
runs on CPU.
"""
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ACCUMULATION_STEPS = 4  # A: microbatches per optimizer update
MICROBATCH_SIZE = 8
GROUPS_PER_EPOCH = 3
EPOCHS = 2
SEQ_LEN = 32  # padded sequence length
VOCAB = 10


def make_loader():
    n = GROUPS_PER_EPOCH * ACCUMULATION_STEPS * MICROBATCH_SIZE
    first = torch.randint(0, VOCAB, (n, 1))
    input_ids = (first + torch.arange(SEQ_LEN)) % VOCAB  # each token follows its predecessor
    long = torch.rand(n) < 0.25  # a quarter of the sequences are long, the rest short
    lengths = torch.where(long, torch.randint(17, SEQ_LEN + 1, (n,)), torch.randint(2, 9, (n,)))
    labels = input_ids.clone()
    labels[torch.arange(SEQ_LEN) >= lengths[:, None]] = -100  # padding: not supervised
    return DataLoader(TensorDataset(input_ids, labels), batch_size=MICROBATCH_SIZE, shuffle=True)


def main():
    torch.manual_seed(0)
    loader = make_loader()
    model = nn.Sequential(nn.Embedding(VOCAB, 16), nn.Linear(16, VOCAB))  # a tiny language model
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    criterion = nn.CrossEntropyLoss(ignore_index=-100)

    for epoch in range(EPOCHS):
        batches = iter(loader)
        for _ in range(len(loader) // ACCUMULATION_STEPS):
            group = [next(batches) for _ in range(ACCUMULATION_STEPS)]
            for input_ids, labels in group:
                logits = model(input_ids)
                shift_logits = logits[:, :-1, :].reshape(-1, VOCAB)  # position t predicts token t + 1
                shift_labels = labels[:, 1:].reshape(-1)
                loss = criterion(shift_logits, shift_labels) / ACCUMULATION_STEPS  # expect: ACC102
                loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        print(f"epoch {epoch}: last microbatch token-mean loss {loss.item() * ACCUMULATION_STEPS:.4f}")


if __name__ == "__main__":
    main()
