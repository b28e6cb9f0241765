# kind: zero-grad-in-group
# expect: line 14 -- the model's gradients are reset after every microbatch's backward, so each update of the optimizers applies only the last microbatch
# framework: plain-torch
# pattern: the update is a `for opt, sched in zip(optimizers, schedulers)` loop after the inner micro-loop (several optimizers over one model, e.g. Muon + Adam)


def train(net, batches, optimizers, schedulers, accum, num_updates):
    for update in range(num_updates):
        for micro in range(accum):
            x, y = next(batches)
            loss = net(x, y)
            loss = loss / accum
            loss.backward()
            net.zero_grad()
        for opt, sched in zip(optimizers, schedulers):
            opt.step()
            sched.step()
        net.zero_grad(set_to_none=True)
