"""The guard's one-time costs, paid before the script's first microbatch.

The zero-code mode attaches inside the script's first forward, so whatever the guard does for the
first time there lands in that microbatch: the first call of each torch operator it uses (the
fingerprints' integer views and sums, the cross-entropy weights' ``log_softmax``/``gather``/
``scatter_add_``) and the first pass of each kind of autograd hook it installs costs far more than
the next one (measured on CPU, torch 2.13: the cross-entropy weights 2.8 ms cold, 1.25 ms warm).
:func:`warm_up` runs those paths once on a few CPU elements before the script starts. It draws no
random number, touches no CUDA device, leaves no hook behind and never raises.
"""

from __future__ import annotations

import torch

from runtime_guard import ce_weights, fingerprint

_done = False


class _Tiny(torch.nn.Module):
    """A module of one parameter, built without drawing from the script's random generator."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.linspace(-1.0, 1.0, 15).reshape(5, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight.t()


def _hook_paths() -> None:
    """One forward and backward through each kind of hook a probe installs (all removed after)."""
    tiny = _Tiny()
    handles = [
        tiny.register_forward_pre_hook(lambda m, args, kwargs: None, with_kwargs=True),
        tiny.register_forward_hook(lambda m, args, kwargs, out: None, with_kwargs=True, always_call=True),
        tiny.weight.register_post_accumulate_grad_hook(lambda p: None),
    ]
    try:
        with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
            logits = tiny(torch.linspace(0.0, 1.0, 12).reshape(4, 3))
        handles.append(logits.register_hook(lambda g: None))
        torch.nn.functional.cross_entropy(logits, torch.zeros(4, dtype=torch.long)).backward()
    finally:
        for handle in handles:
            handle.remove()


def _numeric_paths() -> None:
    """The fingerprints and the cross-entropy weights on a few elements of each float width."""
    with torch.no_grad():
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            p = torch.nn.Parameter(torch.linspace(-1.0, 1.0, 15, dtype=dtype).reshape(5, 3))
            p.grad = torch.ones_like(p)
            fingerprint.bit_checksums([p])
            fingerprint.bit_samples([p, None])
            fingerprint.versions([p])
            fingerprint.grad_state([p], measure=True)
        z = torch.linspace(-1.0, 1.0, 15).reshape(3, 5)
        g = torch.softmax(z, dim=1)
        g[:, 0] -= 1.0
        ce_weights.infer_weights(z, g)


def warm_up() -> None:
    """Run the guard's operators and hook kinds once per process (later calls return at once).
    A failure is swallowed: warming is an optimisation, never a reason to stop the script."""
    global _done
    if _done:
        return
    _done = True
    try:
        _numeric_paths()
        _hook_paths()
    except Exception:  # noqa: BLE001 - the script runs whatever happens here
        pass
