# expect: ACC301 line 9 -- a DeterministicEngine runs the same per-iteration loop: the clip runs on every microbatch
import torch
from ignite.engine import DeterministicEngine


def build(model, opt, crit, accum):
    def train_fn(engine, batch):
        (crit(model(batch[0]), batch[1]) / accum).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if engine.state.iteration % accum == 0:
            opt.step()
            opt.zero_grad()

    return DeterministicEngine(train_fn)
