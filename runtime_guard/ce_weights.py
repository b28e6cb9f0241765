"""Per-token loss weights from the gradient of the logits (design notes §3, method A).

For softmax cross entropy each supervised row ``t`` of dL/dlogits is
``g[t] = w_t * (softmax(z_t) - onehot(y_t))``: the target is the only negative entry and
``w_t = g[t, y] / (p[t, y] - 1)``. Rows of padding or ``ignore_index`` are all zeros, so the
supervised-token count comes out of the same pass. A residual check marks other losses
(label smoothing, z-loss, MSE on a vector output, ...) as "not inferred". No labels and no
extra forward are needed; it sees the gradient before any clip or unscale. The softmax is
computed on a sample of rows only, so a 128k vocabulary never needs GBs of fp32 at once.
"""

from __future__ import annotations

import torch

from runtime_guard.trace import CEWeights


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


#: Supervised rows per microbatch whose weights are computed (evenly spaced, no RNG drawn).
SAMPLE_ROWS = 32


def infer_weights(logits: torch.Tensor, grad: torch.Tensor, scale: float = 1.0) -> CEWeights:
    """Infer the cross-entropy weights of one microbatch.

    One pass over the ``[N, V]`` gradient counts the supervised rows (rows of padding or
    ``ignore_index`` are all zeros); weights and the softmax form are computed on at most
    ``SAMPLE_ROWS`` evenly spaced supervised rows. The weight sum is ``mean weight x
    supervised rows``, exact when the weights are uniform inside the microbatch, which the
    sample checks (``spread``): a non-uniform weighting is reported as such and never judged.

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
        # a row is supervised when its gradient is not all zero (max and min: no |g| temporary)
        rows = ((g.amax(dim=1) != 0) | (g.amin(dim=1) != 0)).nonzero().squeeze(1)
        supervised = int(rows.numel())
        if supervised == 0:
            return CEWeights(0.0, 0, 0.0, 0.0, z.shape[0])
        pick = torch.linspace(0, supervised - 1, min(SAMPLE_ROWS, supervised), device=rows.device).round().long()
        sample = rows[pick]
        zs, gs = z[sample].float(), g[sample].float()
        g_target, target = torch.min(gs, dim=1, keepdim=True)  # the target is the only negative entry
        log_p = torch.log_softmax(zs, dim=1)
        w = g_target / torch.expm1(log_p.gather(1, target))  # p - 1 without cancellation
        expected = log_p.exp_().mul_(w)  # w * softmax, in the log_p buffer
        expected.scatter_add_(1, target, -w)
        diff = expected.sub_(gs)
        peak = torch.maximum(gs.amax(dim=1), gs.amin(dim=1).neg())
        off = torch.maximum(diff.amax(dim=1), diff.amin(dim=1).neg())
        residual = float((off / peak).max())
        w64 = w.squeeze(1).double() / scale
        mean = float(w64.mean())
        spread = float((w64.max() - w64.min()) / mean) if mean != 0 else float("inf")
        return CEWeights(mean * supervised, supervised, spread, residual, z.shape[0])
