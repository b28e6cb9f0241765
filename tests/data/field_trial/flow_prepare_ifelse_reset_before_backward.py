# kind: zero-grad-in-group (accumulate-context-misplaced)
# expect: line 21 -- inside accumulate() a prepared optimizer's reset BEFORE the backward is not gated away on the sync microbatch: it wipes the A-1 accumulated contributions
# framework: accelerate
# pattern: `accelerator.prepare(...)` assigned in both arms of `if args.train_text_encoder / else` (both arms prove the same roles: optimizer prepared); dreambooth-style scripts
import torch.nn.functional as F
from accelerate import Accelerator


def main(args, unet, text_encoder, optimizer, loader, lr_scheduler):
    accelerator = Accelerator(gradient_accumulation_steps=args.gradient_accumulation_steps)
    if args.train_text_encoder:
        unet, text_encoder, optimizer, loader, lr_scheduler = accelerator.prepare(
            unet, text_encoder, optimizer, loader, lr_scheduler
        )
    else:
        unet, optimizer, loader, lr_scheduler = accelerator.prepare(unet, optimizer, loader, lr_scheduler)
    for epoch in range(args.epochs):
        for step, batch in enumerate(loader):
            with accelerator.accumulate(unet):
                loss = F.mse_loss(unet(batch["x"]), batch["y"])
                optimizer.zero_grad()
                accelerator.backward(loss)
                if accelerator.sync_gradients:
                    accelerator.clip_grad_norm_(unet.parameters(), 1.0)
                optimizer.step()
                lr_scheduler.step()
                optimizer.zero_grad()
