"""Per-token loss weights from the gradient of the logits (design notes §3, method A).

For softmax cross entropy each supervised row ``t`` of dL/dlogits is
``g[t] = w_t * (softmax(z_t) - onehot(y_t))``: the target is the only negative entry and
``w_t = g[t, y] / (p[t, y] - 1)``. Rows of padding or ``ignore_index`` are all zeros, so the
supervised-token count comes out of the same pass. A residual check marks other losses
(label smoothing, z-loss, MSE on a vector output, ...) as "not inferred". No labels and no
extra forward are needed; it sees the gradient before any clip or unscale.
"""

from __future__ import annotations

import torch

from runtime_guard.trace import CEWeights

#: Softmax work per chunk, in bytes of fp32 (a 128k vocabulary must not allocate GBs at once).
CHUNK_BYTES = 64 * 2**20


def logits_of(output: object) -> torch.Tensor | None:
    """The logits tensor of a model output: ``.logits`` / ``["logits"]`` (HF), the tensor
    itself, or the first tensor of a tuple; ``None`` unless it is a floating tensor with a
    class dimension of at least 2 that requires grad."""
    candidate = getattr(output, "logits", None)
    if candidate is None and isinstance(output, dict):
        candidate = output.get("logits")
    if candidate is None and isinstance(output, torch.Tensor):
        candidate = output
    if candidate is None and isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
        candidate = output[0]
    if (
        isinstance(candidate, torch.Tensor)
        and candidate.is_floating_point()
        and candidate.requires_grad
        and candidate.dim() >= 2
        and candidate.shape[-1] >= 2
    ):
        return candidate
    return None


def infer_weights(logits: torch.Tensor, grad: torch.Tensor, scale: float = 1.0) -> CEWeights:
    """Infer the cross-entropy weights of one microbatch.

    Args:
        logits: ``[..., V]`` values of the forward output (any float dtype).
        grad: dL/dlogits, same shape (as the backward delivered it, i.e. scaled by the
            GradScaler's scale when one is used).
        scale: the GradScaler scale of this microbatch's loss (1.0 without scaler).

    Returns:
        :class:`CEWeights`: ``weight_sum`` already divided by ``scale``.
    """
    with torch.no_grad():
        z = logits.detach().reshape(-1, logits.shape[-1])
        g = grad.detach().reshape(-1, grad.shape[-1])
        rows_per_chunk = max(1, CHUNK_BYTES // (4 * z.shape[1]))
        weights: list[torch.Tensor] = []
        worst = 0.0
        for start in range(0, z.shape[0], rows_per_chunk):
            zc = z[start:start + rows_per_chunk].float()
            gc = g[start:start + rows_per_chunk].float()
            supervised = gc.abs().amax(dim=1) > 0
            if not bool(supervised.any()):
                continue
            zc, gc = zc[supervised], gc[supervised]
            p = torch.softmax(zc, dim=1)
            target = gc.argmin(dim=1, keepdim=True)
            p_target = p.gather(1, target)
            w = gc.gather(1, target) / (p_target - 1.0)
            expected = w * (p - torch.zeros_like(p).scatter_(1, target, 1.0))
            residual = (gc - expected).abs().amax(dim=1) / gc.abs().amax(dim=1)
            worst = max(worst, float(residual.max()))
            weights.append(w.squeeze(1))
        if not weights:
            return CEWeights(0.0, 0, 0.0, 0.0, z.shape[0])
        w_all = torch.cat(weights).double() / scale
        mean = float(w_all.mean())
        spread = float((w_all.max() - w_all.min()) / mean) if mean != 0 else float("inf")
        return CEWeights(float(w_all.sum()), int(w_all.numel()), spread, worst, z.shape[0])
