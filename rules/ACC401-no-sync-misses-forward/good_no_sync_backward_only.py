"""ACC401 good: twin of bad_no_sync_backward_only.py.

The no_sync() context covers forward and backward of microbatches 1..A-1; the group's
last microbatch runs outside it and triggers the single all-reduce. Plain PyTorch DDP
(gloo, one process), runs on CPU.
"""
import os
import socket
from contextlib import nullcontext

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
EPOCHS = 2


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def make_dataset():
    inputs = torch.randn(GROUPS_PER_EPOCH * ACCUMULATION_STEPS * MICROBATCH_SIZE, 16)
    targets = inputs.sum(dim=1, keepdim=True)
    return TensorDataset(inputs, targets)


def main():
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        dataset = make_dataset()
        sampler = DistributedSampler(dataset, shuffle=True, seed=0)
        loader = DataLoader(dataset, batch_size=MICROBATCH_SIZE, sampler=sampler)
        assert len(loader) % ACCUMULATION_STEPS == 0  # no partial final group
        model = DistributedDataParallel(nn.Linear(16, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        loss_fn = nn.MSELoss()

        for epoch in range(EPOCHS):
            sampler.set_epoch(epoch)
            epoch_loss = 0.0
            for i, (x, y) in enumerate(loader):
                is_last = (i + 1) % ACCUMULATION_STEPS == 0
                ctx = nullcontext() if is_last else model.no_sync()
                with ctx:
                    loss = loss_fn(model(x), y) / ACCUMULATION_STEPS
                    loss.backward()
                epoch_loss += loss.item()
                if is_last:
                    optimizer.step()
                    optimizer.zero_grad()
            print(f"epoch {epoch}: mean group loss {epoch_loss / GROUPS_PER_EPOCH:.4f}")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
