"""A plain training loop for ``guard_overhead.py``, which runs it with and without the guard.

It never imports the guard, so the same file runs as is (the plain arm) and under
``python -m runtime_guard run`` (the probed arm, zero code changes).

    python benchmarks/guard_overhead_loop.py --model 2M [--transformers] [--microbatches 8]

A token model (:class:`TokenMLP`, ~2 M or ~20 M parameters), AdamW, A = 4, cross entropy / A. With
``--transformers`` the script imports transformers first and steps a linear warm-up schedule of
transformers' per update, as a loop that uses the HF stack does (the guard must not import any of
transformers' lazy submodules while it watches). Prints one JSON line: ``first_microbatch`` (seconds
from the first forward's call to the end of its backward: the guard finds the model and attaches
there), ``first_microbatch_cpu`` (the same span in this process's CPU seconds, ``time.process_time``: less
sensitive to other jobs on a shared machine), ``loop`` (seconds for every microbatch) and ``microbatches``.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from torch import nn

A = 4


class TokenMLP(nn.Module):
    """Embedding, ``layers`` residual MLP blocks of width ``d`` (4d hidden), a head over ``vocab``:
    ``ids [m, T] -> logits [m, T, vocab]``."""

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


#: the two model sizes, ~2 M and ~20 M parameters (``guard_overhead.py`` prints the exact counts)
CONFIGS = {"2M": dict(vocab=2000, d=256, layers=2), "20M": dict(vocab=8000, d=512, layers=6)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=sorted(CONFIGS), default="2M")
    parser.add_argument("--transformers", action="store_true")
    parser.add_argument("--microbatches", type=int, default=8)
    parser.add_argument("--microbatch", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    ns = parser.parse_args()
    torch.set_num_threads(ns.threads)
    torch.manual_seed(0)
    cfg = CONFIGS[ns.model]
    model = TokenMLP(**cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    sched = None
    if ns.transformers:
        from transformers import get_linear_schedule_with_warmup

        sched = get_linear_schedule_with_warmup(opt, num_warmup_steps=2, num_training_steps=ns.microbatches // A)
    g = torch.Generator().manual_seed(0)
    shape = (ns.microbatch, ns.tokens)
    data = [(torch.randint(0, cfg["vocab"], shape, generator=g), torch.randint(0, cfg["vocab"], shape, generator=g))
            for _ in range(ns.microbatches)]
    first = first_cpu = 0.0
    start, start_cpu = time.perf_counter(), time.process_time()
    for i, (ids, labels) in enumerate(data):
        loss = nn.functional.cross_entropy(model(ids, labels=labels).reshape(-1, cfg["vocab"]), labels.reshape(-1)) / A
        loss.backward()
        if i == 0:
            first, first_cpu = time.perf_counter() - start, time.process_time() - start_cpu
        if (i + 1) % A == 0:
            opt.step()
            opt.zero_grad(set_to_none=True)
            if sched is not None:
                sched.step()
    loop = time.perf_counter() - start
    print(json.dumps({"first_microbatch": first, "first_microbatch_cpu": first_cpu, "loop": loop,
                      "microbatches": ns.microbatches}))


if __name__ == "__main__":
    main()
