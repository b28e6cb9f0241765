# kind: mean-of-means (silent guard; a linter must NOT flag this file)
# expect: nothing -- packed pretraining: every microbatch is cut to the model's block size (`0 : model.config.block_size`), the packer fills gaps with a BOS id, so `ignore_index=-1` never fires and the A-mean is the group's token mean
# framework: fabric
# pattern: fixed-length slice whose bound is an attribute chain, with an explicit `0 :` start, under fabric.no_backward_sync, counter from enumerate(loader)
import torch.nn.functional as F


def pretrain(fabric, model, optimizer, loader, accum):
    for it, blk in enumerate(loader):
        inp = blk[:, 0 : model.config.block_size].contiguous()
        tgt = blk[:, 1 : model.config.block_size + 1].contiguous()
        accumulating = (it + 1) % accum != 0
        with fabric.no_backward_sync(model, enabled=accumulating):
            logits = model(inp)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), tgt.view(-1), ignore_index=-1)
            fabric.backward(loss / accum)
        if not accumulating:
            optimizer.step()
            optimizer.zero_grad()
