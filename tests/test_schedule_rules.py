"""ACC305 scheduler-horizon-unit-mismatch, ACC306 scheduler-stepped-twice and ACC902
ambiguous-step-unit on small snippets (written for these tests): the faulty shapes, the
correct shapes next to them, and the undecidable shapes where the rules stay silent."""

from __future__ import annotations

import pytest

from accumlint.checks.schedule import AmbiguousStepUnit
from accumlint.config import default_codes
from accumlint.model.engine_schedulers import lightning_configured_schedulers
from accumlint.model.schedules import (
    HorizonUnit,
    iterated_loader,
    microbatch_counters,
    schedule_horizons,
)
from tests.test_model import lint, model_of

CODES = ("ACC305", "ACC306", "ACC902")


def mine(source: str) -> list[tuple[str, int]]:
    """The findings of this file's rules (ACC902 is off by default: selected explicitly)."""
    return lint(source, select=",".join(CODES))


# --- ACC305 -----------------------------------------------------------------------------------

HORIZON_BAD = {
    "horizon len(loader) * epochs, stepped under the boundary gate": ("""
    import torch
    from transformers import get_linear_schedule_with_warmup
    optimizer = torch.optim.AdamW(model.parameters())
    num_training_steps = len(train_loader) * epochs
    scheduler = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=100,
                                                num_training_steps=num_training_steps)
    for epoch in range(epochs):
        for i, batch in enumerate(train_loader):
            (model(batch) / accumulation_steps).backward()
            if (i + 1) % accumulation_steps == 0:
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
    """, [("ACC305", 7)]),
    "T_max inline, positional horizon of a transformers schedule": ("""
    import torch
    from transformers import get_cosine_schedule_with_warmup
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    cosine = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=len(loader) * epochs)
    warm = get_cosine_schedule_with_warmup(optimizer, 0, epochs * len(loader))
    for epoch in range(epochs):
        for i, (x, y) in enumerate(loader):
            (loss_fn(model(x), y) / A).backward()
            if (i + 1) % A == 0:
                optimizer.step()
                optimizer.zero_grad()
                cosine.step()
                warm.step()
    """, [("ACC305", 5), ("ACC305", 6)]),
    "Accelerate accumulate() with a prepared scheduler sized in prepared microbatches": ("""
    from accelerate import Accelerator
    from transformers import get_linear_schedule_with_warmup
    accelerator = Accelerator(gradient_accumulation_steps=4)
    lr_scheduler = get_linear_schedule_with_warmup(
        optimizer=optimizer,
        num_warmup_steps=100,
        num_training_steps=(len(train_dataloader) * num_epochs),
    )
    model, optimizer, train_dataloader, lr_scheduler = accelerator.prepare(
        model, optimizer, train_dataloader, lr_scheduler)
    for epoch in range(num_epochs):
        for batch in train_dataloader:
            with accelerator.accumulate(model):
                accelerator.backward(model(**batch).loss)
                optimizer.step()
                lr_scheduler.step()
                optimizer.zero_grad()
    """, [("ACC305", 8)]),
    "update horizon multiplied by A while stepped once per update": ("""
    import torch
    from transformers import get_scheduler
    optimizer = torch.optim.AdamW(model.parameters())
    lr_scheduler = get_scheduler("cosine", optimizer=optimizer,
                                 num_warmup_steps=args.lr_warmup_steps * args.gradient_accumulation_steps,
                                 num_training_steps=args.max_train_steps * args.gradient_accumulation_steps)
    for step, batch in enumerate(loader):
        (model(batch).loss / args.gradient_accumulation_steps).backward()
        if (step + 1) % args.gradient_accumulation_steps == 0:
            optimizer.step()
            lr_scheduler.step()
            optimizer.zero_grad()
    """, [("ACC305", 6), ("ACC305", 7)]),
    "warmup counted in microbatches, horizon in updates; augmented assignments": ("""
    import math
    import torch
    optimizer = torch.optim.AdamW(model.parameters())
    total = math.ceil(len(loader) / accumulation_steps) * epochs
    warmup = len(loader)
    warmup *= epochs
    warmup = int(0.1 * warmup)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=1e-3, total_steps=total)
    sched2 = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.1, total_iters=warmup)
    for epoch in range(epochs):
        for i, (x, y) in enumerate(loader):
            (loss_fn(model(x), y) / accumulation_steps).backward()
            if (i + 1) % accumulation_steps == 0:
                optimizer.step()
                scheduler.step()
                sched2.step()
                optimizer.zero_grad()
    """, [("ACC305", 10)]),
}

