# kind: accumulate-context-misplaced (reset before backward inside accumulate)
# expect: line 23 -- the prepared optimizer is reset before the backward inside accumulate(): on the sync microbatch the reset is real and wipes the group
# framework: accelerate
# pattern: resume skip at the top of the micro-loop (`if resuming and step < skip: if step % A == 0: bar.update(1); continue`), then the usual accumulate() body
import torch.nn.functional as F
from accelerate import Accelerator


def main(cfg, model, optimizer, loader, lr_scheduler, progress, first_epoch, resume_step):
    accelerator = Accelerator(gradient_accumulation_steps=cfg.accum)
    model, optimizer, loader, lr_scheduler = accelerator.prepare(model, optimizer, loader, lr_scheduler)
    for epoch in range(first_epoch, cfg.epochs):
        model.train()
        for step, batch in enumerate(loader):
            if cfg.resume and epoch == first_epoch and step < resume_step:
                if step % cfg.accum == 0:
                    progress.update(1)
                continue
            with accelerator.accumulate(model):
                noise = batch["noise"]
                pred = model(batch["x"] + noise)
                loss = F.mse_loss(pred, noise)
                optimizer.zero_grad()
                accelerator.backward(loss)
                if accelerator.sync_gradients:
                    accelerator.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                lr_scheduler.step()
                optimizer.zero_grad()
