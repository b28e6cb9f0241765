"""O(number of tensors) fingerprints of gradients and parameters.

Never a copy of a tensor; per tensor a few numbers:

* **bit samples** (always, cheap): the raw bits of up to ``SAMPLES`` evenly spaced elements,
  read through strided views and one concatenation, no pass over the data. With the tensor's
  identity and in-place version counter they tell whether a grad is still the one seen
  before. The samples are what catches writes that bypass the version counter
  (``p.grad.data.zero_()``, ``p.grad.data.mul_(c)`` touch every element); a write through
  ``.data`` that changes only elements between the samples goes unseen.
* **measured values** (only when asked, or when no sampled element is non-zero): a wrapping
  integer sum of the bit pattern ("did anything change", catches a one-ulp change of one
  element) and the fp32 L2 norm ("is it zero", "by how much"): two passes over the data,
  measured in the design notes (§5) at 4.8 ms for 10.9 M parameters in 51 tensors.

The probe takes bit samples at every forward and backward and measures only where a check
needs exact values while the grads are still the ones sampled (an update attempt under DDP,
the first forward of a group that finds grads present): per microbatch of a correct loop
there is no pass over the gradients.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

#: the integer dtype of each element size: a tensor's raw bits, read through a view
INT_VIEW = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.int8}

#: Elements sampled per tensor (evenly spaced from the first).
SAMPLES = 8

_PLAIN = (torch.Tensor, torch.nn.Parameter)  # not a DTensor: no local shard to look up


def local_tensor(t: torch.Tensor) -> torch.Tensor:
    """The rank-local data of ``t``: a DTensor's local shard (FSDP2), else ``t`` itself."""
    to_local = getattr(t, "to_local", None)
    return to_local() if callable(to_local) else t


def _bit_sum(t: torch.Tensor) -> torch.Tensor:
    flat = local_tensor(t).detach().reshape(-1)
    view = INT_VIEW[flat.element_size()]
    # int32 accumulation wraps; the design notes measured int64 accumulation 2.5-6x slower
    return flat.view(view).sum(dtype=torch.int64 if view is torch.int64 else torch.int32).to(torch.int64)


def bit_checksums(tensors: Sequence[torch.Tensor]) -> tuple[int, ...]:
    """One wrapping integer sum of the bit pattern per tensor (same length as ``tensors``)."""
    if not tensors:
        return ()
    with torch.no_grad():
        return tuple(torch.stack([_bit_sum(t).cpu() for t in tensors]).tolist())


