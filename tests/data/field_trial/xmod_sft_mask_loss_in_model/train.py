# kind: mean-of-means
# expect: line 33 -- the model's forward returns a mean over the supervised tokens only (prompt and padding targets set to -1 by the loader below), and the micro-loop divides it by A: conversations with few answer tokens weigh as much as long ones
# framework: plain-torch (DDP-free)
# pattern: the loss lives in model.py's forward (ignore_index=-1, default reduction "mean"); the -1 mask is written by a generator in this file; prefetch-style micro-loop `for micro in range(A)`
import torch

from model import TinyGPT


def sft_batches(conversations, batch_rows, pad_id):
    while True:
        rows = [next(conversations) for _ in range(batch_rows)]
        width = max(len(ids) for ids, _ in rows)
        inputs = torch.full((batch_rows, width), pad_id)
        targets = torch.full((batch_rows, width), -1)
        for r, (ids, answer_mask) in enumerate(rows):
            inputs[r, : len(ids)] = torch.tensor(ids)
            t = torch.tensor(ids[1:] + [pad_id])
            t[torch.tensor(answer_mask) == 0] = -1
            targets[r, : len(ids)] = t
        yield inputs, targets


def train(conversations, vocab, dim, accum, num_updates, pad_id):
    model = TinyGPT(vocab, dim)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    loader = sft_batches(conversations, 4, pad_id)
    x, y = next(loader)
    for update in range(num_updates):
        for micro in range(accum):
            loss = model(x, y)
            train_loss = loss.detach()
            loss = loss / accum
            loss.backward()
            x, y = next(loader)
        optimizer.step()
        model.zero_grad(set_to_none=True)
    return train_loss
