# kind: zero-grad-in-group
# expect: line 31 -- the model's gradients are reset after every microbatch's backward, so the manager's update applies only the last microbatch of each group
# framework: plain-torch
# pattern: module-level micro-loop `for idx in range(A)` (loss is a token sum times 1/A); the update is a method of a training-manager object defined in the same file (`manager.apply_update(step)` -> `self.optimizer.step()`), which also owns the reset
import torch

grad_accum_steps = 4
inv_accum = 1 / grad_accum_steps


class UpdateManager:
    def __init__(self, model, lr):
        self.model = model
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=lr)

    def apply_update(self, step):
        for group in self.optimizer.param_groups:
            group["lr"] = group["initial_lr"] * max(0.1, 1 - step / 1000)
        self.optimizer.step()
        self.model.zero_grad(set_to_none=True)


def run(model, loader, num_updates):
    manager = UpdateManager(model, 3e-4)
    for step in range(num_updates):
        for idx in range(grad_accum_steps):
            x, y = next(loader)
            loss = model(x, y).sum() * inv_accum
            loss.backward()
            del loss
            model.zero_grad()
        manager.apply_update(step)
