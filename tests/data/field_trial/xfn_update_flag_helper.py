# kind: zero-grad-in-group
# expect: line 16 -- the helper resets the gradients right after every call's backward, before its `is_update` gate, so each update applies only the last microbatch (the scheduler stepped on every call is NOT a finding: its horizon max_step is counted in microbatches, see build())
# framework: plain-torch (+ apex amp)
# pattern: backward in an `if args.fp16: with amp.scale_loss(...) as s: s.backward() else: loss.backward()` inside a module helper `backward_and_maybe_step(loss, opt, model, sched, args, is_update)`; the caller divides by A and passes `is_update = True if step % A == 0 else False` (a conditional expression) from a global microbatch counter
import torch
from apex import amp
from transformers import get_linear_schedule_with_warmup


def backward_and_maybe_step(loss, opt, model, sched, args, is_update=True):
    if args.fp16:
        with amp.scale_loss(loss, opt) as scaled:
            scaled.backward()
    else:
        loss.backward()
    opt.zero_grad()
    if is_update:
        if args.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        opt.zero_grad()
    if sched is not None:
        sched.step()


def train_epoch(model, opt, sched, loader, args, train_step=0):
    for idx, batch in enumerate(loader):
        loss = model(batch["input"], batch["target"]).mean()
        train_step += 1
        is_update = True if train_step % args.grad_acc == 0 else False
        backward_and_maybe_step(loss / args.grad_acc, opt, model, sched, args, is_update=is_update)
    return train_step


def build(model, loader, args):
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    args.max_step = args.max_epoch * len(loader)
    sched = get_linear_schedule_with_warmup(opt, args.warmup_step, args.max_step)
    return opt, sched
