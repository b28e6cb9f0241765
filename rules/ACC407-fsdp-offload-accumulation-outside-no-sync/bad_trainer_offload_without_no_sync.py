"""ACC407 bad: a trainer class wraps its model in FSDP1 with CPU parameter offload and
accumulates A microbatches with sync on.

Every backward of the group reduces and offloads its own gradient, and FSDP1 puts it in place of
the CPU gradient instead of adding it (torch 2.13.0 `FullyShardedDataParallel`, "Limitations"):
each optimizer update applies the group's last microbatch. FSDP1 parameter offload needs a CUDA
device (`NEEDS_CUDA`): the catalogue's runners skip it on a CPU-only machine; the linter reads it.
"""
import os

import torch

# before init_process_group: torch.optim's first use imports torch._dynamo, whose modules bind the
# default group into default arguments; imported later, they keep the group alive past
# destroy_process_group
import torch._dynamo  # noqa: F401
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import CPUOffload, FullyShardedDataParallel

NEEDS_CUDA = True  # FSDP1 parameter offload cannot run on CPU: the catalogue's runners skip it there
ACCUMULATION_STEPS = 4  # A: microbatches per optimizer update
MICROBATCH_SIZE = 8
GROUPS_PER_EPOCH = 3


class Trainer:
    def __init__(self, net):
        offload = CPUOffload(offload_params=True)
        self.model = FullyShardedDataParallel(net, cpu_offload=offload, device_id=torch.cuda.current_device())
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.05)

    def train_step(self, i, x):
        loss = nn.functional.mse_loss(self.model(x), x.sum(dim=1, keepdim=True)) / ACCUMULATION_STEPS
        loss.backward()  # expect: ACC407
        if (i + 1) % ACCUMULATION_STEPS == 0:
            self.optimizer.step()
            self.optimizer.zero_grad()

    def fit(self, batches):
        for i, x in enumerate(batches):
            self.train_step(i, x)


def main():
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    dist.init_process_group("nccl", rank=rank, world_size=world)
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    torch.manual_seed(0)
    trainer = Trainer(nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 1)))
    trainer.fit([torch.randn(MICROBATCH_SIZE, 16, device="cuda")
                 for _ in range(GROUPS_PER_EPOCH * ACCUMULATION_STEPS)])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
