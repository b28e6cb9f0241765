"""ACC404 bad: A derived from a target global batch with the GPU count as D.

`torch.cuda.device_count()` counts the GPUs visible on this node, not the data-parallel
processes: with 2 ranks on an 8-GPU node the target batch of 256 becomes 8 x 4 x 2 = 64
examples per update (1/4 of the intent); on two 8-GPU nodes it becomes 512. Plain
PyTorch DDP (gloo, one process), runs on CPU (no GPU: the count is floored at 1).
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
        gpus = max(1, torch.cuda.device_count())
        accumulation_steps = TARGET_GLOBAL_BATCH // (MICROBATCH_SIZE * gpus)  # expect: ACC404
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
