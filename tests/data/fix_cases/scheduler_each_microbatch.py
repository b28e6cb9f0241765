"""A warm-up schedule sized in microbatches (one epoch is `len(batches)` of them) that also
advances on every microbatch, while the mixed-precision update runs once every `accum`
microbatches (ACC304; its fix reveals the size in the wrong unit, ACC305)."""
import torch
from transformers import get_linear_schedule_with_warmup


def fit(model, batches, optimizer, accum, epochs, max_norm=1.0):
    per_epoch = len(batches)
    schedule = get_linear_schedule_with_warmup(
        optimizer, num_warmup_steps=per_epoch // 10, num_training_steps=epochs * per_epoch
    )
    scaler = torch.amp.GradScaler("cuda")
    for _ in range(epochs):
        for k, inputs in enumerate(batches):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(inputs).loss / accum
            scaler.scale(loss).backward()
            if (k + 1) % accum == 0:
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad(set_to_none=True)
            if schedule is not None:
                schedule.step()
