"""ACC301 clip-inside-group, ACC302 clip-before-unscale, ACC303 scaler-inside-group: the
bug in the shapes real code takes, and the correct shapes next to them (snippets written
for these tests)."""

from __future__ import annotations

import pytest

from tests.test_model import lint

BAD = {
    "clip after every backward, update gated (run_squad before the fix)": ("""
    import torch
    for i, b in enumerate(loader):
        (model(b) / A).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if (i + 1) % A == 0:
            optimizer.step()
            optimizer.zero_grad()
    """, [("ACC301", 5)]),
    "clip_grad_value_ imported by name, inside an inner micro-loop": ("""
    from torch.nn.utils import clip_grad_value_
    for batch in loader:
        for chunk in batch.chunk(A):
            (model(chunk) / A).backward()
            clip_grad_value_(model.parameters(), 0.5)
        optimizer.step()
        optimizer.zero_grad()
    """, [("ACC301", 6)]),
    "clip at the top of the loop body, before the backward": ("""
    import torch
    for i, b in enumerate(loader):
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        (model(b) / A).backward()
        if (i + 1) % A == 0:
            optimizer.step()
            optimizer.zero_grad()
    """, [("ACC301", 4)]),
    "clip under a config flag (invariant) still runs every microbatch": ("""
    import torch
    for i, b in enumerate(loader):
        (model(b) / A).backward()
        if args.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
        if (i + 1) % A == 0:
            optimizer.step()
            optimizer.zero_grad()
    """, [("ACC301", 6)]),
    "clip in a helper of this module called every microbatch": ("""
    import torch

    def backward_and_clip(loss):
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)

    for i, b in enumerate(loader):
        backward_and_clip(model(b) / A)
        if (i + 1) % A == 0:
            optimizer.step()
            optimizer.zero_grad()
    """, [("ACC301", 6)]),
    "Accelerate: clip inside accumulate() without the sync_gradients guard": ("""
    from accelerate import Accelerator
    accelerator = Accelerator(gradient_accumulation_steps=4)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for b in loader:
        with accelerator.accumulate(model):
            accelerator.backward(model(b).loss)
            accelerator.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad()
    """, [("ACC301", 8)]),
    "Fabric: clip_gradients while still accumulating": ("""
    import lightning as L
    fabric = L.Fabric()
    model, optimizer = fabric.setup(model, optimizer)
    for i, b in enumerate(loader):
        is_accumulating = (i + 1) % A != 0
        with fabric.no_backward_sync(model, enabled=is_accumulating):
            fabric.backward(model(b) / A)
        fabric.clip_gradients(model, optimizer, max_norm=1.0)
        if not is_accumulating:
            optimizer.step()
            optimizer.zero_grad()
    """, [("ACC301", 9)]),
    "Lightning manual optimization: clip every microbatch, step gated": ("""
    import lightning as L

    class M(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False

        def training_step(self, batch, batch_idx):
            opt = self.optimizers()
            self.manual_backward(self.loss(batch) / 4)
            self.clip_gradients(opt, gradient_clip_val=1.0)
            if (batch_idx + 1) % 4 == 0:
                opt.step()
                opt.zero_grad()
    """, [("ACC301", 12)]),
    "Lightning automatic optimization: clip inside training_step": ("""
    import lightning as L
    import torch

    class M(L.LightningModule):
        def training_step(self, batch, batch_idx):
            loss = self.loss(batch)
            torch.nn.utils.clip_grad_norm_(self.parameters(), 1.0)
            return loss
    """, [("ACC301", 8)]),
    "GradScaler: unscale_ and clip every microbatch, step gated (Swin-Transformer #311)": ("""
    import torch
    scaler = torch.amp.GradScaler("cuda")
    for i, b in enumerate(loader):
        scaler.scale(model(b) / A).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if (i + 1) % A == 0:
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
    """, [("ACC303", 6), ("ACC301", 7)]),
    "GradScaler: update() every microbatch": ("""
    import torch
    scaler = torch.amp.GradScaler("cuda")
    for i, b in enumerate(loader):
        scaler.scale(model(b) / A).backward()
        if (i + 1) % A == 0:
            scaler.step(optimizer)
            optimizer.zero_grad()
        scaler.update()
    """, [("ACC303", 9)]),
    "GradScaler: step every microbatch next to a gated reset of the same optimizer": ("""
    import torch
    scaler = torch.cuda.amp.GradScaler()
    for i, b in enumerate(loader):
        scaler.scale(model(b) / A).backward()
        scaler.step(optimizer)
        if (i + 1) % A == 0:
            optimizer.step()
            scaler.update()
            optimizer.zero_grad()
    """, [("ACC303", 6)]),
    "GradScaler: clip at the boundary before unscale_": ("""
    import torch
    scaler = torch.amp.GradScaler("cuda")
    for i, b in enumerate(loader):
        scaler.scale(model(b) / A).backward()
        if (i + 1) % A == 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
    """, [("ACC302", 7)]),
    "GradScaler: unscale_ after the clip": ("""
    import torch
    scaler = torch.amp.GradScaler("cuda")
    for i, b in enumerate(loader):
        scaler.scale(model(b) / A).backward()
        if (i + 1) % A == 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.unscale_(optimizer)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
    """, [("ACC302", 7)]),
    "GradScaler: update step in a function without a loop, scaler passed in": ("""
    import torch

    def train_step(model, batch, optimizer, scaler: torch.amp.GradScaler):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(batch)
        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
    """, [("ACC302", 8)]),
    "GradScaler enabled by a flag: wrong whenever the flag is on": ("""
    import torch
    scaler = torch.amp.GradScaler("cuda", enabled=args.fp16)
    for i, b in enumerate(loader):
        scaler.scale(model(b) / A).backward()
        if (i + 1) % A == 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
    """, [("ACC302", 7)]),
    "GradScaler: clip every microbatch and never unscaled": ("""
    import torch
    scaler = torch.amp.GradScaler("cuda")
    for i, b in enumerate(loader):
        scaler.scale(model(b) / A).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if (i + 1) % A == 0:
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
    """, [("ACC301", 6), ("ACC302", 6)]),
}

