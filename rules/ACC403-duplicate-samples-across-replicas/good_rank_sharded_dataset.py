"""ACC403 good: the dataset is sharded by rank before the DataLoader is built.

`Subset(dataset, range(rank, n, world_size))` gives each replica every D-th example, so
the replicas read disjoint examples without a DistributedSampler (shuffling inside the
shard stays per rank). Plain PyTorch DDP (gloo, one process), runs on CPU.
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
from torch.utils.data import DataLoader, Subset, TensorDataset

ACCUMULATION_STEPS = 4  # A: microbatches per optimizer update
MICROBATCH_SIZE = 8
GROUPS_PER_EPOCH = 3


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
        rank, world_size = dist.get_rank(), dist.get_world_size()
        inputs = torch.randn(GROUPS_PER_EPOCH * ACCUMULATION_STEPS * MICROBATCH_SIZE * world_size, 16)
        dataset = TensorDataset(inputs, inputs.sum(dim=1, keepdim=True))
        shard = Subset(dataset, range(rank, len(dataset), world_size))
        loader = DataLoader(shard, batch_size=MICROBATCH_SIZE, shuffle=True)
        assert len(loader) % ACCUMULATION_STEPS == 0  # no partial final group
        model = DistributedDataParallel(nn.Linear(16, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        loss_fn = nn.MSELoss()

        for i, (x, y) in enumerate(loader):
            loss = loss_fn(model(x), y) / ACCUMULATION_STEPS
            loss.backward()
            if (i + 1) % ACCUMULATION_STEPS == 0:
                optimizer.step()
                optimizer.zero_grad()
        print("done")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
