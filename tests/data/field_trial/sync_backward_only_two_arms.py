# kind: zero-grad-in-group
# expect: line 18 -- the reset after a non-final microbatch's backward discards the group built so far, so only the last microbatch reaches the update (line 13 also holds a correct ACC401: the forward runs outside no_sync)
# framework: plain-torch (DDP)
# pattern: `if i < A: with model.no_sync(): loss.backward()` / `else: loss.backward()` with a 1-based micro index; the reset sits inside the no_sync arm
from torch.nn.parallel import DistributedDataParallel as DDP


def train(net, batches, opt, accum, num_updates):
    ddp_net = DDP(net)
    for update in range(num_updates):
        for i in range(1, accum + 1):
            x, y = next(batches)
            loss = ddp_net(x, y)
            loss = loss / accum
            if i < accum:
                with ddp_net.no_sync():
                    loss.backward()
                    opt.zero_grad()
            else:
                loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