def bit_samples(tensors: Sequence[torch.Tensor | None]) -> tuple[tuple[int, ...] | None, ...]:
    """The raw bits of up to ``SAMPLES`` evenly spaced elements per tensor (``None`` stays ``None``).

    One strided view per tensor, one ``torch.cat`` per dtype and device, one ``tolist``: a few
    microseconds per tensor, whatever its size.
    """
    out: list[tuple[int, ...] | None] = [None] * len(tensors)
    groups: dict[tuple[torch.dtype, torch.device], tuple[list[int], list[torch.Tensor]]] = {}
    with torch.no_grad():
        for i, t in enumerate(tensors):
            if t is None:
                continue
            if type(t) not in _PLAIN:
                t = local_tensor(t)
            if t.layout != torch.strided:
                out[i] = ()
                continue
            n = t.numel()
            if n > SAMPLES and t.is_contiguous():
                view = t.as_strided((SAMPLES,), ((n - 1) // (SAMPLES - 1),), t.storage_offset())
            else:
                view = t.reshape(-1)[:: max(1, (n - 1) // (SAMPLES - 1))][:SAMPLES] if n else t.reshape(-1)
            indices, views = groups.setdefault((t.dtype, t.device), ([], []))
            indices.append(i)
            views.append(view)
        for indices, views in groups.values():
            flat = torch.cat(views) if len(views) > 1 else views[0].contiguous()
            values = flat.view(INT_VIEW[flat.element_size()]).tolist()
            start = 0
            for i, view in zip(indices, views, strict=True):
                k = view.numel()
                out[i] = tuple(values[start:start + k])
                start += k
    return tuple(out)


def _nonzero_bits(bits: int, size: int) -> bool:
    """False for the bit patterns of +0.0 and -0.0 of a float of ``size`` bytes."""
    return bits not in (0, -(1 << (8 * size - 1)))


@dataclass(eq=False)
class GradState:
    """The state of the probed parameters' ``.grad`` at one moment.

    ``refs[i]`` is a weak reference to parameter i's grad tensor (``None`` for no grad):
    backward accumulates in place into an existing grad, so a different tensor later means the
    grad was replaced (``p.grad = None``, ``zero_grad(set_to_none=True)``). ``versions`` are
    the grads' in-place version counters and ``samples`` their bit samples.

    ``checksums`` (bit checksum per grad, ``None`` for no grad), ``norm`` (fp32 L2 norm over all
    local grads, shards under FSDP2) and ``nonzero`` (grads with a non-zero norm) are ``None``
    until :meth:`measure` ran. A state is measured when it is taken if none of its sampled
    elements is non-zero, so an unmeasured state always has a non-zero grad.
    """

    refs: tuple[weakref.ref[torch.Tensor] | None, ...] = field(repr=False)
    versions: tuple[int, ...] = field(repr=False)
    samples: tuple[tuple[int, ...] | None, ...] = field(repr=False)
    checksums: tuple[int | None, ...] | None = None
    norm: float | None = None
    nonzero: int | None = None

    @property
    def measured(self) -> bool:
        """True once the exact values (checksums, norm) were taken."""
        return self.checksums is not None

    def still_current(self, params: Sequence[torch.Tensor]) -> bool:
        """True when every grad is the same tensor, with the same in-place version counter and
        the same sampled bits, as when this state was taken (a clip, a reset and backward
        accumulation all bump the counter or change the samples)."""
        if len(self.refs) != len(params):
            return False
        grads = [p.grad for p in params]
        for ref, version, grad in zip(self.refs, self.versions, grads, strict=True):
            if (ref is None) != (grad is None):
                return False
            if grad is not None and (ref() is not grad or grad._version != version):
                return False
        return bit_samples(grads) == self.samples

    def measure(self, params: Sequence[torch.Tensor]) -> GradState:
        """Take the exact values from ``params``' grads, which must be the ones this state
        describes (see :meth:`still_current`); returns ``self``."""
        if self.measured:
            return self
        grads = [p.grad for p in params]
        present = [g for g in grads if g is not None]
        with torch.no_grad():
            if present:
                locals_ = [local_tensor(g).detach() for g in present]
                norms = torch.stack([n.float().cpu() for n in torch._foreach_norm(locals_)])
                sums = torch.stack([_bit_sum(g).cpu() for g in locals_]).tolist()
                self.norm = float(norms.square().sum().sqrt())
                self.nonzero = int((norms != 0).sum())  # NaN counts as non-zero
            else:
                sums, self.norm, self.nonzero = [], 0.0, 0
        it = iter(sums)
        self.checksums = tuple(None if g is None else next(it) for g in grads)
        return self

    @property
    def all_zero(self) -> bool:
        """True when every grad is ``None`` or all zeros (an unmeasured state has a non-zero
        sampled element, so it is not all zero)."""
        return self.nonzero == 0 if self.measured else False

    def replaced_in(self, params: Sequence[torch.Tensor]) -> bool:
        """True when some grad present in this state is no longer the grad of its parameter."""
        return any(ref is not None and ref() is not p.grad for ref, p in zip(self.refs, params, strict=False))

    def same_values(self, other: GradState) -> bool:
        """True when both states hold the same grads (``None`` and all-zero differ): bit-identical
        when both were measured, else the same sampled bits."""
        if self.measured and other.measured:
            return self.checksums == other.checksums
        return self.samples == other.samples


def grad_state(params: Sequence[torch.Tensor], measure: bool = False) -> GradState:
    """Fingerprint the ``.grad`` of ``params``: bit samples always; the exact values too when
    ``measure`` or when no sampled element of a present grad is non-zero."""
    grads = [p.grad for p in params]
    samples = bit_samples(grads)
    state = GradState(
        tuple(None if g is None else weakref.ref(g) for g in grads),
        tuple(-1 if g is None else g._version for g in grads),
        samples,
    )
    sizes = [local_tensor(g).element_size() for g in grads if g is not None]
    present = [s for s in samples if s is not None]
    if measure or not any(_nonzero_bits(b, size) for s, size in zip(present, sizes, strict=True) for b in s):
        state.measure(params)
    return state


def rescale_factor(before: GradState, after: GradState, params: Sequence[torch.Tensor]) -> float | None:
    """The factor c of an in-place rescale of every grad from ``before`` to ``after`` (``p.grad.div_(A)``):
    the same grad tensors, every sampled element of ``after`` c times its value in ``before`` (zeros stay
    zero), c non-zero and finite. ``None`` for any other change (a reset, a replaced grad, elements scaled
    apart) and where no sampled element was non-zero. ``params`` hold the grads of ``after``: their dtypes
    decode the sampled bits."""
    grads = [p.grad for p in params]
    if before.replaced_in(params) or len(before.samples) != len(grads) or len(after.samples) != len(grads):
        return None
    ratios: list[float] = []
    for grad, old, new in zip(grads, before.samples, after.samples, strict=True):
        if (old is None) != (new is None):
            return None
        if grad is None or old is None or new is None:
            continue
        if len(old) != len(new) or not grad.is_floating_point():
            return None
        dtype, view = grad.dtype, INT_VIEW[grad.element_size()]
        x, y = (torch.tensor(bits, dtype=view).view(dtype).double().tolist() for bits in (old, new))
        for a, b in zip(x, y, strict=True):
            if a == 0 or b == 0:
                if a != b:
                    return None
            else:
                ratios.append(b / a)
    if not ratios or not all(math.isfinite(r) for r in ratios):
        return None
    c = ratios[0]
    tol = 1e-2 if any(g is not None and g.element_size() < 4 for g in grads) else 1e-5
    return c if all(abs(r / c - 1) <= tol for r in ratios) else None


def versions(tensors: Sequence[torch.Tensor]) -> tuple[int, ...]:
    """The in-place version counters of ``tensors`` (optimizer updates bump them)."""
    return tuple(t._version for t in tensors)
