# kind: partial-final-group
# expect: line 20 -- the epoch's trailing window of r < A microbatches is normalized as if it were a whole optimizer update, but the DeepSpeed engine counts micro-steps globally: those r microbatches join the first A - r of the next epoch in one update, and every later window of that epoch straddles two engine groups, each microbatch carrying the token count of a window the engine does not apply together
# framework: deepspeed (engine.backward / engine.step every microbatch, gradient_accumulation_steps = A in the config)
# pattern: a generator groups the loader into windows of A microbatches and attaches each window's total token count (divided by A to pre-compensate the engine's 1/A), with a trailing partial window; nothing realigns the engine at the epoch boundary
import torch


def windows(loader, accum):
    window = []
    for item in loader:
        window.append(item)
        if len(window) == accum:
            total = sum(float(it["mask"].sum()) for it in window)
            for it in window:
                yield it, total / accum
            window = []
    if window:
        total = sum(float(it["mask"].sum()) for it in window)
        for it in window:
            yield it, total / accum


def train(engine, loader, accum, epochs):
    for epoch in range(epochs):
        for item, norm in windows(loader, accum):
            logp = engine(item["input_ids"])
            loss = -(logp * item["mask"]).sum() / norm
            engine.backward(loss)
            engine.step()
