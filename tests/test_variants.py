"""Further members of the case families (written for these tests): the same bug in the
other shapes real code takes, and the correct shapes next to them."""

from __future__ import annotations

import pytest

from tests.test_model import lint

BAD = {
    "zero_grad via p.grad = None in a while loop with a counter": ("""
    step = 0
    while step < total:
        for p in model.parameters():
            p.grad = None
        loss = model(next(it)) / A
        loss.backward()
        step += 1
        if step % A == 0:
            optimizer.step()
    """, [("ACC001", 5)]),
    "module zero_grad inside accumulate after the step": ("""
    from accelerate import Accelerator
    accelerator = Accelerator(gradient_accumulation_steps=4)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for b in loader:
        with accelerator.accumulate(model):
            accelerator.backward(model(b))
            optimizer.step()
            model.zero_grad()
    """, [("ACC001", 9)]),
    "scheduler per microbatch in a while loop": ("""
    import torch
    optimizer = torch.optim.AdamW(params)
    scheduler = torch.optim.lr_scheduler.LinearLR(optimizer)
    micro = 0
    while micro < n:
        (model(x) / A).backward()
        micro += 1
        scheduler.step()
        if micro % A == 0:
            optimizer.step()
            optimizer.zero_grad()
    """, [("ACC304", 9)]),
    "accumulation config divides, reset sits before the step": ("""
    for i, b in enumerate(loader):
        loss = model(b) / args.gradient_accumulation_steps
        loss.backward()
        if (i + 1) % args.gradient_accumulation_steps == 0:
            optimizer.zero_grad()
            optimizer.step()
    """, [("ACC003", 6)]),
    "accelerator.gradient_accumulation_steps divides again": ("""
    from accelerate import Accelerator
    accelerator = Accelerator(gradient_accumulation_steps=8)
    model, optimizer = accelerator.prepare(model, optimizer)
    for b in loader:
        with accelerator.accumulate(model):
            loss = model(b).loss / accelerator.gradient_accumulation_steps
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
    """, [("ACC101", 7)]),
    "step in the else branch of an inverted gate, 1-based enumerate": ("""
    for i, b in enumerate(loader, start=1):
        (model(b) / A).backward()
        if (i + 1) % A != 0:
            pass
        else:
            optimizer.step()
            optimizer.zero_grad()
    """, [("ACC006", 4)]),
    "losses kept in a dict": ("""
    history = {}
    for i, b in enumerate(loader):
        loss = model(b) / A
        loss.backward()
        history[i] = loss
        if (i + 1) % A == 0:
            optimizer.step()
            optimizer.zero_grad()
    """, [("ACC201", 6)]),
}

GOOD = {
    "tail flushed with an or-clause": """
    for i, b in enumerate(loader):
        (model(b) / A).backward()
        if (i + 1) % A == 0 or (i + 1) == len(loader):
            optimizer.step()
            optimizer.zero_grad()
    """,
    "residue A - 1 on a 0-based index": """
    for i, b in enumerate(loader):
        (model(b) / A).backward()
        if i % A == A - 1:
            optimizer.step()
            optimizer.zero_grad()
    """,
    "chunks of one batch, update after the inner loop": """
    for batch in loader:
        optimizer.zero_grad(set_to_none=True)
        for chunk in batch.chunk(A):
            loss = model(chunk) / A
            loss.backward()
        optimizer.step()
    """,
    "gradient penalty double backward with an ungated plain loop": """
    for x in loader:
        optimizer.zero_grad()
        out = model(x)
        grad, = torch.autograd.grad(out.sum(), x, create_graph=True)
        loss = out.mean() + grad.pow(2).mean()
        loss.backward()
        optimizer.step()
    """,
    "DeepSpeed managed loop": """
    import deepspeed
    engine, optimizer, _, _ = deepspeed.initialize(model=model, config=cfg)
    for b in loader:
        loss = engine(b)
        engine.backward(loss)
        engine.step()
    """,
    "GradScaler at the boundary": """
    import torch
    scaler = torch.amp.GradScaler("cuda")
    for i, b in enumerate(loader):
        with torch.autocast("cuda"):
            loss = model(b) / A
        scaler.scale(loss).backward()
        if (i + 1) % A == 0:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
    """,
    "GAN with one optimizer per network, both ungated": """
    for real in loader:
        d_opt.zero_grad()
        d_loss = disc_loss(disc(real), disc(gen(noise()).detach()))
        d_loss.backward()
        d_opt.step()
        g_opt.zero_grad()
        g_loss = gen_loss(disc(gen(noise())))
        g_loss.backward()
        g_opt.step()
    """,
    "logging under sync_gradients": """
    from accelerate import Accelerator
    accelerator = Accelerator(gradient_accumulation_steps=4)
    model, optimizer, sched, loader = accelerator.prepare(model, optimizer, sched, loader)
    for b in loader:
        with accelerator.accumulate(model):
            loss = model(b).loss
            accelerator.backward(loss)
            optimizer.step()
            sched.step()
            optimizer.zero_grad()
        if accelerator.sync_gradients:
            log(loss.item())
    """,
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_variant(name: str) -> None:
    source, expected = BAD[name]
    assert lint(source) == expected


@pytest.mark.parametrize("name", sorted(GOOD))
def test_good_variant(name: str) -> None:
    assert lint(GOOD[name]) == []


def test_no_sync_around_the_backward_of_a_loss_received_as_argument() -> None:
    """colossalai's wrapper shape: `backward(self, loss)` enters no_sync around the backward
    of a loss whose forward ran in the caller."""
    src = """
    from torch.nn.parallel import DistributedDataParallel

    class Accumulating:
        def backward(self, loss):
            self.count += 1
            with self.model.no_sync():
                scaled = loss / self.size
                scaled.backward()
    """
    assert lint(src) == [("ACC401", 9)]
    # an FSDP import makes the wrapper unknown: FSDP reads its flag at backward time
    assert lint(src.replace("import DistributedDataParallel",
                            "import DistributedDataParallel\n    from torch.distributed.fsdp import fully_shard")) == []
    # a forward inside the same context is fine
    assert lint(src.replace("scaled = loss / self.size", "loss = self.model(loss)\n                scaled = loss")) == []
