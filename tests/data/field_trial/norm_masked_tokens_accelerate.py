# kind: mean-of-means
# expect: line 23 -- each microbatch's loss is a mean over its masked tokens only (labels -100 elsewhere, masking rate drawn per sample), and Accelerate divides it by A: microbatches with few masked tokens weigh as much as ones with many
# framework: accelerate
# pattern: masked-token modelling (MaskGIT/aMUSEd style): random mask ratio per sample, labels set to -100 where not masked, cross_entropy(ignore_index=-100, reduction="mean") then accelerator.backward
import torch
import torch.nn.functional as F
from accelerate import Accelerator


def main(cfg, model, optimizer, loader, lr_scheduler, mask_id):
    accelerator = Accelerator(gradient_accumulation_steps=cfg.accum)
    model, optimizer, lr_scheduler, loader = accelerator.prepare(model, optimizer, lr_scheduler, loader)
    for epoch in range(cfg.epochs):
        for step, tokens in enumerate(loader):
            with accelerator.accumulate(model):
                bs, seq = tokens.shape
                ratio = torch.cos(torch.rand(bs, device=tokens.device) * torch.pi / 2)
                masked = torch.rand(bs, seq, device=tokens.device) < ratio[:, None]
                inputs = torch.where(masked, mask_id, tokens)
                labels = torch.where(masked, tokens, -100)
                logits = model(inputs)
                loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.view(-1), ignore_index=-100)
                accelerator.backward(loss)
                if accelerator.sync_gradients:
                    accelerator.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                lr_scheduler.step()
                optimizer.zero_grad(set_to_none=True)
