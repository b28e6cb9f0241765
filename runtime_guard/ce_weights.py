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


#: Rows per microbatch on which the softmax form is verified (evenly spaced, no RNG drawn).
RESIDUAL_ROWS = 32


def infer_weights(logits: torch.Tensor, grad: torch.Tensor, scale: float = 1.0) -> CEWeights:
    """Infer the cross-entropy weights of one microbatch.

    Two passes over ``[N, V]`` give the weights (argmin of the gradient, logsumexp of the
    logits); the full softmax form is verified on ``RESIDUAL_ROWS`` evenly spaced supervised
    rows, which is enough to tell cross entropy from label smoothing, z-loss or MSE.

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
        checked: list[torch.Tensor] = []
        for start in range(0, z.shape[0], rows_per_chunk):
            zc = z[start:start + rows_per_chunk]
            gc = g[start:start + rows_per_chunk]
            target = gc.argmin(dim=1, keepdim=True)
            g_target = gc.gather(1, target).float().squeeze(1)
            # an unsupervised row is all zeros: its "target" entry is 0 too
            supervised = g_target != 0
            log_p = zc.gather(1, target).float().squeeze(1) - torch.logsumexp(zc.float(), dim=1)
            w = g_target / torch.expm1(log_p)  # p - 1 without cancellation
            weights.append(w[supervised])
            checked.append(supervised.nonzero().squeeze(1) + start)
        w_all = torch.cat(weights).double() / scale
        rows = torch.cat(checked)
        if w_all.numel() == 0:
            return CEWeights(0.0, 0, 0.0, 0.0, z.shape[0])
        pick = torch.linspace(0, rows.numel() - 1, min(RESIDUAL_ROWS, rows.numel())).round().long()
        sample = rows[pick]
        zs, gs = z[sample].float(), g[sample].float()
        ws = (w_all[pick] * scale).float().unsqueeze(1)
        target = gs.argmin(dim=1, keepdim=True)
        expected = ws * torch.softmax(zs, dim=1)
        expected.scatter_add_(1, target, -ws)
        residual = float(((gs - expected).abs().amax(dim=1) / gs.abs().amax(dim=1)).max())
        mean = float(w_all.mean())
        spread = float((w_all.max() - w_all.min()) / mean) if mean != 0 else float("inf")
        return CEWeights(float(w_all.sum()), int(w_all.numel()), spread, residual, z.shape[0])
