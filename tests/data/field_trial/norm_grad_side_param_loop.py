# kind: zero-grad-in-group
# expect: line 12 -- the reset right after the backward wipes the group on every microbatch; the division of .grad over the parameters after the micro-loop must not hide the loop
# framework: plain-torch
# pattern: normalization done on the gradient side (`for p in params: p.grad /= A`) between the micro-loop and the update


def train(net, batches, opt, accum, num_updates):
    for update in range(num_updates):
        for micro in range(accum):
            x, y = next(batches)
            net(x, y).backward()
            opt.zero_grad()
        for p in net.parameters():
            p.grad /= accum
        opt.step()
        opt.zero_grad(set_to_none=True)
