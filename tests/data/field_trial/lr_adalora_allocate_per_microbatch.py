# kind: update-hook-per-microbatch (spec ACC007)
# expect: line 29 -- `update_and_allocate(global_step)` is a once-per-update hook (importance scores from the gradients, rank budget scheduled over total_step updates) but runs on every microbatch with a counter that also advances every microbatch: the budget schedule runs A times too fast and scores read partial gradient sums
# framework: accelerate + peft (AdaLoRA)
# pattern: inside accumulate(), after optimizer.step() and before zero_grad(), a model hook called with `global_step` that is incremented every microbatch; total_step was computed in updates (ceil(len(loader) / A) * epochs)
import math

from accelerate import Accelerator
from peft import AdaLoraConfig, get_peft_model


def main(cfg, base_model, make_optimizer, loader, lr_scheduler):
    accelerator = Accelerator(gradient_accumulation_steps=cfg.accum)
    updates_per_epoch = math.ceil(len(loader) / cfg.accum)
    total_steps = cfg.epochs * updates_per_epoch
    config = AdaLoraConfig(init_r=12, target_r=4, tinit=200, tfinal=1000, deltaT=10, total_step=total_steps,
                           target_modules=["q_proj", "v_proj"])
    model = get_peft_model(base_model, config)
    optimizer = make_optimizer(model)
    model, optimizer, loader, lr_scheduler = accelerator.prepare(model, optimizer, loader, lr_scheduler)
    global_step = 0
    for epoch in range(cfg.epochs):
        for step, batch in enumerate(loader):
            with accelerator.accumulate(model):
                loss = model(**batch).loss
                accelerator.backward(loss)
                optimizer.step()
                lr_scheduler.step()
                if global_step >= cfg.tinit:
                    model.base_model.update_and_allocate(global_step)
                optimizer.zero_grad()
                global_step += 1
