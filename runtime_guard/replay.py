"""Reference replay (opt-in, ``normalization="replay"``): the group's microbatches are run
again at the update attempt to compare the user's accumulated gradient with two references
(design notes §3, method B).

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


def _flat(grads: Sequence[torch.Tensor | None], params: Sequence[torch.Tensor]) -> torch.Tensor:
    return torch.cat([(g if g is not None else torch.zeros_like(p)).detach().reshape(-1).double()
                      for g, p in zip(grads, params, strict=True)])


def replay_group(
    module: torch.nn.Module,
    params: Sequence[torch.Tensor],
    captured: Sequence[Captured],
    user_grads: Sequence[torch.Tensor | None],
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
        user_grads: the accumulated grads at the group's last backward (unscaled).
        labels: kwarg name of the labels, or ``callable(args, kwargs, output)``.
        ignore_index: label value excluded from the loss.
        replicas: D; when > 1 the references are averaged over ``group`` with an all-reduce.

    Returns:
        ``{"cos_token": …, "ratio_token": …, "cos_mean": …, "ratio_mean": …}`` (ratio = |user| /
        |reference|), or a string saying why no comparison was possible.
    """
    rng = torch.get_rng_state()
    cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    buffers = [(b, b.detach().clone()) for b in module.buffers()]
    # fp32 accumulators shaped like the parameters (flattened to float64 once, at the end)
    token_acc = [torch.zeros_like(p, dtype=torch.float32) for p in params]
    mean_acc = [torch.zeros_like(p, dtype=torch.float32) for p in params]
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
            pairs = [(t, m, g.float()) for t, m, g in zip(token_acc, mean_acc, grads, strict=True) if g is not None]
            if pairs:
                torch._foreach_add_([t for t, _, _ in pairs], [g for _, _, g in pairs])
                torch._foreach_add_([m for _, m, _ in pairs], [g for _, _, g in pairs], alpha=1.0 / max(n, 1))
            tokens += n
    finally:
        for buffer, saved in buffers:
            buffer.data.copy_(saved)
        torch.set_rng_state(rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state_all(cuda_rng)
    token_sum, mean_sum = _flat(token_acc, params), _flat(mean_acc, params)
    total = torch.tensor([float(tokens)], dtype=torch.float64)
    if replicas > 1:
        torch.distributed.all_reduce(total, group=group)
        torch.distributed.all_reduce(token_sum, group=group)
        torch.distributed.all_reduce(mean_sum, group=group)
        mean_sum /= replicas
    # token-weighted over the global group; DDP then averages over replicas: times D / D
    reference_token = token_sum / total.item()
    reference_mean = mean_sum / len(captured)
    user = _flat(user_grads, params)
    out = {}
    for name, ref in (("token", reference_token), ("mean", reference_mean)):
        denom = float(ref.norm() * user.norm())
        out[f"cos_{name}"] = float(user @ ref) / denom if denom else 0.0
        out[f"ratio_{name}"] = float(user.norm() / ref.norm()) if float(ref.norm()) else float("inf")
    return out
