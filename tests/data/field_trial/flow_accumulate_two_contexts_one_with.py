# kind: accumulate-context-misplaced
# expect: line 22 -- two accumulate() contexts are entered per microbatch (`with acc.accumulate(a), acc.accumulate(b):`), so Accelerate's step counter advances twice per microbatch: groups hold A/2 microbatches while each loss is still divided by A (use one `accumulate(a, b)`)
# framework: accelerate
# pattern: ControlNet + LoRA-UNet script: both models trained, one `with` statement holding two accumulate() calls; resume `continue` at the top of the loop
import torch.nn.functional as F
from accelerate import Accelerator


def main(args, controlnet, unet, optimizer, loader, lr_scheduler, first_epoch, resume_step):
    accelerator = Accelerator(gradient_accumulation_steps=args.gradient_accumulation_steps)
    controlnet, unet, optimizer, loader, lr_scheduler = accelerator.prepare(
        controlnet, unet, optimizer, loader, lr_scheduler
    )
    unet.train()
    controlnet.train()
    for epoch in range(first_epoch, args.num_train_epochs):
        for step, batch in enumerate(loader):
            if args.resume_from_checkpoint and epoch == first_epoch and step < resume_step:
                if step % args.gradient_accumulation_steps == 0:
                    print("skipping")
                continue
            with accelerator.accumulate(controlnet), accelerator.accumulate(unet):
                residuals = controlnet(batch["latents"], batch["cond"])
                pred = unet(batch["latents"], residuals)
                loss = F.mse_loss(pred, batch["noise"])
                accelerator.backward(loss)
                if accelerator.sync_gradients:
                    accelerator.clip_grad_norm_(controlnet.parameters(), 1.0)
                optimizer.step()
                lr_scheduler.step()
                optimizer.zero_grad()
