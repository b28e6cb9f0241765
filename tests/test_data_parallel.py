"""Data parallelism and counting (ACC403, ACC404, ACC405) and the BatchNorm fact (ACC901):
the bug in the shapes real code takes, the correct shapes next to them, and the shapes the
model cannot decide (silence documented)."""

from __future__ import annotations

import pytest

from tests.test_model import lint, model_of

CODES = {"ACC403", "ACC404", "ACC405", "ACC901"}


def ours(source: str) -> list[tuple[str, int]]:
    """The findings of this file's rules alone (ACC901 is off by default: selected here)."""
    return lint(source, ",".join(sorted(CODES)))


_DDP_HEADER = """
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, RandomSampler, TensorDataset
"""

BAD = {
    "ACC403 DDP, shuffled loader without sampler": (_DDP_HEADER + """
def train(dataset, model, optimizer, A):
    dist.init_process_group("gloo")
    model = DDP(model)
    loader = DataLoader(dataset, batch_size=8, shuffle=True)
    for i, (x, y) in enumerate(loader):
        (model(x).sum() / A).backward()
        if (i + 1) % A == 0:
            optimizer.step()
            optimizer.zero_grad()
""", [("ACC403", 10)]),
    "ACC403 module-level script, TensorDataset, no shuffle, tqdm wrapper": (_DDP_HEADER + """
from tqdm import tqdm
dist.init_process_group("nccl")
dataset = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
train_loader = DataLoader(dataset, batch_size=8)
for step, (x, y) in enumerate(tqdm(train_loader)):
    (model(x).sum() / A).backward()
    if (step + 1) % A == 0:
        optimizer.step()
        optimizer.zero_grad()
""", [("ACC403", 10)]),
    "ACC403 explicit RandomSampler (provably not distributed)": (_DDP_HEADER + """
model = DDP(net)
loader = DataLoader(data, batch_size=8, sampler=RandomSampler(data))
for i, b in enumerate(loader):
    (model(b).sum() / A).backward()
    if (i + 1) % A == 0:
        optimizer.step()
        optimizer.zero_grad()
""", [("ACC403", 8)]),
    "ACC403 micro-loop fed by next(iter(loader))": (_DDP_HEADER + """
model = DDP(net)
loader = DataLoader(data, batch_size=8, shuffle=True)
it = iter(loader)
for update in range(steps):
    for micro in range(A):
        x = next(it)
        (model(x).sum() / A).backward()
    optimizer.step()
    optimizer.zero_grad()
""", [("ACC403", 8)]),
    "ACC404 A divided by the GPU count (nanoGPT issue shape)": ("""
import torch
from torch.distributed import init_process_group
gradient_accumulation_steps = 40
init_process_group(backend="nccl")
gradient_accumulation_steps //= torch.cuda.device_count()
""", [("ACC404", 6)]),
    "ACC404 global batch from a name bound to the GPU count": ("""
import torch
import torch.distributed as dist
dist.init_process_group("nccl")
n_gpu = torch.cuda.device_count()
total_batch_size = args.batch_size * args.gradient_accumulation_steps * n_gpu
""", [("ACC404", 6)]),
    "ACC404 A derived from a target batch and LOCAL_WORLD_SIZE": ("""
import os
import torch.distributed as dist
dist.init_process_group("nccl")
local_world_size = int(os.environ["LOCAL_WORLD_SIZE"])
accumulation_steps = global_batch // (micro_batch * local_world_size)
""", [("ACC404", 6)]),
    "ACC404 whole world size with tensor parallelism configured": ("""
import torch.distributed as dist
tensor_parallel_size = 2
dist.init_process_group("nccl")
world_size = dist.get_world_size()
grad_accum_steps = global_batch_size // (micro_batch_size * world_size)
""", [("ACC404", 6)]),
    "ACC405 loss divided by an all-reduced token count under DDP": (_DDP_HEADER + """
model = DDP(net)
for i, (x, labels) in enumerate(loader):
    num_tokens = (labels != -100).sum()
    dist.all_reduce(num_tokens)
    loss = loss_fn(model(x), labels, reduction="sum") / num_tokens
    loss.backward()
    if (i + 1) % A == 0:
        optimizer.step()
        optimizer.zero_grad()
""", [("ACC405", 11)]),
    "ACC405 loss divided by the world size under DDP": (_DDP_HEADER + """
model = DDP(net)
world_size = dist.get_world_size()
for i, (x, y) in enumerate(loader):
    loss = loss_fn(model(x), y) / world_size / A
    loss.backward()
    if (i + 1) % A == 0:
        optimizer.step()
        optimizer.zero_grad()
""", [("ACC405", 10)]),
    "ACC405 Accelerate: loss over a gathered token count without num_processes": ("""
from accelerate import Accelerator
accelerator = Accelerator()
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for i, batch in enumerate(loader):
    tokens = accelerator.gather(batch["mask"].sum()).sum()
    loss = model(**batch).loss_sum / tokens
    accelerator.backward(loss)
    if (i + 1) % A == 0:
        optimizer.step()
        optimizer.zero_grad()
""", [("ACC405", 7)]),
}

