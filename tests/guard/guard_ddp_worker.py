"""One rank of the 2-process gloo DDP checks of the runtime guard (runtime-guard-design.md §4).

Usage: RANK=r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=p python guard_ddp_worker.py OUT_PREFIX
Runs every placement in one process group and writes OUT_PREFIX.<rank>.json with, per
placement, the codes found, D, the effective batch, all-reduce rounds and a weight checksum.
WORLD_SIZE=1 runs the same placements with one replica.
"""

from __future__ import annotations

import json
import sys
from contextlib import nullcontext

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, RandomSampler, TensorDataset

import runtime_guard

A = 4
M = 4
GROUPS = 3
#: placements whose sampler is a RandomSampler seeded the same on every rank: each rank loads the same samples
SAME_SAMPLES = ("random_sampler", "same_samples_rank_noise", "sliced_by_rank")
#: placements that add noise seeded by the rank to the loaded inputs before the model (augmentation)
RANK_NOISE = ("same_samples_rank_noise", "distinct_samples_rank_noise")
#: placements whose loader yields the same batch of M x D examples on every rank, each rank taking its slice
SLICED = ("sliced_by_rank",)
#: before each microbatch, a forward without grad on a batch of a loader every rank shares (an evaluation,
#: or a rollout from shared prompts): it takes that batch, the training forward's rows are its own
SHARED_NO_GRAD = ("no_grad_forward_each",)
#: every microbatch inside no_sync, the gradients averaged by hand with dist.all_reduce before the update
MANUAL_ALL_REDUCE = ("all_inside_manual_all_reduce",)
#: the model's forward takes the loaded batch whole, an ``[x, y]`` list (a Lightning module's
#: ``training_step(batch)`` that Fabric redirects through DDP's forward): its rows are the input's
WHOLE_BATCH = ("whole_batch_same_samples", "whole_batch_distinct")
PLACEMENTS = ("none", "no_sync_both", "backward_only", "all_inside", "flag_nanogpt", *SAME_SAMPLES,
              "distinct_samples_rank_noise", *SLICED, *SHARED_NO_GRAD, *MANUAL_ALL_REDUCE, *WHOLE_BATCH)


class WholeBatch(nn.Module):
    """``[x [m, 6], y [m, 1]] -> [m, 1]``: a linear map of the batch's inputs, the batch passed whole."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(6, 1)

    def forward(self, batch: list[torch.Tensor]) -> torch.Tensor:
        return self.linear(batch[0])


def run(placement: str, guard: bool = True, count_comm: bool = False) -> dict:
    rank = dist.get_rank()
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(GROUPS * A * M * 2, 6), torch.randn(GROUPS * A * M * 2, 1))
    if placement in (*SAME_SAMPLES, "whole_batch_same_samples"):  # seeded the same on both ranks: duplicates
        sampler = RandomSampler(data, generator=torch.Generator().manual_seed(0))
    else:
        sampler = DistributedSampler(data, shuffle=True, seed=0)
    world = dist.get_world_size()
    loader = DataLoader(data, batch_size=M * world if placement in SLICED else M, sampler=sampler)
    ddp = DistributedDataParallel(WholeBatch() if placement in WHOLE_BATCH else nn.Linear(6, 1))
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    options = dict(accumulation_steps=A, groups=2, count_comm=count_comm, effective_batch=M * A * world)
    noise = torch.Generator().manual_seed(1000 + rank)
    shared = DataLoader(data, batch_size=M)
    ctx = runtime_guard.probe(ddp, opt, **options) if guard else nullcontext()
    with ctx as p:
        for i, (x, y) in enumerate(loader):
            if i >= GROUPS * A:
                break
            last = (i + 1) % A == 0
            if placement in SHARED_NO_GRAD:
                with torch.no_grad():
                    ddp(next(iter(shared))[0])
            if placement in SLICED:
                x, y = x[rank::world], y[rank::world]
            if placement in RANK_NOISE:
                x = x + 0.01 * torch.randn(x.shape, generator=noise)
            if placement == "flag_nanogpt":
                ddp.require_backward_grad_sync = last
            both = ddp.no_sync() if placement == "no_sync_both" and not last else nullcontext()
            inside = placement == "all_inside" or placement in MANUAL_ALL_REDUCE
            with both, (ddp.no_sync() if inside else nullcontext()):
                out = ddp([x, y]) if placement in WHOLE_BATCH else ddp(x)
                if placement == "backward_only" and not last:
                    with ddp.no_sync():
                        (nn.functional.mse_loss(out, y) / A).backward()
                else:
                    (nn.functional.mse_loss(out, y) / A).backward()
            if last:
                if placement in MANUAL_ALL_REDUCE:
                    for param in ddp.parameters():
                        dist.all_reduce(param.grad)
                        param.grad /= world
                opt.step()
                opt.zero_grad()
    weights = torch.cat([t.detach().reshape(-1) for t in ddp.module.state_dict().values()])
    result = {"weights": weights.tolist(), "rank": rank}
    if guard:
        report = p.report()
        result.update(codes=sorted(report.codes), D=report.card["D"], effective_batch=report.card["effective_batch"],
                      checks=report.card["checks"],
                      rounds=report.card["all_reduce"]["rounds_per_group"], findings=[f.one_line()
                                                                                     for f in report.findings])
    return result


def main(prefix: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    try:
        out = {name: run(name) for name in PLACEMENTS}
        out["counted"] = run("no_sync_both", count_comm=True)
        out["plain"] = run("no_sync_both", guard=False)
        out["plain_again"] = run("no_sync_both", guard=False)
    finally:
        dist.destroy_process_group()
    with open(f"{prefix}.{dist.get_rank() if dist.is_initialized() else out['none']['rank']}.json", "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main(sys.argv[1])
