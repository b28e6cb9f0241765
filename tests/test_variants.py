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
    "zero-based modulo with a last-batch clause (old HF no_trainer examples)": ("""
    for step, batch in enumerate(train_dataloader):
        loss = model(**batch).loss / args.gradient_accumulation_steps
        accelerator.backward(loss)
        if step % args.gradient_accumulation_steps == 0 or step == len(train_dataloader) - 1:
            optimizer.step()
            optimizer.zero_grad()
    """, [("ACC005", 5), ("ACC006", 5)]),  # the flushed tail is still divided by A: weighted r/A
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
    # with A's length unknown the flushed tail would weigh r/A (ACC005): the assert rules it out
    "tail flushed with an or-clause": """
    assert len(loader) % A == 0
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
    forward_inside = src.replace("scaled = loss / self.size", "loss = self.model(loss)\n                scaled = loss")
    assert lint(forward_inside) == []


#: False positives a fresh user found on correct loops (reduced snippets written for the tests).
REGRESSIONS = {
    "GAN: discriminator updated every microbatch, generator accumulated": """
    import torch
    opt_g = torch.optim.Adam(G.parameters())
    opt_d = torch.optim.Adam(D.parameters())
    for i, real in enumerate(loader):
        opt_d.zero_grad()
        disc_loss(D, real, G).backward()
        opt_d.step()
        (gen_loss(D, G) / A).backward(inputs=list(G.parameters()))
        if (i + 1) % A == 0:
            opt_g.step()
            opt_g.zero_grad()
    """,
    "Accelerate: prepared reset at the top of the loop, outside accumulate()": """
    from accelerate import Accelerator
    accelerator = Accelerator(gradient_accumulation_steps=4)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for batch in loader:
        optimizer.zero_grad()
        with accelerator.accumulate(model):
            accelerator.backward(model(batch).loss)
            optimizer.step()
    """,
    "Accelerate: several head losses of one microbatch backpropagated in a loop": """
    from accelerate import Accelerator
    accelerator = Accelerator(gradient_accumulation_steps=4)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for batch in loader:
        with accelerator.accumulate(model):
            losses = model(batch).losses
            for k, head_loss in enumerate(losses):
                accelerator.backward(head_loss, retain_graph=k < len(losses) - 1)
            optimizer.step()
            optimizer.zero_grad()
    """,
    "DDP: a no_grad pseudo-label forward before the sync flag": """
    from torch.nn.parallel import DistributedDataParallel as DDP
    model = DDP(model)
    for i, (weak, strong) in enumerate(loader):
        with torch.no_grad():
            pseudo = model(weak).argmax(-1)
        model.require_backward_grad_sync = (i + 1) % A == 0
        loss = ce(model(strong), pseudo) / A
        loss.backward()
        if (i + 1) % A == 0:
            optimizer.step()
            optimizer.zero_grad()
    """,
    "non-finite gradients: reset and skip the update": """
    for i, (x, y) in enumerate(loader):
        (loss_fn(model(x), y) / A).backward()
        if (i + 1) % A != 0:
            continue
        norm = clip(model.parameters(), 1.0)
        if not torch.isfinite(norm):
            optimizer.zero_grad(set_to_none=True)
            continue
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    """,
    "non-finite gradients: reset in one branch, update in the other": """
    for i, (x, y) in enumerate(loader):
        (loss_fn(model(x), y) / A).backward()
        if (i + 1) % A == 0:
            if not torch.isfinite(clip(model.parameters(), 1.0)):
                optimizer.zero_grad()
            else:
                optimizer.step()
                optimizer.zero_grad()
    """,
    "DeepSpeed only on one branch: the plain branch gates its own optimizer": """
    import deepspeed
    def train(args, model, optimizer, loader):
        if args.deepspeed:
            model, optimizer, _, _ = deepspeed.initialize(args=args, model=model)
        for step, batch in enumerate(loader):
            loss = model(batch).loss
            if args.deepspeed:
                model.backward(loss)
                model.step()
            else:
                (loss / args.gradient_accumulation_steps).backward()
                if (step + 1) % args.gradient_accumulation_steps == 0:
                    optimizer.step()
                    optimizer.zero_grad()
    """,
    "a module-local annealer named like a scheduler": """
    class KLAnnealer:
        def step(self):
            self.t += 1

    kl_scheduler = KLAnnealer()
    for i, b in enumerate(loader):
        (model(b) / A).backward()
        kl_scheduler.step()
        if (i + 1) % A == 0:
            optimizer.step()
            optimizer.zero_grad()
    """,
    "no_sync on every microbatch, gradients all-reduced by hand at the boundary": """
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    model = DDP(model)
    for i, (x, y) in enumerate(loader):
        with model.no_sync():
            (loss_fn(model(x), y) / A).backward()
        if (i + 1) % A == 0:
            for p in model.parameters():
                dist.all_reduce(p.grad)
            optimizer.step()
            optimizer.zero_grad()
    """,
    "DP-SGD: per-example reset, clipped gradients summed into a buffer": """
    for x, y in loader:
        summed = [torch.zeros_like(p) for p in params]
        for xi, yi in zip(x, y):
            model.zero_grad()
            loss_fn(model(xi), yi).backward()
            for s, p in zip(summed, params):
                s.add_(p.grad)
        for s, p in zip(summed, params):
            p.grad = s / len(x)
        optimizer.step()
    """,
}


@pytest.mark.parametrize("name", sorted(REGRESSIONS))
def test_correct_loop_found_by_a_user_stays_clean(name: str) -> None:
    assert lint(REGRESSIONS[name]) == []


def test_losses_kept_for_one_backward_at_the_boundary() -> None:
    """All A graphs alive at once: the big-batch memory that accumulation exists to avoid."""
    src = """
    for epoch in range(epochs):
        group_losses = []
        for i, (x, y) in enumerate(loader):
            loss = loss_fn(model(x), y)
            group_losses.append(loss)
            if (i + 1) % A == 0:
                (sum(group_losses) / A).backward()
                optimizer.step()
                optimizer.zero_grad()
                group_losses = []
    """
    assert lint(src) == [("ACC201", 6)]
    assert lint(src.replace("group_losses.append(loss)", "group_losses.append(loss.detach())")) == []


def test_in_place_reset_of_each_parameter_gradient_every_microbatch() -> None:
    assert lint("""
    for i, (x, y) in enumerate(loader):
        for p in model.parameters():
            if p.grad is not None:
                p.grad.zero_()
        (loss_fn(model(x), y) / A).backward()
        if (i + 1) % A == 0:
            optimizer.step()
    """) == [("ACC001", 5)]


def test_lightning_training_step_is_the_body_of_a_microbatch_loop() -> None:
    src = """
    import lightning as L

    class M(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False

        def training_step(self, batch, batch_idx):
            opt = self.optimizers()
            sch = self.lr_schedulers()
            self.manual_backward(self.loss(batch) / 4)
            if (batch_idx + 1) % 4 == 0:
                opt.step()
                opt.zero_grad()
            sch.step()
    """
    assert lint(src) == [("ACC304", 16)]
    gated = src.replace("            sch.step()\n", "")
    gated = gated.replace("opt.zero_grad()", "opt.zero_grad()\n                sch.step()")
    assert lint(gated) == []
    # the same method on a class that is no LightningModule is an ordinary function
    assert lint(src.replace("(L.LightningModule)", "")) == []


def test_continue_gate_nested_under_a_condition_on_a() -> None:
    """open_clip shape (reduced): the `continue` that gates the update sits under `if A > 1:`."""
    assert lint("""
    for i, (x, y) in enumerate(loader):
        (loss_fn(model(x), y) / args.accum_freq).backward()
        if args.accum_freq > 1:
            if (i + 1) % args.accum_freq > 0:
                continue
        optimizer.step()
        optimizer.zero_grad()
    """) == []


def test_cache_then_replay_group_under_else_of_a_equals_one() -> None:
    assert lint("""
    for i, batch in enumerate(loader):
        optimizer.zero_grad()
        if accum_freq == 1:
            loss_fn(model(batch)).backward()
        else:
            with torch.no_grad():
                cache.append(model(batch))
            if (i + 1) % accum_freq > 0:
                continue
            for j, cached in enumerate(cache):
                loss_fn(model(cached)).backward()
            cache = []
        optimizer.step()
    """) == []


def test_match_statements_are_walked() -> None:
    """torch meta_utils shape: a `match` statement once crashed the import scan."""
    assert lint("""
    match mode:
        case "train":
            import torch
        case _:
            pass
    for i, b in enumerate(loader):
        optimizer.zero_grad()
        (model(b) / A).backward()
        if (i + 1) % A == 0:
            optimizer.step()
    """) == [("ACC001", 8)]


def test_scheduler_sized_in_microbatches_on_purpose() -> None:
    """diffusers realfill shape (reduced): horizon and warmup multiplied by A, stepped every
    microbatch: consistent units. Without the factor it is case 011's bug."""
    src = """
    from accelerate import Accelerator
    from transformers import get_scheduler
    accelerator = Accelerator(gradient_accumulation_steps=args.gradient_accumulation_steps)
    sched = get_scheduler("cosine", optimizer=optimizer,
                          num_warmup_steps=args.warmup * args.gradient_accumulation_steps,
                          num_training_steps=args.max_train_steps * args.gradient_accumulation_steps)
    model, optimizer = accelerator.prepare(model, optimizer)
    for batch in loader:
        with accelerator.accumulate(model):
            accelerator.backward(model(batch).loss)
            optimizer.step()
            sched.step()
            optimizer.zero_grad()
    """
    assert lint(src) == []
    unscaled = src.replace(" * args.gradient_accumulation_steps", "")
    assert lint(unscaled) == [("ACC304", 13)]
