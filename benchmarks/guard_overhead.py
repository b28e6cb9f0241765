"""Overhead of the runtime guard: probed groups / plain groups, on CPU (a benchmark, not a test).

Two token models (~2 M and ~20 M parameters), A = 4, 2 groups per arm, interleaved
repetitions (plain, probed, plain, probed, ...) on one thread; prints the median time per
group of each arm, the ratio of the medians and the ratio of the fastest repetitions (less
sensitive to other jobs on a shared machine), plus the fingerprint size (numbers per tensor,
not per parameter). Targets (issue 4): default <= 1.10x at 2 M, <= 1.05x at 20 M; replay <= 2.5x
(``normalization="replay"``: +1 forward/backward per microbatch during the probed groups).

Usage: python benchmarks/guard_overhead.py [--reps 7] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

import runtime_guard
from runtime_guard.fingerprint import SAMPLES, grad_state

A = 4
GROUPS = 2


class TokenMLP(nn.Module):
    """Embedding, ``layers`` residual MLP blocks of width ``d`` (4d hidden), a head over ``vocab``."""

    def __init__(self, vocab: int, d: int, layers: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d)) for _ in range(layers)
        )
        self.head = nn.Linear(d, vocab)

    def forward(self, ids: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        h = self.embed(ids)
        for block in self.blocks:
            h = h + block(h)
        return self.head(h)


CONFIGS = {"2M": dict(vocab=2000, d=256, layers=2), "20M": dict(vocab=8000, d=512, layers=6)}


def run(model: nn.Module, data: list[tuple[torch.Tensor, torch.Tensor]], mode: str) -> float:
    """Seconds for GROUPS groups of A microbatches (probe attach/detach included).

    ``mode``: "plain" (no probe), "default" (``normalization="infer"``) or "replay"."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    vocab = model.head.out_features
    start = time.perf_counter()
    ctx = None
    if mode != "plain":
        normalization = "replay" if mode == "replay" else "infer"
        ctx = runtime_guard.probe(model, opt, accumulation_steps=A, groups=GROUPS, normalization=normalization)
        ctx.attach()
    for i, (ids, labels) in enumerate(data):
        loss = nn.functional.cross_entropy(model(ids, labels=labels).reshape(-1, vocab), labels.reshape(-1)) / A
        loss.backward()
        if (i + 1) % A == 0:
            opt.step()
            opt.zero_grad(set_to_none=True)
    if ctx is not None:
        ctx.detach()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--microbatch", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=64)
    ns = parser.parse_args()
    torch.set_num_threads(ns.threads)
    print(f"torch {torch.__version__}, {ns.threads} thread(s), m={ns.microbatch}, T={ns.tokens}, A={A}, "
          f"{GROUPS} groups per arm, {ns.reps} interleaved repetitions (medians)")
    for name, cfg in CONFIGS.items():
        torch.manual_seed(0)
        model = TokenMLP(**cfg)
        params = sum(p.numel() for p in model.parameters())
        tensors = sum(1 for _ in model.parameters())
        g = torch.Generator().manual_seed(0)
        data = [(torch.randint(0, cfg["vocab"], (ns.microbatch, ns.tokens), generator=g),
                 torch.randint(0, cfg["vocab"], (ns.microbatch, ns.tokens), generator=g)) for _ in range(GROUPS * A)]
        run(model, data, "plain")  # warm-up: allocator, lazy optimizer state
        modes = ["plain", "default", "replay"]
        times: dict[str, list[float]] = {mode: [] for mode in modes}
        for rep in range(ns.reps):
            for mode in (modes if rep % 2 == 0 else modes[::-1]):
                times[mode].append(run(model, data, mode))
        median = {mode: statistics.median(times[mode]) / GROUPS for mode in modes}
        fastest = {mode: min(times[mode]) / GROUPS for mode in modes}
        for p in model.parameters():
            p.grad = torch.ones_like(p)
        state = grad_state(list(model.parameters()), measure=True)
        model.zero_grad(set_to_none=True)
        print(f"{name}: {params / 1e6:.2f} M parameters in {tensors} tensors")
        print(f"  plain   {median['plain'] * 1e3:9.1f} ms / group")
        targets = {"default": "1.10" if name == "2M" else "1.05", "replay": "2.5"}
        for mode in ("default", "replay"):
            print(f"  {mode:7s} {median[mode] * 1e3:9.1f} ms / group   ratio {median[mode] / median['plain']:.3f}x "
                  f"(fastest {fastest[mode] / fastest['plain']:.3f}x; target {targets[mode]}x)")
        numbers = sum(len(s) for s in state.samples if s) + len(state.checksums or ()) + len(state.refs)
        print(f"  fingerprint: {numbers} numbers per state ({SAMPLES} sampled bit patterns, a checksum and a weak "
              f"ref per tensor; O(tensors) = {tensors}, parameters {params:,})")


if __name__ == "__main__":
    main()
