# expect: nothing -- a filtered event (every=k) is the framework's own gate: left out
from ignite.engine import Engine, Events


def make(net, opt, loss_fn, k):
    def step(eng, batch):
        x, y = batch
        (loss_fn(net(x), y) / k).backward()
        return 0.0

    runner = Engine(step)

    @runner.on(Events.ITERATION_COMPLETED(every=k))
    def apply(eng):
        opt.step()
        opt.zero_grad()

    return runner
