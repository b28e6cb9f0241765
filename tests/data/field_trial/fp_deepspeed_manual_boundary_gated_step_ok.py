# kind: engine-step-gated (silent guard; a linter must NOT flag this file)
# expect: nothing -- the engine is built with gradient_accumulation_steps = 1 and told the boundary by hand before every backward (set_gradient_accumulation_boundary), so its own micro-step counter decides nothing; calling engine.step() only on the boundary is then equivalent to calling it every microbatch. The loss is divided by the group's token count by hand and multiplied by the world size to undo the engine's averaging
# framework: deepspeed
# pattern: ds_config["gradient_accumulation_steps"] = 1; `is_boundary = (local_step + 1) % A == 0; engine.set_gradient_accumulation_boundary(is_boundary); engine.backward(loss); if is_boundary: engine.step()`
import deepspeed


def build(model, ds_config, micro_bs):
    ds_config["train_micro_batch_size_per_gpu"] = micro_bs
    ds_config["gradient_accumulation_steps"] = 1
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds_config)
    return engine


def train_round(engine, microbatches, accum, group_tokens, world_size):
    local_step = 0
    for i, mb in enumerate(microbatches):
        per_token = engine(mb["input_ids"])
        mask = mb["response_mask"]
        loss = (per_token * mask).sum() / group_tokens[i // accum]
        loss = loss * world_size
        is_boundary = (local_step + 1) % accum == 0
        engine.set_gradient_accumulation_boundary(is_boundary)
        engine.backward(loss)
        if is_boundary:
            engine.step()
        local_step += 1
