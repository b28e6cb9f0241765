"""ACC106 good: a trainer class multiplies by the data-parallel size a token *sum* over the
group's token count all-reduced over the replicas.

`cross_entropy(reduction="sum")` sums this replica's supervised tokens; the denominator is
the group's supervised tokens on all D replicas (`dist.all_reduce`), and `* dp_size` undoes
DDP's average: the update is the token mean over the effective batch. Plain PyTorch DDP (gloo, one
process), runs on CPU.
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
MICROBATCH_SIZE = 4  # sequences per microbatch
SEQUENCE_LENGTH = 10
VOCABULARY = 11
UPDATES = 3


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def microbatch(generator):
    """Token ids and labels with the padding positions set to -100 (not supervised)."""
    ids = torch.randint(0, VOCABULARY, (MICROBATCH_SIZE, SEQUENCE_LENGTH), generator=generator)
    lengths = torch.randint(2, SEQUENCE_LENGTH + 1, (MICROBATCH_SIZE, 1), generator=generator)
    labels = ids.masked_fill(torch.arange(SEQUENCE_LENGTH) >= lengths, -100)
    return ids, labels


class Trainer:
    def __init__(self, model, lr):
        self.dp_size = dist.get_world_size()
        self.model = DistributedDataParallel(model)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=lr)

    def microbatch_loss(self, ids, labels):
        logits = self.model(ids)
        return F.cross_entropy(logits.view(-1, VOCABULARY), labels.view(-1), ignore_index=-100, reduction="sum")

    def train_group(self, group):
        logged = 0.0
        tokens = torch.stack([(labels != -100).sum() for _, labels in group]).sum()
        dist.all_reduce(tokens)  # supervised tokens of the group on all replicas
        for ids, labels in group:
            loss = self.microbatch_loss(ids, labels) * self.dp_size / tokens
            loss.backward()
            logged += loss.item()
        self.optimizer.step()
        self.optimizer.zero_grad()
        return logged


def main():
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        generator = torch.Generator().manual_seed(dist.get_rank())
        trainer = Trainer(nn.Sequential(nn.Embedding(VOCABULARY, 8), nn.Linear(8, VOCABULARY)), lr=0.1)
        for update in range(UPDATES):
            logged = trainer.train_group([microbatch(generator) for _ in range(ACCUMULATION_STEPS)])
            print(f"update {update}: loss {logged:.4f}")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
