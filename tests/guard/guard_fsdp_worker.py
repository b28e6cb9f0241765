"""FSDP2 (``fully_shard``) on CPU, one rank of a 2-process gloo group (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT from the environment): the guard on a correct loop that turns gradient
sync off for microbatches 1..A-1, on a reset-every-microbatch loop, on a loop whose ranks read
the same examples, with the replay asked for, and bitwise equality with and without the guard.
Writes JSON to ``argv[1].<rank>.json``."""

from __future__ import annotations

import json
import os
import sys
from contextlib import nullcontext

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import runtime_guard

A = 2


def run(variant: str, guard: bool, options: dict | None = None) -> dict:
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # the same initial weights on every rank
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 5))
    mesh = init_device_mesh("cpu", (world,))
    for layer in (model[0], model[2]):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.Generator().manual_seed(1 if variant == "same_data" else 1 + rank)
    ctx = runtime_guard.probe(model, opt, accumulation_steps=A, **(options or {})) if guard else nullcontext()
    with ctx as p:
        for i in range(4 * A):
            last = i % A == A - 1
            if variant == "zero_each":
                opt.zero_grad()
            else:
                model.set_requires_gradient_sync(last)
            x, y = torch.randn(4, 8, generator=data), torch.randint(0, 5, (4,), generator=data)
            (torch.nn.functional.cross_entropy(model(x), y) / A).backward()
            if last:
                opt.step()
                opt.zero_grad()
    weights = [t.full_tensor().reshape(-1).tolist() for t in model.state_dict().values()]
    out = {"weights": weights}
    if guard:
        report = p.report()
        card = report.card
        out.update(codes=sorted(report.codes), D=card["D"], D_source=card["D_source"],
                   effective_batch=card["effective_batch"], traces=[g["trace"] for g in card["groups"]],
                   normalization=card["normalization"], tokens=card["supervised_tokens_per_group"],
                   weight_sums=card["normalization_weight_sums"], checks=card["checks"])
    return out


def main(prefix: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    try:
        result = {name: run(name, True) for name in ("correct", "zero_each", "same_data")}
        result["replay"] = run("correct", True, {"normalization": "replay"})
        result["plain"] = run("correct", False)
        result["plain_again"] = run("correct", False)
        rank = dist.get_rank()
    finally:
        dist.destroy_process_group()
    with open(f"{prefix}.{rank}.json", "w") as handle:
        json.dump(result, handle)


if __name__ == "__main__":
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    main(sys.argv[1])