HORIZON_GOOD = {
    "horizon divided by A (ceil and floor division)": """
    import math
    import torch
    optimizer = torch.optim.AdamW(model.parameters())
    updates_per_epoch = math.ceil(len(loader) / args.gradient_accumulation_steps)
    max_train_steps = args.num_train_epochs * updates_per_epoch
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=max_train_steps)
    other = torch.optim.lr_scheduler.LinearLR(optimizer, total_iters=len(loader) // args.gradient_accumulation_steps)
    for step, batch in enumerate(loader):
        (model(batch).loss / args.gradient_accumulation_steps).backward()
        if (step + 1) % args.gradient_accumulation_steps == 0:
            optimizer.step()
            scheduler.step()
            other.step()
            optimizer.zero_grad()
    """,
    "horizon from an update count, Accelerate's num_processes factor": """
    import math
    from accelerate import Accelerator
    from diffusers.optimization import get_scheduler
    accelerator = Accelerator(gradient_accumulation_steps=args.gradient_accumulation_steps)
    num_update_steps_per_epoch = math.ceil(len(train_dataloader) / args.gradient_accumulation_steps)
    max_train_steps = args.num_train_epochs * num_update_steps_per_epoch
    lr_scheduler = get_scheduler(
        args.lr_scheduler, optimizer=optimizer,
        num_warmup_steps=args.lr_warmup_steps * accelerator.num_processes,
        num_training_steps=max_train_steps * accelerator.num_processes,
    )
    unet, optimizer, train_dataloader, lr_scheduler = accelerator.prepare(
        unet, optimizer, train_dataloader, lr_scheduler)
    for epoch in range(args.num_train_epochs):
        for step, batch in enumerate(train_dataloader):
            with accelerator.accumulate(unet):
                accelerator.backward(unet(batch))
                optimizer.step()
                lr_scheduler.step()
                optimizer.zero_grad()
    """,
    "the loader of an outer loop counts updates: microbatches come from chunking each batch": """
    import torch
    optimizer = torch.optim.AdamW(model.parameters())
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=len(loader) * epochs)
    for epoch in range(epochs):
        for batch in loader:
            for chunk in batch.chunk(accumulation_steps):
                (model(chunk) / accumulation_steps).backward()
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
    """,
    "no accumulation in the loop (A = 1): any horizon in batches is right": """
    import torch
    optimizer = torch.optim.AdamW(model.parameters())
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=len(loader) * epochs)
    for epoch in range(epochs):
        for x, y in loader:
            loss_fn(model(x), y).backward()
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
    """,
    "undecidable: divided by a literal (is 4 the A?), a conditional default, branches that disagree": """
    import torch
    optimizer = torch.optim.AdamW(model.parameters())
    if args.max_steps is None:
        args.max_steps = len(loader) * epochs
    s1 = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=len(loader) * epochs // 4)
    s2 = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.max_steps)
    s3 = torch.optim.lr_scheduler.CosineAnnealingLR(
        optimizer, T_max=args.max_steps if args.max_steps > 0 else len(loader) * epochs)
    s4 = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=compute_steps(len(loader)) * epochs)
    for epoch in range(epochs):
        for i, (x, y) in enumerate(loader):
            (loss_fn(model(x), y) / A).backward()
            if (i + 1) % A == 0:
                optimizer.step()
                s1.step()
                s2.step()
                s3.step()
                s4.step()
                optimizer.zero_grad()
    """,
    "per-microbatch stepping of a microbatch horizon is consistent (not ACC305)": """
    import torch
    optimizer = torch.optim.AdamW(model.parameters())
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.max_steps * A)
    for i, (x, y) in enumerate(loader):
        (loss_fn(model(x), y) / A).backward()
        scheduler.step()
        if (i + 1) % A == 0:
            optimizer.step()
            optimizer.zero_grad()
    """,
}


