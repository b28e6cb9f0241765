# kind: missing-normalization (off by default), the AdamW case's twin under SGD
# expect: line 24 -- each slice's mean loss is backpropagated undivided, so the update applies the sum of len(batch)/microbatch slice means: the gradient grows with the number of slices (the effective learning rate changes when only the microbatch size is changed)
# framework: plain-torch (DDP)
# pattern: micro-loop over slices of one batch inside a method, the forward under `no_sync()` for all but the last slice, the update in a sibling method
import torch


class Trainer:
    def __init__(self, ddp_model, microbatch, lr):
        self.ddp_model, self.microbatch = ddp_model, microbatch
        self.opt = torch.optim.SGD(ddp_model.parameters(), lr=lr, momentum=0.9)

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
