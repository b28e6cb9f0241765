# kind: zero-grad-in-group
# expect: line 21 -- a reset right after each microbatch's backward (helper in steps.py) wipes the group before the gated update in maybe_update() runs
# framework: plain-torch (DDP)
# pattern: A travels in a dict (`info["accum_grad"]`); forward, backward, the gated update and the no_sync choice are helpers imported from a sibling module; the loop skips empty batches with `continue`
from steps import run_backward, run_forward, grad_sync_ctx, maybe_update


class Executor:
    def train(self, model, optimizer, scheduler, loader, configs):
        info = dict(configs)
        info["accum_grad"] = configs.get("accum_grad", 4)
        model.train()
        for batch_idx, batch in enumerate(loader):
            info["batch_idx"] = batch_idx
            if batch["lengths"].size(0) == 0:
                continue
            ctx = grad_sync_ctx(model, info)
            with ctx():
                info = run_forward(model, batch, info)
                info = run_backward(model, info)
            optimizer.zero_grad()
            info = maybe_update(model, optimizer, scheduler, info)
