# expect: ACC001 line 18 -- the ITERATION_STARTED handler resets on every iteration, the boundary's too
from ignite.engine import Engine, Events


def make(net, opt, loss_fn, k):
    def step(eng, batch):
        x, y = batch
        (loss_fn(net(x), y) / k).backward()
        if eng.state.iteration % k == 0:
            opt.step()
        return 0.0

    runner = Engine(step)

    @runner.on(Events.ITERATION_STARTED)
    def clear(eng):
        net.train()
        opt.zero_grad()

    return runner
