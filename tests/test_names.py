"""Names (issue 14, family 5): A is whatever the code uses as A, not only what is named like
it. Written for these tests."""

from __future__ import annotations

from tests.test_model import lint, model_of


def test_a_gate_divisor_is_a_whatever_its_name() -> None:
    assert lint("""
    import torch.nn.functional as F
    K = 4
    def train(model, loader, opt):
        for step, (ids, labels) in enumerate(loader):
            loss = F.cross_entropy(model(ids).flatten(0, 1), labels.flatten(), ignore_index=-100)
            (loss / K).backward()
            if (step + 1) % K == 0:
                opt.step()
                opt.zero_grad()
    """) == [("ACC102", 7)]


def test_a_value_passed_as_accumulate_grad_batches_is_a() -> None:
    assert lint("""
    import lightning as L
    import torch.nn.functional as F
    N_MICRO = 8
    class Lit(L.LightningModule):
        def training_step(self, batch, batch_idx):
            x, y = batch
            return F.cross_entropy(self(x), y) / N_MICRO
    trainer = L.Trainer(accumulate_grad_batches=N_MICRO)
    """) == [("ACC101", 8)]


def test_aliases_come_from_the_gate_and_the_configuring_keywords() -> None:
    model = model_of("""
    from accelerate import Accelerator
    acc = Accelerator(gradient_accumulation_steps=cfg.k)
    for i, b in enumerate(loader):
        (model(b) / M).backward()
        if (i + 1) % M == 0:
            opt.step()
            opt.zero_grad()
    """)
    assert model.accumulation_aliases == {"M", "cfg.k"}


def test_a_divisor_that_plays_no_a_role_is_not_a() -> None:
    """`T` divides the loss (a temperature) but neither gates nor configures anything."""
    assert lint("""
    import torch.nn.functional as F
    def train(model, loader, opt, T):
        for step, (ids, labels) in enumerate(loader):
            loss = F.cross_entropy(model(ids).flatten(0, 1), labels.flatten(), ignore_index=-100)
            (loss / T / 4).backward()
            if (step + 1) % 4 == 0:
                opt.step()
                opt.zero_grad()
    """) == []


def test_world_size_beside_a_tensor_parallel_default_is_no_replica_count() -> None:
    """The parameter's default says tensor parallelism is on: the world is not D."""
    assert lint("""
    import torch.distributed as dist
    def plan(micro_bs, grad_accum, tensor_parallel_size=2):
        world = dist.get_world_size()
        global_batch = micro_bs * grad_accum * world
        return global_batch
    """) == [("ACC404", 5)]


def test_world_divided_by_the_model_parallel_sizes_marks_them_configured() -> None:
    assert lint("""
    import os
    def plan(cfg):
        world = int(os.getenv("WORLD_SIZE", "1"))
        dp = world // (cfg.tensor_parallel * cfg.pipeline_parallel)
        cfg.global_batch_size = cfg.micro_batch * cfg.grad_accum * world
        return dp
    """) == [("ACC404", 6)]


def test_world_size_without_model_parallelism_is_the_replica_count() -> None:
    assert lint("""
    import torch.distributed as dist
    def plan(micro_bs, grad_accum, tensor_parallel_size=1):
        global_batch = micro_bs * grad_accum * dist.get_world_size()
        return global_batch
    """) == []


def test_an_effective_batch_by_shape_whatever_its_name() -> None:
    """`micro * A * gpus` is an effective batch even when it is called `n`."""
    assert lint("""
    import torch
    import torch.distributed as dist
    def setup(micro, accum_steps):
        dist.init_process_group("nccl")
        n = micro * accum_steps * torch.cuda.device_count()
        return n
    """) == [("ACC404", 6)]


def test_a_product_without_a_is_not_read_as_an_effective_batch() -> None:
    assert lint("""
    import torch
    import torch.distributed as dist
    def setup(micro, seq_len):
        dist.init_process_group("nccl")
        n = micro * seq_len * torch.cuda.device_count()
        return n
    """) == []
