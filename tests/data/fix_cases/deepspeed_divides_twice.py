"""A loss divided by the accumulation steps before DeepSpeed's engine.backward(), which divides
it again (ACC101)."""
import deepspeed

ACCUM = 4
CONFIG = {"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": ACCUM,
          "optimizer": {"type": "Adam", "params": {"lr": 2e-5}}}


def train(net, batches):
    engine, *_ = deepspeed.initialize(model=net, model_parameters=net.parameters(), config=CONFIG)
    for batch in batches:
        loss = engine(batch["x"], labels=batch["y"]).loss
        loss = loss / ACCUM
        engine.backward(loss)
        engine.step()
