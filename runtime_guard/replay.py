"""Reference replay (opt-in, ``normalization="replay"``): a group's gradient against two references.

The group's microbatches are run again at the update attempt to compare the user's accumulated
gradient with two references (design notes §3, method B).

* token-weighted: sum of per-token cross-entropy losses over the group / its supervised tokens;
* mean of means: the mean of each microbatch's mean token loss.

The replay restores each microbatch's CPU (and CUDA) RNG state captured at its forward, re-enters
the autocast state seen there, uses ``torch.autograd.grad`` (``.grad`` is never touched), and
puts back the RNG state and all module buffers (BatchNorm statistics) afterwards. Under DDP it
runs ``model.module`` (nothing is all-reduced) and averages the reference over replicas.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from runtime_guard.ce_weights import logits_of

LabelsSpec = str | Callable[[tuple[Any, ...], dict[str, Any], Any], torch.Tensor]


@dataclass
class Captured:
    """What a microbatch's forward needs to be replayed."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    rng: torch.Tensor
    cuda_rng: list[torch.Tensor] | None
    autocast: tuple[str, torch.dtype] | None


def capture(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Captured:
    """Capture the inputs, RNG states and autocast state at a forward (draws no random number)."""
    autocast = None
    for device in ("cuda", "cpu"):
        try:
            if torch.is_autocast_enabled(device):
                autocast = (device, torch.get_autocast_dtype(device))
                break
        except RuntimeError:
            continue
    cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    return Captured(args, dict(kwargs), torch.get_rng_state(), cuda_rng, autocast)


def _labels(spec: LabelsSpec, cap: Captured, output: Any) -> torch.Tensor | None:
    if callable(spec):
        return spec(cap.args, cap.kwargs, output)
    return cap.kwargs.get(spec)


def _dot(a: Sequence[torch.Tensor | None], b: Sequence[torch.Tensor | None]) -> float:
    """Sum over tensors of ``a[i] . b[i]`` (fp32 products, cascade sums per tensor, added in double);
    ``None`` is a zero tensor."""
    return sum(float((x * y).sum()) for x, y in zip(a, b, strict=True) if x is not None and y is not None)


def replay_group(
    module: torch.nn.Module,
    params: Sequence[torch.Tensor],
    captured: Sequence[Captured],
    user_grads: Sequence[torch.Tensor | None],
    user_scale: float,
    labels: LabelsSpec,
    ignore_index: int,
    replicas: int = 1,
    group: Any = None,
) -> dict[str, float] | str:
    """Compare the user's accumulated grads with both references.

    Args:
        module: the module to run (``ddp.module`` under DDP).
        params: the probed parameters, in the order of ``user_grads``.
        captured: one :class:`Captured` per microbatch of the group.
        user_grads: the accumulated grads at the group's last backward (as in ``.grad``).
        user_scale: the GradScaler scale they carry (1.0 without scaler).
        labels: kwarg name of the labels, or ``callable(args, kwargs, output)``.
        ignore_index: label value excluded from the loss.
        replicas: D; when > 1 the references are averaged over ``group`` with an all-reduce.

    Returns:
        ``{"cos_token": …, "ratio_token": …, "cos_mean": …, "ratio_mean": …}`` (ratio = |user| /
        |reference|), or a string saying why no comparison was possible.

    The comparison never flattens or upcasts the gradients: per tensor, fp32 products summed
    (cascade sums, relative error far below the 1e-4 tolerance on 1 - cos), added in double;
    the scalar factors (1/tokens, 1/A, 1/scale) are applied to the sums.
    """
    rng = torch.get_rng_state()
    cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    buffers = [(b, b.detach().clone()) for b in module.buffers()]
    # fp32 accumulators shaped like the parameters: the first microbatch's grads, then added to
    token_acc: list[torch.Tensor | None] = [None] * len(params)
    mean_acc: list[torch.Tensor | None] = [None] * len(params)
    tokens = 0
    try:
        for cap in captured:
            torch.set_rng_state(cap.rng)
            if cap.cuda_rng is not None:
                torch.cuda.set_rng_state_all(cap.cuda_rng)
            ctx = (torch.autocast(cap.autocast[0], dtype=cap.autocast[1]) if cap.autocast
                   else torch.autocast("cpu", enabled=False))
            with torch.enable_grad(), ctx:
                output = module(*cap.args, **cap.kwargs)
            logits = logits_of(output)
            target = _labels(labels, cap, output)
            if logits is None or target is None:
                return "not compared: no logits or no labels (pass labels= as a kwarg name or a callable)"
            flat_logits = logits.reshape(-1, logits.shape[-1]).float()
            flat_target = target.reshape(-1).to(flat_logits.device)
            n = int((flat_target != ignore_index).sum())
            loss = torch.nn.functional.cross_entropy(flat_logits, flat_target, ignore_index=ignore_index,
                                                     reduction="sum")
            grads = torch.autograd.grad(loss, list(params), allow_unused=True)
            fresh = [i for i, g in enumerate(grads) if g is not None and token_acc[i] is None]
            for i in fresh:
                token_acc[i] = grads[i].float()
                mean_acc[i] = grads[i].float() / max(n, 1)
            rest = [i for i, g in enumerate(grads) if g is not None and i not in fresh]
            if rest:
                torch._foreach_add_([token_acc[i] for i in rest], [grads[i].float() for i in rest])
                torch._foreach_add_([mean_acc[i] for i in rest], [grads[i].float() for i in rest],
                                    alpha=1.0 / max(n, 1))
            tokens += n
    finally:
        for buffer, saved in buffers:
            buffer.data.copy_(saved)
        torch.set_rng_state(rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state_all(cuda_rng)
    token_acc = [t if t is not None else torch.zeros_like(p, dtype=torch.float32) for t, p in zip(token_acc, params,
                                                                                                 strict=True)]
    mean_acc = [m if m is not None else torch.zeros_like(p, dtype=torch.float32) for m, p in zip(mean_acc, params,
                                                                                                strict=True)]
    total = torch.tensor([float(tokens)], dtype=torch.float64)
    mean_factor = 1.0 / len(captured)
    if replicas > 1:
        torch.distributed.all_reduce(total, group=group)
        for t in (*token_acc, *mean_acc):
            torch.distributed.all_reduce(t, group=group)
        mean_factor /= replicas
    # token-weighted over the global group (DDP then averages over replicas: times D / D);
    # mean of the microbatch means over the group and the replicas
    token_factor = 1.0 / total.item() if total.item() else 0.0
    user = [None if g is None else g.float() for g in user_grads]
    user_sq = _dot(user, user) / user_scale**2
    out = {}
    for name, acc, factor in (("token", token_acc, token_factor), ("mean", mean_acc, mean_factor)):
        ref_sq = _dot(acc, acc) * factor**2
        cross = _dot(user, acc) * factor / user_scale
        denom = (ref_sq * user_sq) ** 0.5
        out[f"cos_{name}"] = cross / denom if denom else 0.0
        out[f"ratio_{name}"] = (user_sq / ref_sq) ** 0.5 if ref_sq else float("inf")
    return out
