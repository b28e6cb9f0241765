"""ACC407 bad: FSDP1 with CPU parameter offload, gradients accumulated outside `no_sync()`.

The wrapper is built in a helper; the loop backpropagates every microbatch with sync on. FSDP1
with `CPUOffload(offload_params=True)` does not add a synced backward's gradient to the one
already on the CPU (torch 2.13.0 `FullyShardedDataParallel`, "Limitations"), so the update
applies the group's last microbatch, not its sum.

FSDP1 parameter offload needs a CUDA device (`NEEDS_CUDA`): the catalogue's runners skip it on
a CPU-only machine; the linter reads it. With one, run it under torchrun (any number of GPUs). Each
group feeds one microbatch A times, so the right accumulated gradient is A times the gradient
after the group's first backward; the script prints both norms per optimizer update.
"""
import os

import torch

# before init_process_group: torch.optim's first use imports torch._dynamo, whose modules bind the
# default group into default arguments; imported later, they keep the group alive past
# destroy_process_group
import torch._dynamo  # noqa: F401
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import CPUOffload
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

NEEDS_CUDA = True  # FSDP1 parameter offload cannot run on CPU: the catalogue's runners skip it there
ACCUMULATION_STEPS = 4  # A: microbatches per optimizer update
MICROBATCH_SIZE = 8
GROUPS_PER_EPOCH = 3


def build_model(net):
    """The FSDP1 wrapper, parameters and their gradients offloaded to the CPU."""
    return FSDP(net, cpu_offload=CPUOffload(offload_params=True), device_id=torch.cuda.current_device())


def main():
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29531")
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    dist.init_process_group("nccl", rank=rank, world_size=world)
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    torch.manual_seed(0)
    model = build_model(nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    first = 0.0
    # each group repeats one microbatch A times: the right sum is A times the first backward's gradient
    groups = [torch.randn(MICROBATCH_SIZE, 16, device="cuda") for _ in range(GROUPS_PER_EPOCH)]
    loader = [x for x in groups for _ in range(ACCUMULATION_STEPS)]
    for i, x in enumerate(loader):
        loss = nn.functional.mse_loss(model(x), x.sum(dim=1, keepdim=True)) / ACCUMULATION_STEPS
        loss.backward()  # expect: ACC407
        norm = float(sum(p.grad.float().norm() ** 2 for p in model.parameters() if p.grad is not None) ** 0.5)
        if i % ACCUMULATION_STEPS == 0:
            first = norm
        if (i + 1) % ACCUMULATION_STEPS == 0:
            if rank == 0:
                print(f"update {(i + 1) // ACCUMULATION_STEPS}: accumulated grad norm {norm:.4f}, "
                      f"wanted {ACCUMULATION_STEPS * first:.4f} (A x the first backward's)")
            optimizer.step()
            optimizer.zero_grad()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
