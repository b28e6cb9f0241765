"""ACC405 good: twin of bad_global_token_count.py.

The summed token loss is multiplied by the world size D before it is divided by the
token count of all replicas: DDP's average over the D replicas then yields exactly the
token-weighted mean of the whole group on every replica (measured with 2 gloo ranks:
1.00 x the reference). This is the shape of shared/docs/framework-contracts.md, the HF
Trainer and torchtune. Plain PyTorch DDP (gloo, one process), runs on CPU.
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
from torch.nn.parallel import DistributedDataParallel

ACCUMULATION_STEPS = 4  # A: microbatches per optimizer update
MICROBATCH_SIZE = 8  # sequences per microbatch
SEQUENCE_LENGTH = 12
UPDATES = 3


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def microbatch(generator):
    """Padded sequences: inputs, targets, and a mask of the supervised (non-padding) tokens."""
    x = torch.randn(MICROBATCH_SIZE, SEQUENCE_LENGTH, 4, generator=generator)
    lengths = torch.randint(1, SEQUENCE_LENGTH + 1, (MICROBATCH_SIZE, 1), generator=generator)
    mask = (torch.arange(SEQUENCE_LENGTH) < lengths).float()
    return x, x.sum(dim=-1), mask


def main():
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        generator = torch.Generator().manual_seed(dist.get_rank())
        world_size = dist.get_world_size()
        model = DistributedDataParallel(nn.Linear(4, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)

        for update in range(UPDATES):
            group = [microbatch(generator) for _ in range(ACCUMULATION_STEPS)]
            tokens = torch.stack([mask.sum() for _, _, mask in group]).sum()
            dist.all_reduce(tokens)  # supervised tokens of the group on all replicas
            logged = 0.0
            for x, y, mask in group:
                loss_sum = (((model(x).squeeze(-1) - y) ** 2) * mask).sum()
                loss = loss_sum * world_size / tokens  # undo DDP's average over the replicas
                loss.backward()
                logged += loss.item() / world_size
            optimizer.step()
            optimizer.zero_grad()
            print(f"update {update}: token-mean loss {logged:.4f}")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