@pytest.mark.parametrize("name", sorted(HORIZON_BAD))
def test_horizon_mismatch_is_flagged(name: str) -> None:
    source, expected = HORIZON_BAD[name]
    assert mine(source) == expected


@pytest.mark.parametrize("name", sorted(HORIZON_GOOD))
def test_horizon_in_the_stepping_unit_or_undecided_stays_silent(name: str) -> None:
    assert mine(HORIZON_GOOD[name]) == []


def test_horizon_units_read_from_the_arithmetic() -> None:
    model = model_of("""
    import math, torch
    steps_per_epoch = len(loader)
    updates = math.ceil(steps_per_epoch / accumulation_steps) * epochs
    s = get_polynomial_decay_schedule_with_warmup(opt, steps_per_epoch * epochs, updates)
    t = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max_steps * accumulation_steps)
    for i, b in enumerate(loader):
        (model(b) / accumulation_steps).backward()
        if (i + 1) % accumulation_steps == 0:
            opt.step(); s.step(); t.step(); opt.zero_grad()
    """)
    (group,) = model.loops
    assert iterated_loader(group) == "loader"
    origins = {e.role.origin for e in group.events if e.kind.name == "SCHEDULER_STEP"}
    found = sorted((h.parameter, h.unit) for origin in origins for h in schedule_horizons(model, origin, "loader"))
    assert found == [
        ("T_max", HorizonUnit.UPDATES_TIMES_A),
        ("num_training_steps", HorizonUnit.UPDATES),
        ("num_warmup_steps", HorizonUnit.MICROBATCHES),
    ]
    # without the loop's loader nothing is read as microbatches
    assert all(h.unit is not HorizonUnit.MICROBATCHES
               for origin in origins for h in schedule_horizons(model, origin, "val_loader"))


# --- ACC306 -----------------------------------------------------------------------------------

TWICE_BAD = {
    "DeepSpeed: the scheduler returned by initialize stepped every microbatch": ("""
    import deepspeed
    scheduler = get_linear_schedule_with_warmup(optimizer, 100, total_updates)
    engine, optimizer, _, scheduler = deepspeed.initialize(
        model=model, optimizer=optimizer, lr_scheduler=scheduler, config="ds.json")
    for batch in loader:
        engine.backward(engine(batch))
        engine.step()
        scheduler.step()
    """, [("ACC306", 9)]),
    "DeepSpeed: the object passed as lr_scheduler= stepped at the boundary": ("""
    import deepspeed
    sched = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    model_engine, _, _, _ = deepspeed.initialize(args=args, model=model, optimizer=optimizer, lr_scheduler=sched)
    for step, batch in enumerate(loader):
        model_engine.backward(model_engine(batch))
        model_engine.step()
        if model_engine.is_gradient_accumulation_boundary():
            sched.step()
    """, [("ACC306", 9)]),
    "DeepSpeed: a scheduler section in the config dict": ("""
    import deepspeed
    ds_config = {
        "train_micro_batch_size_per_gpu": 4,
        "gradient_accumulation_steps": 8,
        "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 100}},
    }
    engine, optimizer, _, lr_scheduler = deepspeed.initialize(model=model, config=ds_config,
                                                              model_parameters=model.parameters())
    for batch in loader:
        engine.backward(engine(batch))
        engine.step()
        lr_scheduler.step()
    """, [("ACC306", 13)]),
    "Lightning automatic optimization: lr_schedulers() stepped in training_step": ("""
    import lightning as L

    class Model(L.LightningModule):
        def training_step(self, batch, batch_idx):
            loss = self.loss(batch)
            sch = self.lr_schedulers()
            sch.step()
            return loss

        def configure_optimizers(self):
            opt = torch.optim.AdamW(self.parameters())
            return [opt], [torch.optim.lr_scheduler.StepLR(opt, step_size=10)]
    """, [("ACC306", 8)]),
    "Lightning automatic optimization: a dict-configured scheduler stepped in a batch hook": ("""
    import pytorch_lightning as pl

    class Model(pl.LightningModule):
        def configure_optimizers(self):
            opt = torch.optim.AdamW(self.parameters())
            self.scheduler = get_cosine_schedule_with_warmup(opt, 100, self.trainer.estimated_stepping_batches)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": self.scheduler, "interval": "step"}}

        def training_step(self, batch, batch_idx):
            return self.loss(batch)

        def on_train_batch_end(self, outputs, batch, batch_idx):
            self.scheduler.step()
    """, [("ACC306", 14)]),
}