GOOD = {
    "ACC403 fixed twin: DistributedSampler": (_DDP_HEADER + """
model = DDP(net)
sampler = DistributedSampler(data)
loader = DataLoader(data, batch_size=8, sampler=sampler)
for i, b in enumerate(loader):
    (model(b).sum() / A).backward()
    if (i + 1) % A == 0:
        optimizer.step()
        optimizer.zero_grad()
"""),
    "ACC403 sampler held in a variable we cannot see through": (_DDP_HEADER + """
model = DDP(net)
loader = DataLoader(data, batch_size=8, sampler=make_sampler(data))
for i, b in enumerate(loader):
    (model(b).sum() / A).backward()
    if (i + 1) % A == 0:
        optimizer.step()
        optimizer.zero_grad()
"""),
    "ACC403 sampler chosen by a condition": (_DDP_HEADER + """
model = DDP(net)
sampler = DistributedSampler(data) if distributed else None
loader = DataLoader(data, batch_size=8, shuffle=(sampler is None), sampler=sampler)
for i, b in enumerate(loader):
    (model(b).sum() / A).backward()
    if (i + 1) % A == 0:
        optimizer.step()
        optimizer.zero_grad()
"""),
    "ACC403 dataset strided by rank": (_DDP_HEADER + """
model = DDP(net)
rank, world = dist.get_rank(), dist.get_world_size()
shard = data[rank::world]
loader = DataLoader(shard, batch_size=8, shuffle=True)
for i, b in enumerate(loader):
    (model(b).sum() / A).backward()
    if (i + 1) % A == 0:
        optimizer.step()
        optimizer.zero_grad()
"""),
    "ACC403 HF dataset split by node": (_DDP_HEADER + """
from datasets.distributed import split_dataset_by_node
model = DDP(net)
data = split_dataset_by_node(data, rank=rank, world_size=world)
loader = DataLoader(data, batch_size=8)
for i, b in enumerate(loader):
    (model(b).sum() / A).backward()
    if (i + 1) % A == 0:
        optimizer.step()
        optimizer.zero_grad()
"""),
    "ACC403 dataset class of this module built per rank": (_DDP_HEADER + """
model = DDP(net)
data = ShardedTokens(path, rank=rank)
loader = DataLoader(data, batch_size=8, shuffle=True)
for i, b in enumerate(loader):
    (model(b).sum() / A).backward()
    if (i + 1) % A == 0:
        optimizer.step()
        optimizer.zero_grad()
"""),
    "ACC403 dataset of unknown kind, not shuffled (may be an iterable dataset that shards itself)": (
        _DDP_HEADER + """
model = DDP(net)
loader = DataLoader(build_stream(cfg), batch_size=8)
for i, b in enumerate(loader):
    (model(b).sum() / A).backward()
    if (i + 1) % A == 0:
        optimizer.step()
        optimizer.zero_grad()
"""),
    "ACC403 loader passed through accelerator.prepare": (_DDP_HEADER + """
from accelerate import Accelerator
accelerator = Accelerator(gradient_accumulation_steps=4)
dist.init_process_group("nccl")
loader = DataLoader(data, batch_size=8, shuffle=True)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for b in loader:
    with accelerator.accumulate(model):
        accelerator.backward(model(b).sum())
        optimizer.step()
        optimizer.zero_grad()
"""),
    "ACC403 loader passed through fabric.setup_dataloaders": (_DDP_HEADER + """
from lightning.fabric import Fabric
fabric = Fabric(strategy="ddp")
dist.init_process_group("nccl")
loader = fabric.setup_dataloaders(DataLoader(data, batch_size=8, shuffle=True))
for i, b in enumerate(loader):
    fabric.backward(model(b).sum() / A)
    if (i + 1) % A == 0:
        optimizer.step()
        optimizer.zero_grad()
"""),
    "ACC403 DeepSpeed builds the loader from training_data": ("""
import deepspeed
import torch.distributed as dist
dist.init_process_group("nccl")
engine, optimizer, loader, _ = deepspeed.initialize(model=net, training_data=data, config=cfg)
for b in loader:
    engine.backward(engine(b).sum())
    engine.step()
"""),
    "ACC403 no DDP, no process group: one replica": ("""
from torch.utils.data import DataLoader
loader = DataLoader(data, batch_size=8, shuffle=True)
for i, b in enumerate(loader):
    (model(b).sum() / A).backward()
    if (i + 1) % A == 0:
        optimizer.step()
        optimizer.zero_grad()
"""),
    "ACC403 the sampler-less loader is the evaluation loader": (_DDP_HEADER + """
model = DDP(net)
train_loader = DataLoader(data, batch_size=8, sampler=DistributedSampler(data))
eval_loader = DataLoader(val, batch_size=8, shuffle=True)
for i, b in enumerate(train_loader):
    (model(b).sum() / A).backward()
    if (i + 1) % A == 0:
        optimizer.step()
        optimizer.zero_grad()
with torch.no_grad():
    for b in eval_loader:
        model(b)
"""),
    "ACC404 A divided by the data-parallel world size (the fix upstream)": ("""
import os
import torch
from torch.distributed import init_process_group
init_process_group(backend="nccl")
ddp_world_size = int(os.environ["WORLD_SIZE"])
gradient_accumulation_steps //= ddp_world_size
device = f"cuda:{int(os.environ['LOCAL_RANK']) % torch.cuda.device_count()}"
"""),
    "ACC404 one process per GPU spawned from the GPU count (ImageNet example)": ("""
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
ngpus_per_node = torch.cuda.device_count()
world_size = ngpus_per_node * args.nodes
def worker(gpu):
    dist.init_process_group("nccl", world_size=world_size, rank=gpu)
    total_batch_size = args.batch_size * ngpus_per_node * args.nodes
mp.spawn(worker, nprocs=ngpus_per_node)
"""),
    "ACC404 nn.DataParallel: the GPU count is the replica count": ("""
import torch
import torch.distributed as dist
n_gpu = torch.cuda.device_count()
if args.local_rank == -1:
    model = torch.nn.DataParallel(model)
else:
    dist.init_process_group("nccl")
total_batch_size = args.per_gpu_batch_size * max(1, n_gpu) * args.gradient_accumulation_steps
"""),
    "ACC404 GPU count times node count is the world size": ("""
import torch
import torch.distributed as dist
dist.init_process_group("nccl")
global_batch = micro * accumulation_steps * torch.cuda.device_count() * num_nodes
"""),
    "ACC404 single process, no DDP: GPU count used for something else": ("""
import torch
total_batch_size = args.batch_size * args.gradient_accumulation_steps * torch.cuda.device_count()
"""),
    "ACC404 world size divided by the tensor-parallel size": ("""
import torch.distributed as dist
tensor_parallel_size = 2
dist.init_process_group("nccl")
dp_size = dist.get_world_size() // tensor_parallel_size
grad_accum_steps = global_batch_size // (micro_batch_size * dp_size)
"""),
    "ACC404 world size, tensor parallel size unknown (silence documented)": ("""
import torch.distributed as dist
dist.init_process_group("nccl")
tp_size = args.tp_size
grad_accum_steps = global_batch_size // (micro_batch_size * dist.get_world_size())
"""),
    "ACC405 global count with the world-size compensation (framework-contracts reference)": (_DDP_HEADER + """
model = DDP(net)
world_size = dist.get_world_size()
for i, (x, labels) in enumerate(loader):
    tokens = (labels != -100).sum()
    dist.all_reduce(tokens)
    loss = loss_fn(model(x), labels, reduction="sum") * world_size / tokens
    loss.backward()
    if (i + 1) % A == 0:
        optimizer.step()
        optimizer.zero_grad()
"""),
    "ACC405 torchtune shape: summed loss, gradients scaled by world_size / tokens": (_DDP_HEADER + """
from torch.distributed.fsdp import fully_shard
fully_shard(model)
num_tokens = 0
for idx, batch in enumerate(loader):
    tokens = (batch["labels"] != -100).sum()
    num_tokens += tokens
    loss = loss_fn(model(batch["x"]), batch["labels"]) * tokens
    loss.backward()
    if (idx + 1) % A == 0:
        dist.all_reduce(num_tokens)
        scale_grads(model, world_size / num_tokens)
        optimizer.step()
        optimizer.zero_grad()
        num_tokens = 0
"""),
    "ACC405 token count averaged over ranks (AVG all-reduce)": (_DDP_HEADER + """
model = DDP(net)
for i, (x, labels) in enumerate(loader):
    tokens = (labels != -100).sum()
    dist.all_reduce(tokens, op=dist.ReduceOp.AVG)
    loss = loss_fn(model(x), labels, reduction="sum") / tokens
    loss.backward()
    if (i + 1) % A == 0:
        optimizer.step()
        optimizer.zero_grad()
"""),
    "ACC405 divisor counts tokens per replica (trl shape)": (_DDP_HEADER + """
model = DDP(net)
for i, (x, labels) in enumerate(loader):
    tokens = (labels != -100).sum()
    dist.all_reduce(tokens)
    loss = loss_fn(model(x), labels, reduction="sum") / (tokens / dist.get_world_size())
    loss.backward()
    if (i + 1) % A == 0:
        optimizer.step()
        optimizer.zero_grad()
"""),
    "ACC405 gradients reduced by hand, no DDP averaging": ("""
import torch.distributed as dist
for i, (x, y) in enumerate(loader):
    loss = loss_fn(model(x), y) / dist.get_world_size()
    loss.backward()
    if (i + 1) % A == 0:
        for p in model.parameters():
            dist.all_reduce(p.grad)
        optimizer.step()
        optimizer.zero_grad()
"""),
    "ACC405 DDP with a comm hook (reduction not known)": (_DDP_HEADER + """
model = DDP(net)
model.register_comm_hook(None, sum_hook)
for i, (x, y) in enumerate(loader):
    loss = loss_fn(model(x), y) / dist.get_world_size()
    loss.backward()
    if (i + 1) % A == 0:
        optimizer.step()
        optimizer.zero_grad()
"""),
    "ACC405 world size divides only the logged loss": (_DDP_HEADER + """
model = DDP(net)
for i, (x, y) in enumerate(loader):
    loss = loss_fn(model(x), y) / A
    loss.backward()
    logged = loss.detach()
    dist.all_reduce(logged)
    print(logged / dist.get_world_size())
    if (i + 1) % A == 0:
        optimizer.step()
        optimizer.zero_grad()
"""),
    "ACC405 no wrapper built here (torchtitan shape: the reduction is configured elsewhere)": ("""
import torch.distributed as dist
for i, (x, labels) in enumerate(loader):
    tokens = (labels != -100).sum()
    dist.all_reduce(tokens)
    loss = loss_fn(model(x), labels, reduction="sum") / tokens
    loss.backward()
    if (i + 1) % A == 0:
        optimizer.step()
        optimizer.zero_grad()
"""),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_variant(name: str) -> None:
    source, expected = BAD[name]
    assert ours(source) == expected


@pytest.mark.parametrize("name", sorted(GOOD))
def test_good_variant(name: str) -> None:
    assert ours(GOOD[name]) == []


_BATCHNORM = """
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.bn = nn.BatchNorm2d(8)
        self.head = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8))

model = Net()
for i, (x, y) in enumerate(loader):
    (loss_fn(model(x), y) / A).backward()
    if (i + 1) % A == 0:
        optimizer.step()
        optimizer.zero_grad()
"""


def test_batchnorm_in_an_accumulating_module_is_recorded_once_per_layer() -> None:
    assert ours(_BATCHNORM) == [("ACC901", 9), ("ACC901", 10)]


def test_batchnorm_without_accumulation_is_not_recorded() -> None:
    ungated = _BATCHNORM.replace("    if (i + 1) % A == 0:\n        optimizer.step()", "    optimizer.step()")
    ungated = ungated.replace("        optimizer.zero_grad()", "    optimizer.zero_grad()")
    assert ours(ungated) == []
    assert ours(_BATCHNORM.replace("nn.BatchNorm2d(8)", "nn.GroupNorm(2, 8)")) == [("ACC901", 10)]


def test_the_loader_a_loop_reads() -> None:
    """The model links a loop to its loader through enumerate/tqdm wrappers, enclosing loops and
    next(iter(...)); a loader received as a parameter has no constructor to read."""
    model = model_of(BAD["ACC403 micro-loop fed by next(iter(loader))"][0])
    (group,) = model.loops
    use = model.parallel.loader_of(group)
    assert use is not None and use.built_here is not None
    assert model.parallel.replicated and model.parallel.wrapper_calls
    src = """
    def train(model, loader, optimizer):
        for i, b in enumerate(loader):
            (model(b).sum() / A).backward()
            if (i + 1) % A == 0:
                optimizer.step()
    """
    model = model_of(src)
    (group,) = model.loops
    use = model.parallel.loader_of(group)
    assert use is not None and use.built_here is None
