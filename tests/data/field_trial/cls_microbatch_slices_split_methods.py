# kind: zero-grad-in-group
# expect: line 27 -- the optimizer reset after each slice's backward wipes the slices accumulated before it; the update (in another method) applies only the last slice
# framework: plain-torch (DDP)
# pattern: one batch split into slices `range(0, len(batch), self.microbatch)` in `forward_backward()`; the reset is a module function over the parameter list; the update is `self.opt.step()` in `optimize()`; `run_step()` calls both
import torch


def zero_grad(params):
    for p in params:
        if p.grad is not None:
            p.grad.detach_()
            p.grad.zero_()


class Trainer:
    def __init__(self, model, ddp_model, microbatch, lr):
        self.model, self.ddp_model, self.microbatch = model, ddp_model, microbatch
        self.params = list(model.parameters())
        self.opt = torch.optim.AdamW(self.params, lr=lr)

    def forward_backward(self, batch):
        zero_grad(self.params)
        for i in range(0, batch.shape[0], self.microbatch):
            micro = batch[i : i + self.microbatch]
            loss = self.ddp_model(micro).mean() * micro.shape[0] / batch.shape[0]
            loss.backward()
            self.opt.zero_grad()

    def optimize(self):
        self.opt.step()

    def run_step(self, batch):
        self.forward_backward(batch)
        self.optimize()
