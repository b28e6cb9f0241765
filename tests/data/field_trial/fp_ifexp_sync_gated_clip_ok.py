# kind: clip-inside-group (silent guard; a linter must NOT flag this file)
# expect: nothing -- the clip is an expression statement gated by a conditional expression on `accelerator.sync_gradients`, so it runs once per group, on the sync microbatch (found while writing the field-trial reductions, not in a fetched repository)
# framework: accelerate
# pattern: `accelerator.clip_grad_norm_(...) if accelerator.sync_gradients else None` as a statement inside accumulate()
import torch.nn.functional as F
from accelerate import Accelerator


def main(cfg, model, optimizer, loader, lr_scheduler):
    accelerator = Accelerator(gradient_accumulation_steps=cfg.accum)
    model, optimizer, loader, lr_scheduler = accelerator.prepare(model, optimizer, loader, lr_scheduler)
    for batch in loader:
        with accelerator.accumulate(model):
            loss = F.mse_loss(model(batch["x"]), batch["y"])
            accelerator.backward(loss)
            accelerator.clip_grad_norm_(model.parameters(), 1.0) if accelerator.sync_gradients else None
            optimizer.step()
            lr_scheduler.step()
            optimizer.zero_grad()
