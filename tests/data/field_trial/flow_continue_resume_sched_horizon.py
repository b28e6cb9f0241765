# kind: scheduler-horizon-unit-mismatch
# expect: lines 17-18 -- warmup and horizon are multiplied by A, but the prepared scheduler advances only on sync microbatches (once per update), so the schedule is stretched A-fold; the resume `continue` in the loop must not hide it
# framework: accelerate
# pattern: diffusers-style script: get_scheduler(num_warmup_steps=warmup * A, num_training_steps=max_updates * A) prepared with the rest; resume-skip `continue` at the top of the micro-loop
import math

import torch.nn.functional as F
from accelerate import Accelerator
from diffusers.optimization import get_scheduler


def main(args, model, optimizer, loader, first_epoch, resume_step):
    accelerator = Accelerator(gradient_accumulation_steps=args.gradient_accumulation_steps)
    updates_per_epoch = math.ceil(len(loader) / args.gradient_accumulation_steps)
    max_train_steps = args.num_epochs * updates_per_epoch
    lr_scheduler = get_scheduler(args.lr_scheduler, optimizer=optimizer,
                                 num_warmup_steps=args.lr_warmup_steps * args.gradient_accumulation_steps,
                                 num_training_steps=max_train_steps * args.gradient_accumulation_steps)
    model, optimizer, loader, lr_scheduler = accelerator.prepare(model, optimizer, loader, lr_scheduler)
    for epoch in range(first_epoch, args.num_epochs):
        for step, batch in enumerate(loader):
            if args.resume_from_checkpoint and epoch == first_epoch and step < resume_step:
                continue
            with accelerator.accumulate(model):
                loss = F.mse_loss(model(batch["x"]), batch["noise"])
                accelerator.backward(loss)
                if accelerator.sync_gradients:
                    accelerator.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                lr_scheduler.step()
                optimizer.zero_grad()
