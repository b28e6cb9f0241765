# kind: mean-of-means
# expect: line 30 -- the helper returns a mean over this microbatch's non-ignored label tokens (labels right-padded with -1 to the longest sequence), and the caller divides it by A: microbatches with few supervised tokens weigh as much as long ones
# framework: fabric
# pattern: the loss comes from a same-module helper `loss_fn(logits, targets)` (shift + cross_entropy(ignore_index=-1)); the batch comes from a padding helper in the same file
import torch
import torch.nn.functional as F


def loss_fn(logits, targets):
    logits = logits[..., :-1, :].contiguous()
    targets = targets[..., 1:].contiguous()
    return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)


def pad_batch(samples):
    longest = max(len(s["labels"]) for s in samples)
    x = torch.stack([torch.cat((s["ids"], s["ids"].new_zeros(longest - len(s["ids"])))) for s in samples])
    y = torch.stack([torch.cat((s["labels"], s["labels"].new_full((longest - len(s["labels"]),), -1))) for s in samples])
    return x, y


def finetune(fabric, model, optimizer, batches, accum, max_iters):
    for it, samples in enumerate(batches):
        if it >= max_iters:
            break
        x, y = pad_batch(samples)
        with fabric.no_backward_sync(model, enabled=(it + 1) % accum != 0):
            logits = model(x)
            loss = loss_fn(logits, y)
            fabric.backward(loss / accum)
        if (it + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
