"""ACC405 bad: the loss is divided by the world size on top of DDP's own averaging.

DDP's all-reduce already divides the summed gradients by D; dividing each replica's loss
by D as well makes the update gradient 1/D of the mean (measured with 2 gloo ranks:
0.49 x the token-weighted reference, 0.5 x the per-replica mean). Plain PyTorch DDP
(gloo, one process), runs on CPU.
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
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

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
        inputs = torch.randn(GROUPS_PER_EPOCH * ACCUMULATION_STEPS * MICROBATCH_SIZE, 16)
        dataset = TensorDataset(inputs, inputs.sum(dim=1, keepdim=True))
        loader = DataLoader(dataset, batch_size=MICROBATCH_SIZE, sampler=DistributedSampler(dataset))
        assert len(loader) % ACCUMULATION_STEPS == 0  # no partial final group
        world_size = dist.get_world_size()
        model = DistributedDataParallel(nn.Linear(16, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        loss_fn = nn.MSELoss()

        for i, (x, y) in enumerate(loader):
            loss = loss_fn(model(x), y) / world_size / ACCUMULATION_STEPS  # expect: ACC405
            loss.backward()
            if (i + 1) % ACCUMULATION_STEPS == 0:
                optimizer.step()
                optimizer.zero_grad()
        print("done")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
