"""Copies of the probed parameters that a loop averages into, and their moves toward them (ACC007).

A weight EMA, an ``AveragedModel``, a diffusers ``EMAModel``'s ``shadow_params``.

A weight average is defined once per optimizer update: ``s <- c s + (1 - c) p`` with the
parameters ``p`` just updated. Run every microbatch it advances A times per update over unchanged
parameters. That is observable without knowing the EMA's class or method names: between two
microbatches of one group the parameters do not change, so any change of a copy there is the
loop's, and an average has a signature no other write has: every element moves toward its
parameter by the same factor, ``s' - p = c (s - p)`` with ``0 < c < 1``. A copy (``copy_``: a
backup before a weight perturbation, a "best" snapshot) has ``c = 0``; a buffer accumulating
gradients or any other write does not move every element by one factor. A fresh copy equal to its
parameters shows nothing (``s - p = 0``); after the first update it does.

The copies are found at the first forward after the first update (with one probed group or at an epoch
end: when the probe installs its hooks and, where none is alive then, once more there), among the live
objects (one pass
over the collector's list by exact type, :mod:`runtime_guard.heap`): modules, lists, tuples and
dicts of tensors with the probed parameters' shapes in their order, none of them trained by an
optimizer. Per check a few evenly spaced elements of a few of
their tensors are read (no pass over the data); writes through ``.data`` are seen too. Copies of
sharded (FSDP2 DTensor) parameters are not followed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from runtime_guard import heap

#: Tensors of a copy sampled per check (evenly spaced over the copy) and elements sampled per tensor.
TENSORS, ELEMENTS = 8, 4
#: An element whose distance to its parameter is below this fraction of its value gives no usable ratio.
MIN_DISTANCE = 1e-4
#: How far (relative to the largest sampled distance) an element may lie from one common factor.
RESIDUAL = 1e-2
#: Factors at or below this are copies, not averages.
MIN_FACTOR = 1e-3
#: Sampled elements with a usable ratio needed to call a change an average.
MIN_USABLE = 3

_CONTAINERS = frozenset({list, tuple, dict})
_PLAIN = (torch.Tensor, torch.nn.Parameter)  # not a DTensor shard (FSDP2): copies of those are not followed


@dataclass
class Shadow:
    """One copy of the probed parameters: what holds it, its tensors paired with the parameters, and the
    values sampled at the last check (``None`` before the first)."""

    owner: str
    pairs: list[tuple[torch.Tensor, torch.Tensor]]  # (copy, parameter), at most TENSORS of them
    last: tuple[torch.Tensor, torch.Tensor] | None = None  # (copy samples, parameter samples), float64

    def sample(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The sampled elements of the copy and of the parameters, as float64 on the CPU (a copy kept on
        another device than its parameters is read where it lives)."""
        with torch.no_grad():
            copies = torch.cat([_elements(s) for s, _ in self.pairs])
            params = torch.cat([_elements(p) for _, p in self.pairs])
        return copies, params


