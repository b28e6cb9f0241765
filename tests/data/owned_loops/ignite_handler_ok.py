# expect: nothing -- the reset handler runs after the update, under the same 1-based gate
from ignite.engine import Engine, Events


def make(net, opt, loss_fn, k):
    def step(eng, batch):
        x, y = batch
        (loss_fn(net(x), y) / k).backward()
        if eng.state.iteration % k == 0:
            opt.step()
        return 0.0

    runner = Engine(step)

    def clear(eng):
        if eng.state.iteration % k == 0:
            opt.zero_grad()

    runner.add_event_handler(Events.ITERATION_COMPLETED, clear)
    return runner
