# kind: accumulate-context-misplaced (reset before backward inside accumulate)
# expect: line 24 -- in the generator arm, the prepared generator optimizer is reset right before the backward inside accumulate(gen): on the sync microbatch it wipes the group
# framework: accelerate
# pattern: GAN loop: groups alternate between `with accelerator.accumulate(gen)` and `with accelerator.accumulate(disc)` in the two arms of an `if gen_turn / else`; each arm has its own optimizer and scheduler
import torch.nn.functional as F
from accelerate import Accelerator


def main(cfg, gen, disc, g_opt, d_opt, g_sched, d_sched, loader):
    accelerator = Accelerator(gradient_accumulation_steps=cfg.accum)
    gen, disc, g_opt, d_opt, g_sched, d_sched, loader = accelerator.prepare(
        gen, disc, g_opt, d_opt, g_sched, d_sched, loader
    )
    for i, images in enumerate(loader):
        gen_turn = (i // cfg.accum) % 2 == 0
        if gen_turn:
            g_opt.zero_grad(set_to_none=True)
        else:
            d_opt.zero_grad(set_to_none=True)
        recon = gen(images)
        if gen_turn:
            with accelerator.accumulate(gen):
                loss = F.l1_loss(recon, images) - disc(recon).mean()
                g_opt.zero_grad()
                accelerator.backward(loss)
                g_opt.step()
                g_sched.step()
        else:
            with accelerator.accumulate(disc):
                recon = recon.detach()
                loss = (F.relu(1 + disc(recon)) + F.relu(1 - disc(images))).mean()
                accelerator.backward(loss)
                d_opt.step()
                d_sched.step()
