# kind: scheduler-horizon-unit-mismatch
# expect: line 18 -- the warmup length is counted in microbatches (epochs * samples / micro batch size) but compared with a counter of optimizer updates, so warmup lasts A times longer than planned (here longer than the whole run)
# framework: fabric
# pattern: module constants: A = batch // micro; warmup = 2 * (epoch_size // micro); the loop writes lr = peak * updates / warmup while `updates <= warmup`
import torch.nn.functional as F

batch_size = 64
micro_batch_size = 4
accum_iters = batch_size // micro_batch_size
epoch_size = 50000
warmup_iters = 2 * (epoch_size // micro_batch_size)
peak_lr = 3e-3


def train(fabric, model, optimizer, loader):
    updates = 0
    for it, (x, y) in enumerate(loader):
        if updates <= warmup_iters:
            for group in optimizer.param_groups:
                group["lr"] = peak_lr * updates / warmup_iters
        with fabric.no_backward_sync(model, enabled=(it + 1) % accum_iters != 0):
            loss = F.mse_loss(model(x), y)
            fabric.backward(loss / accum_iters)
        if (it + 1) % accum_iters == 0:
            optimizer.step()
            optimizer.zero_grad()
            updates += 1
