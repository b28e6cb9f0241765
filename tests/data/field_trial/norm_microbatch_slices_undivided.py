# kind: missing-normalization (off by default), under AdamW: silent
# expect: nothing -- each slice's mean loss is backpropagated undivided, so the update applies the sum of len(batch)/microbatch slice means, but AdamW divides by the gradient's own scale and takes the same step (its SGD twin, norm_microbatch_slices_undivided_sgd.py, is ACC103)
# framework: plain-torch (DDP)
# pattern: micro-loop over slices of one batch inside a method, the forward under `no_sync()` for all but the last slice, the update in a sibling method
import torch


class Trainer:
    def __init__(self, ddp_model, microbatch, lr):
        self.ddp_model, self.microbatch = ddp_model, microbatch
        self.opt = torch.optim.AdamW(ddp_model.parameters(), lr=lr)

    def forward_backward(self, batch):
        self.opt.zero_grad()
        for i in range(0, batch.shape[0], self.microbatch):
            micro = batch[i : i + self.microbatch]
            last = (i + self.microbatch) >= batch.shape[0]
            if last:
                losses = self.ddp_model(micro)
            else:
                with self.ddp_model.no_sync():
                    losses = self.ddp_model(micro)
            loss = losses.mean()
            loss.backward()

    def optimize(self):
        self.opt.step()

    def run_step(self, batch):
        self.forward_backward(batch)
        self.optimize()