TWICE_GOOD = {
    "DeepSpeed without a scheduler for the engine: the user's own, stepped at the boundary": """
    import deepspeed
    scheduler = get_linear_schedule_with_warmup(optimizer, 100, total_updates)
    engine, optimizer, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config="ds.json")
    for batch in loader:
        engine.backward(engine(batch))
        engine.step()
        if engine.is_gradient_accumulation_boundary():
            scheduler.step()
    """,
    "DeepSpeed only on one branch; the config's scheduler key nested, not a section": """
    import deepspeed
    config = {"train_batch_size": 32, "optimizer": {"type": "Adam", "params": {"scheduler": "none"}}}
    if args.deepspeed:
        engine, optimizer, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, lr_scheduler=scheduler)
    engine2, opt2, _, sched2 = deepspeed.initialize(model=model2, config=config)
    for batch in loader:
        engine.backward(engine(batch))
        engine.step()
        scheduler.step()
    """,
    "DeepSpeed set up at module level on one branch only, the scheduler stepped in a function": """
    import deepspeed
    if use_deepspeed:
        engine, optimizer, _, scheduler = deepspeed.initialize(model=model, optimizer=opt, lr_scheduler=sched)

    def train():
        for batch in loader:
            engine.backward(engine(batch))
            engine.step()
            scheduler.step()
    """,
    "DeepSpeed engine never stepped here: the manual step is the only one": """
    import deepspeed
    engine, optimizer, _, scheduler = deepspeed.initialize(model=model, optimizer=opt, lr_scheduler=sched)
    scheduler.step()
    """,
    "Lightning manual optimization stepping lr_schedulers() once per update": """
    import lightning as L

    class Model(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False

        def training_step(self, batch, batch_idx):
            opt = self.optimizers()
            self.manual_backward(self.loss(batch) / 4)
            if (batch_idx + 1) % 4 == 0:
                opt.step()
                opt.zero_grad()
                self.lr_schedulers().step()

        def configure_optimizers(self):
            opt = torch.optim.AdamW(self.parameters())
            return [opt], [torch.optim.lr_scheduler.StepLR(opt, step_size=10)]
    """,
    "Lightning automatic: lr_scheduler_step overridden, or no scheduler returned": """
    import lightning as L

    class Owned(L.LightningModule):
        def training_step(self, batch, batch_idx):
            self.lr_schedulers().step()
            return self.loss(batch)

        def configure_optimizers(self):
            opt = torch.optim.AdamW(self.parameters())
            return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.StepLR(opt, 10)}

        def lr_scheduler_step(self, scheduler, metric):
            pass

    class OwnScheduler(L.LightningModule):
        def training_step(self, batch, batch_idx):
            self.warmup.step()
            return self.loss(batch)

        def configure_optimizers(self):
            opt = torch.optim.AdamW(self.parameters())
            self.warmup = torch.optim.lr_scheduler.LinearLR(opt)
            return opt
    """,
}