GOOD = {
    "clip under the boundary gate": """
    import torch
    for i, b in enumerate(loader):
        (model(b) / A).backward()
        if (i + 1) % A == 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad()
    """,
    "clip after the inner micro-loop": """
    import torch
    for batch in loader:
        for chunk in batch.chunk(A):
            (model(chunk) / A).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
    """,
    "clip after a continue gate": """
    import torch
    for i, b in enumerate(loader):
        (model(b) / A).backward()
        if (i + 1) % A != 0:
            continue
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
    """,
    "no accumulation: clip and update every microbatch": """
    import torch
    for b in loader:
        model(b).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
    """,
    "norm measured every microbatch with an infinite threshold": """
    import math
    import torch
    for i, b in enumerate(loader):
        (model(b) / A).backward()
        norms.append(torch.nn.utils.clip_grad_norm_(model.parameters(), math.inf).item())
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=float("inf"))
        if (i + 1) % A == 0:
            optimizer.step()
            optimizer.zero_grad()
    """,
    "DP-SGD: per-example reset and clip, summed by hand": """
    import torch
    for x, y in loader:
        summed = [torch.zeros_like(p) for p in params]
        for xi, yi in zip(x, y):
            model.zero_grad()
            loss_fn(model(xi), yi).backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            for s, p in zip(summed, params):
                s.add_(p.grad)
        for s, p in zip(summed, params):
            p.grad = s / len(x)
        optimizer.step()
    """,
    "GAN: discriminator clipped and updated every microbatch, generator accumulated": """
    import torch
    for i, real in enumerate(loader):
        opt_d.zero_grad()
        disc_loss(D, real, G).backward()
        torch.nn.utils.clip_grad_norm_(D.parameters(), 1.0)
        opt_d.step()
        (gen_loss(D, G) / A).backward()
        if (i + 1) % A == 0:
            opt_g.step()
            opt_g.zero_grad()
    """,
    "Accelerate: clip guarded by sync_gradients": """
    from accelerate import Accelerator
    accelerator = Accelerator(gradient_accumulation_steps=4)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for b in loader:
        with accelerator.accumulate(model):
            accelerator.backward(model(b).loss)
            if accelerator.sync_gradients:
                accelerator.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad()
    """,
    "Accelerate on the DeepSpeed backend: its clip only reads the engine's norm": """
    from accelerate import Accelerator, DeepSpeedPlugin
    accelerator = Accelerator(gradient_accumulation_steps=4, deepspeed_plugin=DeepSpeedPlugin(zero_stage=2))
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for b in loader:
        with accelerator.accumulate(model):
            accelerator.backward(model(b).loss)
            norm = accelerator.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad()
    """,
    "Accelerate without a visible accumulation count: undecidable, silent": """
    from accelerate import Accelerator
    accelerator = Accelerator()
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for b in loader:
        with accelerator.accumulate(model):
            accelerator.backward(model(b).loss)
            accelerator.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad()
    """,
    "DeepSpeed engine loop: the engine clips at its boundary": """
    import deepspeed
    import torch
    engine, optimizer, _, _ = deepspeed.initialize(model=model, config=cfg)
    for b in loader:
        engine.backward(engine(b))
        torch.nn.utils.clip_grad_norm_(engine.parameters(), 1.0)
        engine.step()
    """,
    "Lightning automatic optimization: clip in on_before_optimizer_step": """
    import lightning as L
    import torch

    class M(L.LightningModule):
        def training_step(self, batch, batch_idx):
            return self.loss(batch)

        def on_before_optimizer_step(self, optimizer):
            torch.nn.utils.clip_grad_norm_(self.parameters(), 1.0)
    """,
    "Lightning manual optimization: clip under the gate": """
    import lightning as L

    class M(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False

        def training_step(self, batch, batch_idx):
            opt = self.optimizers()
            self.manual_backward(self.loss(batch) / 4)
            if (batch_idx + 1) % 4 == 0:
                self.clip_gradients(opt, gradient_clip_val=1.0)
                opt.step()
                opt.zero_grad()
    """,
    "Lightning: automatic_optimization overridden as a property (value not read)": """
    import lightning as L
    import torch

    class M(L.LightningModule):
        @property
        def automatic_optimization(self):
            return False

        def training_step(self, batch, batch_idx):
            torch.nn.utils.clip_grad_norm_(self.parameters(), 1.0)
            return self.loss(batch)
    """,
    "Lightning: automatic_optimization set False as a class attribute": """
    import lightning as L
    import torch

    class M(L.LightningModule):
        automatic_optimization = False

        def training_step(self, batch, batch_idx):
            torch.nn.utils.clip_grad_norm_(self.parameters(), 1.0)
            return self.loss(batch)
    """,
    "GradScaler: unscale_, clip, step, update once per group": """
    import torch
    scaler = torch.amp.GradScaler("cuda")
    for i, b in enumerate(loader):
        scaler.scale(model(b) / A).backward()
        if (i + 1) % A == 0:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
    """,
    "GradScaler: unscale_ only when amp is on, clip always (nanoGPT-like flags)": """
    import torch
    scaler = torch.amp.GradScaler("cuda", enabled=args.fp16)
    for i, b in enumerate(loader):
        scaler.scale(model(b) / A).backward()
        if (i + 1) % A == 0:
            if args.fp16:
                scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
    """,
    "GradScaler built disabled: nothing is scaled": """
    import torch
    scaler = torch.cuda.amp.GradScaler(enabled=False)
    for i, b in enumerate(loader):
        scaler.scale(model(b) / A).backward()
        if (i + 1) % A == 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
    """,
    "GradScaler: threshold multiplied by the current scale": """
    import torch
    scaler = torch.amp.GradScaler("cuda")
    for i, b in enumerate(loader):
        scaler.scale(model(b) / A).backward()
        if (i + 1) % A == 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm * scaler.get_scale())
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
    """,
    "GradScaler: clip only on the plain branch, the scaled branch does not clip": """
    import torch
    for i, b in enumerate(loader):
        loss = model(b) / A
        if scaler is None:
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        optimizer.zero_grad()
    """,
    "GradScaler: clip helper called after an unscale in the caller": """
    import torch

    class Trainer:
        def clip_and_step(self):
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.scaler.step(self.optimizer)
            self.scaler.update()

        def train(self, loader):
            for b in loader:
                self.scaler.scale(self.model(b)).backward()
                self.scaler.unscale_(self.optimizer)
                self.clip_and_step()
                self.optimizer.zero_grad()
    """,
    "GradScaler: unscale_ through a receiver we cannot place still counts": """
    import torch
    for i, b in enumerate(loader):
        scaler.scale(model(b) / A).backward()
        if (i + 1) % A == 0:
            self.amp.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
    """,
    "GradScaler: disabled scaler's unscale_ and update every microbatch do nothing": """
    import torch
    scaler = torch.amp.GradScaler("cuda", enabled=False)
    for i, b in enumerate(loader):
        scaler.scale(model(b) / A).backward()
        scaler.unscale_(optimizer)
        scaler.update()
        if (i + 1) % A == 0:
            scaler.step(optimizer)
            optimizer.zero_grad()
    """,
    "GradScaler without accumulation: everything every microbatch": """
    import torch
    scaler = torch.amp.GradScaler("cuda")
    for b in loader:
        scaler.scale(model(b)).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
    """,
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_gradient_operation(name: str) -> None:
    source, expected = BAD[name]
    assert sorted(lint(source), key=lambda f: (f[1], f[0])) == sorted(expected, key=lambda f: (f[1], f[0]))


@pytest.mark.parametrize("name", sorted(GOOD))
def test_good_gradient_operation(name: str) -> None:
    assert lint(GOOD[name]) == []
