"""ACC106 bad: a microbatch mean loss multiplied by the world size under DDP.

`F.mse_loss` already averages over this replica's microbatch; DDP then averages the
replicas' gradients. The `* world_size` meant to "undo" DDP's mean makes the update
D times the global mean (the mirror of ACC405, where the factor is right because the
denominator is the all-reduced global count). Plain PyTorch DDP (gloo, one process),
runs on CPU.
"""
import os
import socket

import torch
import torch.distributed as dist
# before init_process_group: torch.optim's first use imports torch._dynamo, whose modules bind the
# default group into default arguments; imported later, they keep the group (and its gloo threads)
# alive past destroy_process_group, to be torn down at interpreter exit, where that may abort
import torch._dynamo  # noqa: F401
from torch import nn
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel

ACCUMULATION_STEPS = 4  # A: microbatches per optimizer update
MICROBATCH_SIZE = 8
UPDATES = 3


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main():
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        world_size = dist.get_world_size()
        model = DistributedDataParallel(nn.Linear(16, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        for update in range(UPDATES):
            logged = 0.0
            for _ in range(ACCUMULATION_STEPS):
                x = torch.randn(MICROBATCH_SIZE, 16)
                y = x.sum(dim=1, keepdim=True)
                loss = F.mse_loss(model(x), y) / ACCUMULATION_STEPS
                (loss * world_size).backward()  # expect: ACC106
                logged += loss.item()
            optimizer.step()
            optimizer.zero_grad()
            print(f"update {update}: loss {logged:.4f}")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
