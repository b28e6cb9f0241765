"""accelerate's accumulate() with a scheduler that was never prepared: nothing gates it, so it
advances on every microbatch (ACC304)."""
import torch
from accelerate import Accelerator
from transformers import get_scheduler


def main(model, data, lr, total_updates, accumulation):
    acc = Accelerator(gradient_accumulation_steps=accumulation)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    sched = get_scheduler("linear", opt, num_warmup_steps=0, num_training_steps=total_updates)
    model, opt, data = acc.prepare(model, opt, data)
    for batch in data:
        with acc.accumulate(model):
            out = model(**batch)
            acc.backward(out.loss)
            opt.step()
            sched.step()
            opt.zero_grad()
