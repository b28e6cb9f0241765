"""FSDP2 (``fully_shard``) on CPU, one gloo process: the guard on a correct loop that turns
gradient sync off for microbatches 1..A-1, on a reset-every-microbatch loop, and bitwise
equality with and without the guard. Writes JSON to argv[1]."""

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


def run(variant: str, guard: bool) -> dict:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 5))
    mesh = init_device_mesh("cpu", (1,))
    for layer in (model[0], model[2]):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ctx = runtime_guard.probe(model, opt, accumulation_steps=A) if guard else nullcontext()
    with ctx as p:
        for i in range(4 * A):
            last = i % A == A - 1
            if variant == "zero_each":
                opt.zero_grad()
            else:
                model.set_requires_gradient_sync(last)
            x, y = torch.randn(4, 8), torch.randint(0, 5, (4,))
            (torch.nn.functional.cross_entropy(model(x), y) / A).backward()
            if last:
                opt.step()
                opt.zero_grad()
    weights = [t.full_tensor().reshape(-1).tolist() for t in model.state_dict().values()]
    out = {"weights": weights}
    if guard:
        report = p.report()
        out.update(codes=sorted(report.codes), D=report.card["D"], D_source=report.card["D_source"],
                   traces=[g["trace"] for g in report.card["groups"]])
    return out


def main(path: str) -> None:
    torch.set_num_threads(1)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        result = {name: run(name, True) for name in ("correct", "zero_each")}
        result["plain"] = run("correct", False)
        result["plain_again"] = run("correct", False)
    finally:
        dist.destroy_process_group()
    with open(path, "w") as handle:
        json.dump(result, handle)


if __name__ == "__main__":
    main(sys.argv[1])
