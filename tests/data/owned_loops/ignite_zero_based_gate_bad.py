# expect: ACC006 line 9 -- state.iteration is 1-based: (iteration + 1) % k fires one microbatch early
from ignite.engine import Engine


def make(net, opt, loss_fn, k):
    def step(eng, batch):
        x, y = batch
        (loss_fn(net(x), y) / k).backward()
        if (eng.state.iteration + 1) % k == 0:
            opt.step()
            opt.zero_grad()
        return 0.0

    return Engine(step)