@pytest.mark.parametrize("name", sorted(TWICE_BAD))
def test_scheduler_stepped_by_framework_and_user_is_flagged(name: str) -> None:
    source, expected = TWICE_BAD[name]
    assert mine(source) == expected


@pytest.mark.parametrize("name", sorted(TWICE_GOOD))
def test_scheduler_stepped_once_stays_silent(name: str) -> None:
    assert mine(TWICE_GOOD[name]) == []


def test_lightning_configured_schedulers_names_what_lightning_steps() -> None:
    source, _ = TWICE_BAD["Lightning automatic optimization: a dict-configured scheduler stepped in a batch hook"]
    model = model_of(source)
    (class_def,) = model.roles.classes.values()
    assert lightning_configured_schedulers(model, class_def) == {"self.scheduler", "self.lr_schedulers()"}
    owned = model_of(TWICE_GOOD["Lightning automatic: lr_scheduler_step overridden, or no scheduler returned"])
    assert [lightning_configured_schedulers(owned, c) for c in owned.roles.classes.values()] == [None, None]


# --- ACC902 -----------------------------------------------------------------------------------

STEP_UNIT_BAD = {
    "enumerate index named step printed as the position of a progress line": ("""
    for step, (x, y) in enumerate(loader):
        loss = loss_fn(model(x), y) / A
        loss.backward()
        if (step + 1) % A == 0:
            optimizer.step()
            optimizer.zero_grad()
            logger.info(f"step {step}: loss {loss.item():.3f}")
    """, [("ACC902", 8)]),
    "global_step incremented every microbatch: TensorBoard and wandb x-axes": ("""
    global_step = 0
    for epoch in range(epochs):
        for x, y in loader:
            loss = loss_fn(model(x), y) / A
            loss.backward()
            global_step += 1
            writer.add_scalar("train/loss", loss.item(), global_step)
            if global_step % A == 0:
                optimizer.step()
                optimizer.zero_grad()
                wandb.log({"lr": scheduler.get_last_lr()[0]}, step=global_step)
    """, [("ACC902", 8), ("ACC902", 12)]),
    "index of tqdm(enumerate(loader)) given to wandb.log": ("""
    for step, batch in tqdm(enumerate(loader), total=len(loader)):
        (model(batch).loss / gradient_accumulation_steps).backward()
        if (step + 1) % gradient_accumulation_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
        wandb.log({"loss": 1.0}, step=step)
    """, [("ACC902", 7)]),
    "a microbatch counter given to the scheduler": ("""
    import torch
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    for steps in range(total_microbatches):
        (model(next(it)) / A).backward()
        if (steps + 1) % A == 0:
            optimizer.step()
            scheduler.step(steps + 1)
            optimizer.zero_grad()
    """, [("ACC902", 8)]),
}

