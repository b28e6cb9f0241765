"""ACC406 bad: DDP's sync flag set on a module sharded with FSDP2 `fully_shard`.

FSDP2 never reads `require_backward_grad_sync`: every microbatch's backward reduce-scatters
its gradients, although the loop believes it syncs once per group. Runs on CPU as one process
(a gloo group of world size 1); it counts the reduce-scatter rounds per optimizer update.
"""
import os

import torch
import torch.distributed as dist
# before init_process_group: torch.optim's first use imports torch._dynamo, whose modules bind the
# default group into default arguments; imported later, they keep the group (and its gloo threads)
# alive past destroy_process_group, to be torn down at interpreter exit, where that may abort
import torch._dynamo  # noqa: F401
from torch import nn
from torch.distributed.fsdp import fully_shard
from torch.distributed.fsdp._fully_shard import _fsdp_param_group as param_group

ACCUMULATION_STEPS = 4  # A: microbatches per optimizer update
MICROBATCH_SIZE = 8
GROUPS_PER_EPOCH = 3


def main():
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    dist.init_process_group("gloo", rank=0, world_size=1)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 1))
    fully_shard(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    rounds = 0
    original = param_group.foreach_reduce  # FSDP2's gradient reduction, one call per reduce-scatter round

    def counting(*args, **kwargs):
        nonlocal rounds
        rounds += 1
        return original(*args, **kwargs)

    param_group.foreach_reduce = counting
    for i in range(GROUPS_PER_EPOCH * ACCUMULATION_STEPS):
        x = torch.randn(MICROBATCH_SIZE, 16)
        model.require_backward_grad_sync = (i + 1) % ACCUMULATION_STEPS == 0  # expect: ACC406
        loss = nn.functional.mse_loss(model(x), x.sum(dim=1, keepdim=True)) / ACCUMULATION_STEPS
        loss.backward()
        if (i + 1) % ACCUMULATION_STEPS == 0:
            optimizer.step()
            optimizer.zero_grad()
    param_group.foreach_reduce = original
    print(f"reduce-scatter rounds: {rounds} for {GROUPS_PER_EPOCH} updates (wanted one per update)")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
