# kind: scheduler-per-microbatch (silent guard; a linter must NOT flag this file)
# expect: nothing -- the scheduler is stepped on every microbatch, but its horizon (max_step = epochs * len(loader)) and the global counter are both in microbatches, so the schedule ends where the run ends (the LR only matters at the update)
# framework: plain-torch (+ apex amp)
# pattern: the scheduler step sits outside the `is_update` gate of an update helper; horizon built from len(loader) in build(); the gate is a plain comparison so that the loop is recognised today
import torch
from apex import amp
from transformers import get_linear_schedule_with_warmup


def backward_and_maybe_step(loss, opt, model, sched, args, is_update=True):
    if args.fp16:
        with amp.scale_loss(loss, opt) as scaled:
            scaled.backward()
    else:
        loss.backward()
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
        is_update = train_step % args.grad_acc == 0
        backward_and_maybe_step(loss / args.grad_acc, opt, model, sched, args, is_update=is_update)
    return train_step


def build(model, loader, args):
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    args.max_step = args.max_epoch * len(loader)
    sched = get_linear_schedule_with_warmup(opt, args.warmup_step, args.max_step)
    return opt, sched