def _elements(t: torch.Tensor) -> torch.Tensor:
    """``ELEMENTS`` evenly spaced elements of ``t`` (a strided view, no pass over the data), float64 on the CPU."""
    flat = t.detach().reshape(-1)
    stride = max(1, (flat.numel() - 1) // (ELEMENTS - 1))
    return flat[::stride][:ELEMENTS].double().cpu()


@dataclass
class Blend:
    """A copy moved toward the unchanged parameters by ``factor`` (``s' - p = factor (s - p)``)."""

    owner: str
    factor: float


@dataclass
class ShadowWatch:
    """The copies of the probed parameters found at install, checked at each forward and update attempt."""

    shadows: list[Shadow] = field(default_factory=list)
    #: some check found a copy apart from its parameters (enough sampled elements for a factor): until then a
    #: move toward them cannot be seen (a fresh copy, or updates that have not moved the weights yet)
    apart: bool = False

    def check(self) -> list[Blend]:
        """Sample every copy; return those that moved toward the parameters since the last check with the
        parameters unchanged in between (see the module docstring)."""
        blends = []
        for shadow in self.shadows:
            now = shadow.sample()
            self.apart = self.apart or _usable(*now).sum() >= MIN_USABLE
            before, shadow.last = shadow.last, now
            if before is not None:
                factor = _blend_factor(before, now)
                if factor is not None:
                    blends.append(Blend(shadow.owner, factor))
        return blends

    def clear(self) -> None:
        """Drop every reference to the copies (at detach)."""
        self.shadows.clear()


def _usable(copy: torch.Tensor, params: torch.Tensor) -> torch.Tensor:
    """Which sampled elements of a copy lie far enough from their parameters to give a ratio."""
    return (copy - params).abs() > MIN_DISTANCE * copy.abs()


def _blend_factor(before: tuple[torch.Tensor, torch.Tensor], now: tuple[torch.Tensor, torch.Tensor]) -> float | None:
    """The common factor ``c`` in ``s' - p = c (s - p)`` when the sampled copy changed, the sampled
    parameters did not, and every usable element fits one ``c`` with ``MIN_FACTOR < c < 1``; else ``None``."""
    (s0, p0), (s1, p1) = before, now
    if not torch.equal(p0, p1) or torch.equal(s0, s1):
        return None
    d0, d1 = s0 - p0, s1 - p0
    usable = _usable(s0, p0)
    if int(usable.sum()) < MIN_USABLE:
        return None
    d0, d1 = d0[usable], d1[usable]
    c = float((d0 * d1).sum() / (d0 * d0).sum())
    residual = float((d1 - c * d0).abs().max() / d0.abs().max())
    return c if MIN_FACTOR < c < 1 and residual <= RESIDUAL else None


def find_shadows(model: torch.nn.Module, probed: Sequence[torch.Tensor]) -> list[Shadow]:
    """The copies of ``probed`` (the parameters the probe follows) alive now: a module (not ``model`` nor
    one sharing its parameters), list, tuple or dict of tensors whose shapes match the model's parameters
    (all of them, or the probed ones) in order, that shares no tensor with the model and none of whose
    tensors an optimizer holds or has a gradient. One object per set of tensors (an ``AveragedModel`` and
    its inner module hold the same)."""
    references = [list(dict.fromkeys(model.parameters())), list(probed)]
    references = [r for r in references if r]
    if not references:
        return []
    sizes = {len(r) for r in references}
    model_ids = {id(p) for p in references[0]}
    probed_ids = {id(p) for p in probed}
    classes, exact = [torch.nn.Module, torch.optim.Optimizer], _CONTAINERS
    near = heap.near_the_loop(classes, exact=exact)
    for collect in (False, True):  # a copy found: collect, so that an earlier run's dead copies are not taken
        objects = near if near is not None else heap.live_instances(classes, exact=exact, collect=collect)
        candidates, trained = _candidates(objects, model_ids, sizes)
        found: dict[tuple[int, ...], Shadow] = {}
        for owner, tensors in candidates:
            key = tuple(id(t) for t in tensors)
            if key in found or any(id(t) in trained or t.grad is not None or type(t) not in _PLAIN
                                   or t.device.type == "meta" for t in tensors):
                continue
            for reference in references:
                if len(reference) == len(tensors) and all(t.shape == p.shape and t.dtype.is_floating_point
                                                          and t.layout == torch.strided and type(p) in _PLAIN
                                                          for t, p in zip(tensors, reference, strict=True)):
                    pairs = [(t, p) for t, p in zip(tensors, reference, strict=True)
                             if id(p) in probed_ids and t.numel()]
                    if pairs:
                        found[key] = _shadow(owner, pairs)
                    break
        if not found or near is not None:  # what the stack reaches is alive
            break
    return list(found.values())


def _candidates(objects: list[object], model_ids: set[int], sizes: set[int]
                ) -> tuple[list[tuple[str, list[torch.Tensor]]], set[int]]:
    """The ``objects`` holding tensors of one of the ``sizes`` (none of them one of ``model_ids``), with
    their descriptions, and the ids of the tensors the optimizers among them hold."""
    candidates: list[tuple[str, list[torch.Tensor]]] = []
    trained: set[int] = set()
    for obj in objects:
        try:
            if issubclass(type(obj), torch.optim.Optimizer):
                trained.update(id(p) for g in obj.param_groups for p in g["params"])  # type: ignore[attr-defined]
                continue
            tensors = _tensors_of(obj, sizes, model_ids)
        except Exception:  # noqa: BLE001 - objects whose attributes fail to read are not copies
            continue
        if tensors is not None and not any(id(t) in model_ids for t in tensors):
            candidates.append((_describe(obj), tensors))
    return candidates, trained


def _tensors_of(obj: object, sizes: set[int], model_ids: set[int]) -> list[torch.Tensor] | None:
    """The tensors ``obj`` holds in order when it is a module, or a list, tuple or dict of nothing but
    tensors, with one of the lengths in ``sizes``; else ``None`` (also for a module whose first parameter
    is one of ``model_ids``: the model or a submodule of it, not read further)."""
    kind = type(obj)
    if kind in _CONTAINERS:
        if len(obj) not in sizes:  # type: ignore[arg-type]
            return None
        values: list[object] = list(obj.values() if kind is dict else obj)  # type: ignore[attr-defined]
    elif isinstance(obj, torch.nn.Module):
        first = next(obj.parameters(), None)
        if first is None or id(first) in model_ids:  # the model or one of its submodules: no copy
            return None
        values = list(dict.fromkeys(obj.parameters()))
        if len(values) not in sizes:
            return None
    else:
        return None
    return values if all(isinstance(v, torch.Tensor) for v in values) else None  # type: ignore[return-value]


def _describe(obj: object) -> str:
    if isinstance(obj, torch.nn.Module):
        return f"{type(obj).__name__} module"
    return f"a {type(obj).__name__} of {len(obj)} tensors"  # type: ignore[arg-type]


def _shadow(owner: str, pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> Shadow:
    """A :class:`Shadow` over at most ``TENSORS`` evenly spaced pairs."""
    return Shadow(owner, pairs[::max(1, len(pairs) // TENSORS)][:TENSORS])
