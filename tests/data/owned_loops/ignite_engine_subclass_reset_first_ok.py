# expect: nothing -- 1-based iteration: the reset on iteration % k == 1 opens each group, after the last update
from ignite.engine import Engine


class TranslationEngine(Engine):
    def __init__(self, process, model, optimizer, accum_steps):
        self.model, self.optimizer, self.accum_steps = model, optimizer, accum_steps
        super().__init__(process)

    @staticmethod
    def train(engine, batch):
        if engine.state.iteration % engine.accum_steps == 1 or engine.accum_steps == 1:
            engine.optimizer.zero_grad()
        (engine.model(batch).mean() / engine.accum_steps).backward()
        if engine.state.iteration % engine.accum_steps == 0:
            engine.optimizer.step()


def build(model, optimizer, accum_steps):
    return TranslationEngine(TranslationEngine.train, model, optimizer, accum_steps)
