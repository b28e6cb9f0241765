# expect: nothing -- the loop runs one backward per model of a dual pair (not microbatches); each loss was divided by A
from ignite.engine import Engine


def build(models, optimizers, scalers, accum_steps):
    def step(engine, batch):
        loss_ab, loss_ba = models[0](batch).sum(), models[1](batch).sum()
        targets = [loss_ab.div(accum_steps), loss_ba.div(accum_steps)]
        for scaler, target in zip(scalers, targets):
            scaler.scale(target).backward()
        if engine.state.iteration % accum_steps == 0:
            for optimizer, scaler in zip(optimizers, scalers):
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad()

    return Engine(step)
