# kind: accumulate-context-misplaced (reset before backward inside accumulate)
# expect: line 22 -- inside accumulate() the prepared optimizer (a variable of the enclosing function) is reset before the backward: on the sync microbatch it wipes the group
# framework: accelerate
# pattern: the whole epoch loop lives in a closure `def train_loop(model)` nested in main(); accelerator, optimizer, scheduler and loader come from main's scope; the closure is called later (possibly through a compression/quantization callback)
import torch.nn.functional as F
from accelerate import Accelerator


def main(args, text_encoder, unet, optimizer, loader, lr_scheduler):
    accelerator = Accelerator(gradient_accumulation_steps=args.gradient_accumulation_steps)
    text_encoder = accelerator.prepare(text_encoder)
    optimizer, loader, lr_scheduler = accelerator.prepare(optimizer, loader, lr_scheduler)

    def train_loop(model):
        for epoch in range(args.num_train_epochs):
            model.train()
            for step, batch in enumerate(loader):
                with accelerator.accumulate(model):
                    states = model(batch["input_ids"])
                    pred = unet(batch["latents"], states)
                    loss = F.mse_loss(pred, batch["noise"])
                    optimizer.zero_grad()
                    accelerator.backward(loss)
                    optimizer.step()
                    lr_scheduler.step()
                    optimizer.zero_grad()
        return model

    return train_loop(text_encoder)
