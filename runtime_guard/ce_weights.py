"""Per-token loss weights from the gradient of the logits (design notes §3, method A).

For softmax cross entropy each supervised row ``t`` of dL/dlogits is
``g[t] = w_t * (softmax(z_t) - onehot(y_t))``: the target is the only negative entry and
``w_t = g[t, y] / (p[t, y] - 1)``. Rows of padding or ``ignore_index`` are all zeros, so the
supervised-token count comes out of the same pass. A residual check marks other losses
(label smoothing, z-loss, MSE on a vector output, ...) as "not inferred". No labels and no
extra forward are needed; it sees the gradient before any clip or unscale. The softmax is
computed on a sample of rows only, so a 128k vocabulary never needs GBs of fp32 at once.

A model that returns log-probabilities (``log_softmax``) for ``nll_loss`` gives rows
``g[t] = -w_t * onehot(y_t)``: only the target entry is nonzero and ``w_t = -g[t, y]``; the form
with the smaller residual is taken. Class weights (``weight=`` of either loss) make ``w_t`` depend
on the target class: when the sampled weights vary but are constant per class, every supervised
row's weight is computed (in chunks) and summed exactly.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from runtime_guard.trace import CEWeights


def _qualifies(candidate: object) -> bool:
    return (
        isinstance(candidate, torch.Tensor)
        and candidate.is_floating_point()
        and candidate.requires_grad
        and candidate.dim() >= 2
        and candidate.shape[-1] >= 2
    )


def logits_of(output: object) -> torch.Tensor | None:
    """The logits tensor of a model output: ``.logits`` / ``["logits"]`` (HF), the tensor
    itself, the first tensor of a tuple, or the only qualifying tensor of a dict without a
    ``"logits"`` key (timm's ``ClassificationTask`` returns ``{"loss", "output"}``); ``None``
    unless it is a floating tensor with a class dimension of at least 2 that requires grad."""
    candidate = getattr(output, "logits", None)
    if candidate is None and isinstance(output, Mapping):
        candidate = output.get("logits")
        if candidate is None:  # several candidates (outputs of two heads) are ambiguous: none
            found = [v for v in output.values() if _qualifies(v)]
            candidate = found[0] if len(found) == 1 else None
    if candidate is None and isinstance(output, torch.Tensor):
        candidate = output
    if candidate is None and isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
        candidate = output[0]
    return candidate if _qualifies(candidate) else None


#: Supervised rows per microbatch whose weights are computed (evenly spaced, no RNG drawn).
SAMPLE_ROWS = 32
#: Relative spread of the sampled weights above which class weighting is tried (fp32 noise is ~1e-7).
CLASS_SPREAD = 1e-4
#: Elements (rows x V) per chunk when every row's weight is computed (64 MiB of fp32).
CHUNK_ELEMENTS = 1 << 24


def _relative(a: torch.Tensor, peak: torch.Tensor) -> float:
    return float((torch.maximum(a.amax(dim=1), a.amin(dim=1).neg()) / peak).max())


def _softmax_weights(z: torch.Tensor, g_target: torch.Tensor,
                     target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Weights ``w = g[y] / (p[y] - 1)`` and the expected rows ``w (softmax - onehot)`` of ``[n, V]`` fp32 logits."""
    log_p = torch.log_softmax(z, dim=1)
    w = g_target / torch.expm1(log_p.gather(1, target))  # p - 1 without cancellation
    expected = log_p.exp_().mul_(w)  # w * softmax, in the log_p buffer
    expected.scatter_add_(1, target, -w)
    return w, expected


def _all_weights(z: torch.Tensor, g: torch.Tensor, rows: torch.Tensor, nll: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Every supervised row's weight and target class, in chunks of ``CHUNK_ELEMENTS``."""
    weights, targets = [], []
    step = max(1, CHUNK_ELEMENTS // max(1, z.shape[1]))
    for start in range(0, rows.numel(), step):
        pick = rows[start:start + step]
        gs = g[pick].float()
        g_target, target = torch.min(gs, dim=1, keepdim=True)
        w = g_target.neg() if nll else _softmax_weights(z[pick].float(), g_target, target)[0]
        weights.append(w.squeeze(1).double())
        targets.append(target.squeeze(1))
    return torch.cat(weights), torch.cat(targets)


def _class_spread(w: torch.Tensor, target: torch.Tensor) -> float:
    """The largest (max - min) / mean of the weights inside one target class."""
    worst = 0.0
    for c in target.unique():
        wc = w[target == c]
        mean = float(wc.mean())
        worst = max(worst, float((wc.max() - wc.min()) / mean) if mean != 0 else float("inf"))
    return worst


def infer_weights(logits: torch.Tensor, grad: torch.Tensor, scale: float = 1.0) -> CEWeights:
    """Infer the cross-entropy (or NLL) weights of one microbatch.

    One pass over the ``[N, V]`` gradient counts the supervised rows (rows of padding or
    ``ignore_index`` are all zeros); weights and the loss form are computed on at most
    ``SAMPLE_ROWS`` evenly spaced supervised rows. The weight sum is ``mean weight x
    supervised rows``, exact when the weights are uniform inside the microbatch, which the
    sample checks (``spread``). Weights that vary only with the target class (class weights)
    are summed over every row (``by_class``); any other non-uniform weighting is reported as
    such and never judged.

    Args:
        logits: ``[..., V]`` values of the forward output (any float dtype): logits, or
            log-probabilities for ``nll_loss``.
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
        peak = torch.maximum(gs.amax(dim=1), gs.amin(dim=1).neg())
        w_ce, expected = _softmax_weights(zs, g_target, target)
        residual_ce = _relative(expected.sub_(gs), peak)
        off_target = gs.scatter(1, target, 0.0)  # the NLL form: nothing but the target entry
        residual_nll = _relative(off_target, peak)
        nll = residual_nll < residual_ce
        w = g_target.neg() if nll else w_ce
        form = "nll" if nll else "softmax cross entropy"
        residual = min(residual_ce, residual_nll)
        w64 = w.squeeze(1).double() / scale
        mean = float(w64.mean())
        spread = float((w64.max() - w64.min()) / mean) if mean != 0 else float("inf")
        if spread > CLASS_SPREAD and mean != 0 and supervised > 1:
            w_all, t_all = _all_weights(z, g, rows, nll)
            within = _class_spread(w_all, t_all)
            if within <= CLASS_SPREAD:
                return CEWeights(float(w_all.sum()) / scale, supervised, within, residual, z.shape[0], form, True)
        return CEWeights(mean * supervised, supervised, spread, residual, z.shape[0], form)
