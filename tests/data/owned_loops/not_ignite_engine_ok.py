# expect: nothing -- an Engine that is not ignite's: its process function is no loop body
from mylib import Engine


def make(net, opt, loss_fn, k):
    def step(eng, batch):
        x, y = batch
        (loss_fn(net(x), y) / k).backward()
        opt.step()
        opt.zero_grad()

    return Engine(step)
