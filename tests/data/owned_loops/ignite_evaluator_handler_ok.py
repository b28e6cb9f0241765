# expect: nothing -- the reset handler is registered on the evaluator, not on the engine that trains
from ignite.engine import Engine, Events


def build(model, opt, loss_fn, steps):
    def train_step(engine, batch):
        (loss_fn(model(batch[0]), batch[1]) / steps).backward()
        if engine.state.iteration % steps == 0:
            opt.step()
            opt.zero_grad()

    def eval_step(engine, batch):
        return model(batch[0]), batch[1]

    trainer = Engine(train_step)
    evaluator = Engine(eval_step)

    @evaluator.on(Events.ITERATION_STARTED)
    def clear(engine):
        opt.zero_grad()

    return trainer, evaluator
