"""`idx % A == 0` on a 0-based index: the first group has one microbatch (ACC006)."""
import torch


def run(model, loader, opt, accum=16):
    updates = 0
    model.train()
    for idx, (tokens, labels) in enumerate(loader):
        out = model(tokens)
        loss = torch.nn.functional.cross_entropy(out, labels) / accum
        loss.backward()
        if idx % accum == 0:
            opt.step()
            opt.zero_grad()
            updates += 1
    return updates
