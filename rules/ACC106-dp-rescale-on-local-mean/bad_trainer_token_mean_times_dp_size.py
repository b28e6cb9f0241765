"""ACC106 bad: a trainer class rescales a local token mean by the data-parallel size.

The language-model loss is `cross_entropy(ignore_index=-100)`: a mean over the supervised
tokens of this replica's microbatch. The trainer multiplies it by `dp_size` before the
backward, as if the denominator were the token count of all replicas; DDP averages the
replicas, so the update is D times the token mean. Plain PyTorch DDP (gloo, one
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
    """Token ids and labels with the padding positions set to -100 (not supervised); every
    microbatch supervises as many tokens, so its token mean weighs tokens as the group's does
    (the factor D is this loop's only error)."""
    ids = torch.randint(0, VOCABULARY, (MICROBATCH_SIZE, SEQUENCE_LENGTH), generator=generator)
    lengths = torch.full((MICROBATCH_SIZE, 1), SEQUENCE_LENGTH - 2)
    labels = ids.masked_fill(torch.arange(SEQUENCE_LENGTH) >= lengths, -100)
    return ids, labels


class Trainer:
    def __init__(self, model, lr):
        self.dp_size = dist.get_world_size()
        self.model = DistributedDataParallel(model)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=lr)

    def microbatch_loss(self, ids, labels):
        logits = self.model(ids)
        return F.cross_entropy(logits.view(-1, VOCABULARY), labels.view(-1), ignore_index=-100)

    def train_group(self, group):
        logged = 0.0
        for ids, labels in group:
            loss = self.microbatch_loss(ids, labels) / ACCUMULATION_STEPS
            loss = loss * self.dp_size  # expect: ACC106
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
