# kind: zero-grad-in-group / accumulate-context-misplaced
# expect: line 21 -- a reset before the backward inside the micro-loop wipes the group whichever object `opt` is now: if still prepared, the reset is real on the sync microbatch (ACC501); if the rebinding dropped the wrapper, it runs on every microbatch (ACC001)
# framework: accelerate (+ a backend optimizer rewrite such as ipex.optimize)
# pattern: after `accelerator.prepare`, model and optimizer are rebound by a library call `net, opt = backend.optimize(net, optimizer=opt)`; the accumulate() body is otherwise the usual one
import torch.nn.functional as F
from accelerate import Accelerator

import backend


def main(cfg, net, opt, loader, sched):
    accelerator = Accelerator(gradient_accumulation_steps=cfg.accum)
    net, opt, loader, sched = accelerator.prepare(net, opt, loader, sched)
    net.train()
    net, opt = backend.optimize(net, optimizer=opt)
    for epoch in range(cfg.epochs):
        for step, batch in enumerate(loader):
            with accelerator.accumulate(net):
                pred = net(batch["x"])
                loss = F.mse_loss(pred, batch["y"])
                opt.zero_grad()
                accelerator.backward(loss)
                opt.step()
                sched.step()
                opt.zero_grad()
