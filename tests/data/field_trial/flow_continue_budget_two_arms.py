# kind: zero-grad-in-group
# expect: line 22 -- the reset after the full-precision backward runs on every microbatch, so each update keeps only the last microbatch of its group
# framework: plain-torch
# pattern: the micro-loop skips microbatches past the epoch's update budget with `continue`, and the backward sits in one arm of an `if use_amp / else`
import torch.nn.functional as F


def run_epoch(net, batches, opt, scaler_fn, accum, updates_per_epoch, use_amp=False):
    opt.zero_grad()
    for i, (x, y) in enumerate(batches):
        update_idx = i // accum
        if update_idx >= updates_per_epoch:
            continue
        loss = F.cross_entropy(net(x), y)
        loss /= accum
        if use_amp:
            scaler_fn(loss, opt, update_grad=(i + 1) % accum == 0)
            if (i + 1) % accum == 0:
                opt.zero_grad()
        else:
            loss.backward()
            opt.zero_grad()
            if (i + 1) % accum == 0:
                opt.step()
                opt.zero_grad()