STEP_UNIT_GOOD = {
    "update counter incremented at the boundary": """
    global_step = 0
    for step, (x, y) in enumerate(loader):
        (loss_fn(model(x), y) / A).backward()
        if (step + 1) % A == 0:
            optimizer.step()
            optimizer.zero_grad()
            global_step += 1
            writer.add_scalar("loss", loss.item(), global_step)
            accelerator.log({"loss": loss.item()}, step=global_step)
    """,
    "counter named after microbatches, or divided by A": """
    for micro_step, (x, y) in enumerate(loader):
        (loss_fn(model(x), y) / A).backward()
        if (micro_step + 1) % A == 0:
            optimizer.step()
            optimizer.zero_grad()
            print(f"microbatch {micro_step}")
            wandb.log({"loss": 1.0}, step=micro_step // A)
    """,
    "no accumulation: every microbatch is an update": """
    for step, (x, y) in enumerate(loader):
        loss_fn(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
        wandb.log({"loss": 1.0}, step=step)
    """,
    "step= of a call that is no logger (a stride)": """
    for step, (x, y) in enumerate(loader):
        (loss_fn(model(x), y) / A).backward()
        positions = torch.arange(0, 64, step=step + 1)
        if (step + 1) % A == 0:
            optimizer.step()
            optimizer.zero_grad()
    """,
    "step counter advanced only under a data-dependent condition": """
    step = 0
    for x, y in loader:
        (loss_fn(model(x), y) / A).backward()
        if x.numel() > 0:
            step += 1
        if (i + 1) % A == 0:
            optimizer.step()
            optimizer.zero_grad()
        wandb.log({"loss": 1.0}, step=step)
    """,
}


@pytest.mark.parametrize("name", sorted(STEP_UNIT_BAD))
def test_microbatch_counter_named_step_used_as_a_position_is_flagged(name: str) -> None:
    source, expected = STEP_UNIT_BAD[name]
    assert mine(source) == expected


@pytest.mark.parametrize("name", sorted(STEP_UNIT_GOOD))
def test_update_counter_or_clear_name_stays_silent(name: str) -> None:
    assert mine(STEP_UNIT_GOOD[name]) == []


def test_microbatch_counters_of_a_loop() -> None:
    model = model_of(STEP_UNIT_BAD["global_step incremented every microbatch: TensorBoard and wandb x-axes"][0])
    (group,) = model.loops
    assert sorted(microbatch_counters(group)) == ["global_step"]
    gated = model_of(STEP_UNIT_GOOD["update counter incremented at the boundary"])
    (group,) = gated.loops
    assert sorted(microbatch_counters(group)) == ["step"]  # the enumerate index; global_step counts updates


def test_ambiguous_step_unit_is_off_by_default() -> None:
    assert AmbiguousStepUnit.default_enabled is False
    assert "ACC902" not in default_codes()


# --- a warmup written by hand: a counter of updates over a horizon in microbatches --------------
_HAND_WARMUP = """
    import torch

    micro_batch_size = 8
    accum = 64 // micro_batch_size
    warmup = {warmup}

    def fit(model, optimizer, loader, peak):
        done = 0
        for n, batch in enumerate(loader):
            if done < warmup:
                {write}
            (model(batch) / accum).backward()
            if (n + 1) % accum == 0:
                optimizer.step()
                optimizer.zero_grad()
                done += 1
"""
_INLINE = 'optimizer.param_groups[0]["lr"] = peak * done / warmup'
_BY_NAME = 'rate = peak * done / warmup\n                optimizer.param_groups[0]["lr"] = rate'


@pytest.mark.parametrize("write", [_INLINE, _BY_NAME], ids=["inline", "by-name"])
def test_update_counter_over_a_microbatch_warmup_is_flagged(write: str) -> None:
    source = _HAND_WARMUP.format(warmup="3 * (100_000 // micro_batch_size)", write=write)
    assert mine(source) == [("ACC305", 11)]


@pytest.mark.parametrize("warmup", ["3 * (100_000 // micro_batch_size) // accum", "500",
                                    "100_000 // (micro_batch_size * accum)", "samples // world"])
def test_warmup_counted_in_updates_or_undecided_stays_silent(warmup: str) -> None:
    assert mine(_HAND_WARMUP.format(warmup=warmup, write=_INLINE)) == []


def test_microbatch_counter_over_a_microbatch_warmup_stays_silent() -> None:
    source = _HAND_WARMUP.format(warmup="3 * (100_000 // micro_batch_size)", write=_INLINE.replace("done", "n")
                                 ).replace("if done < warmup", "if n < warmup")
    assert mine(source) == []
