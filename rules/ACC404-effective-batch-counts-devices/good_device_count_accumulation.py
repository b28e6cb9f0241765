"""ACC404 good: twin of bad_device_count_accumulation.py.

A is derived from the data-parallel world size D (the processes in the group), so the
update always holds the target global batch m x A x D, whatever the number of GPUs per
node or of nodes. The GPU count is still used, but only to place this process. Plain
PyTorch DDP (gloo, one process), runs on CPU.
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

TARGET_GLOBAL_BATCH = 32  # examples per optimizer update, all replicas together
MICROBATCH_SIZE = 8


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main():
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        if torch.cuda.is_available():
            torch.cuda.set_device(dist.get_rank() % torch.cuda.device_count())
        world_size = dist.get_world_size()
        assert TARGET_GLOBAL_BATCH % (MICROBATCH_SIZE * world_size) == 0
        accumulation_steps = TARGET_GLOBAL_BATCH // (MICROBATCH_SIZE * world_size)
        torch.manual_seed(0)
        inputs = torch.randn(3 * TARGET_GLOBAL_BATCH, 16)
        dataset = TensorDataset(inputs, inputs.sum(dim=1, keepdim=True))
        sampler = DistributedSampler(dataset)
        loader = DataLoader(dataset, batch_size=MICROBATCH_SIZE, sampler=sampler)
        assert len(loader) % accumulation_steps == 0  # no partial final group
        model = DistributedDataParallel(nn.Linear(16, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        loss_fn = nn.MSELoss()

        for i, (x, y) in enumerate(loader):
            loss = loss_fn(model(x), y) / accumulation_steps
            loss.backward()
            if (i + 1) % accumulation_steps == 0:
                optimizer.step()
                optimizer.zero_grad()
        print(f"A = {accumulation_steps}")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
