# expect: ACC004 line 15 -- a static process method of an Engine subclass: the update runs every iteration
from ignite.engine import Engine


class TranslationEngine(Engine):
    def __init__(self, process, model, optimizer, accum_steps):
        self.model, self.optimizer, self.accum_steps = model, optimizer, accum_steps
        super().__init__(process)

    @staticmethod
    def train(engine, batch):
        engine.model.train()
        loss = engine.model(batch).mean() / engine.accum_steps
        loss.backward()
        engine.optimizer.step()
        engine.optimizer.zero_grad()


def build(model, optimizer, accum_steps):
    return TranslationEngine(TranslationEngine.train, model, optimizer, accum_steps)
