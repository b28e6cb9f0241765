# helper module of the xmod_info_dict_helpers case (see executor.py)
from contextlib import nullcontext

from torch.nn.utils import clip_grad_norm_


def run_forward(model, batch, info):
    info["loss"] = model(batch)
    return info


def run_backward(model, info):
    accum = info.get("accum_grad", 1)
    scaled = info["loss"] / accum
    scaled.backward()
    info["loss"] = scaled.item()
    return info


def maybe_update(model, optimizer, scheduler, info):
    accum = info.get("accum_grad", 1)
    if (info["batch_idx"] + 1) % accum == 0:
        clip_grad_norm_(model.parameters(), info.get("grad_clip", 5.0))
        optimizer.step()
        optimizer.zero_grad()
        scheduler.step()
    return info


def grad_sync_ctx(model, info):
    if (info["batch_idx"] + 1) % info["accum_grad"] != 0:
        return model.no_sync
    return nullcontext
