"""ACC005 (partial final group), ACC102–ACC105 (normalization) and ACC202 (retain_graph):
the shapes each must report, and the neighbouring shapes it must leave alone — including
the ones the model cannot decide (silence documented, not a verdict)."""

from __future__ import annotations

import textwrap

import pytest

from accumlint.engine import check_source, rules_for
from tests.test_model import lint

BAD = {
    "ACC005 tail leaks into the next epoch (updates per epoch counted with //)": ("""
    import torch
    steps_per_epoch = len(loader) // accum
    for epoch in range(epochs):
        for i, batch in enumerate(loader):
            (model(batch) / accum).backward()
            if (i + 1) % accum == 0:
                optimizer.step()
                optimizer.zero_grad()
    """, "ACC005", [("ACC005", 7)]),
    "ACC005 one pass per call, counter reset before the loop": ("""
    def train_epoch(loader, accum):
        n_updates = math.ceil(len(loader) / accum)
        seen = 0
        for batch in loader:
            seen += 1
            (model(batch) / accum).backward()
            if seen % accum == 0:
                optimizer.step()
                optimizer.zero_grad()
    """, "ACC005", [("ACC005", 8)]),
    # issue 16 (tail model v2): a leak into the next epoch needs no length arithmetic; only a
    # length the code shows to be a multiple of A (assert, drop_last groups) keeps it silent
    "ACC005 epoch loop, no length arithmetic, nothing resets: the tail leaks": ("""
    for epoch in range(epochs):
        for i, batch in enumerate(loader):
            (model(batch) / accum).backward()
            if (i + 1) % accum == 0:
                optimizer.step()
                optimizer.zero_grad()
    """, "ACC005", [("ACC005", 5)]),
    "ACC005 flushed tail still divided by A (weighted r/A)": ("""
    for epoch in range(epochs):
        for i, batch in enumerate(train_loader):
            loss = model(batch) / grad_accum
            loss.backward()
            if (i + 1) % grad_accum == 0 or (i + 1) == len(train_loader):
                optimizer.step()
                optimizer.zero_grad()
    """, "ACC005", [("ACC005", 6)]),
    "ACC102 masked token mean divided by A": ("""
    import torch.nn.functional as F
    for i, batch in enumerate(loader):
        logits = model(batch["input_ids"])
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), batch["labels"].view(-1))
        (loss / gradient_accumulation_steps).backward()
        if (i + 1) % gradient_accumulation_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
    """, "ACC102", [("ACC102", 6)]),
    "ACC102 criterion object with ignore_index, shifted logits": ("""
    import torch
    criterion = torch.nn.CrossEntropyLoss(ignore_index=pad_id)
    for step, (x, y) in enumerate(loader):
        logits = model(x)
        loss = criterion(logits[:, :-1].flatten(0, 1), y[:, 1:].flatten())
        loss = loss / accumulation_steps
        loss.backward()
        if (step + 1) % accumulation_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
    """, "ACC102", [("ACC102", 7)]),
    "ACC103 plain loop that sums A gradients": ("""
    import torch
    for i, (x, y) in enumerate(loader):
        loss = loss_fn(model(x), y)
        loss.backward()
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
    """, "ACC103", [("ACC103", 5)]),
    "ACC104 division after an in-loop backward": ("""
    for i, batch in enumerate(loader):
        loss = model(batch)
        loss.backward()
        loss = loss / accum_steps
        running += loss.item()
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
    """, "ACC104", [("ACC104", 5)]),
    "ACC104 augmented division after the backward": ("""
    for i, batch in enumerate(loader):
        loss = model(batch)
        loss.backward()
        loss /= accum_steps
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
    """, "ACC104", [("ACC104", 5)]),
    "ACC104 helper result bound first, divided on the next line": ("""
    def micro(batch):
        loss = model(batch)
        loss.backward()
        return loss

    for i, batch in enumerate(loader):
        loss = micro(batch)
        loss = loss / accum_steps
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
    """, "ACC104", [("ACC104", 9)]),
    "ACC102 class-second layout (transpose) with ignore_index": ("""
    import torch.nn.functional as F
    for i, (x, y) in enumerate(loader):
        loss = F.cross_entropy(model(x).transpose(1, 2), y, ignore_index=-100)
        (loss / grad_accum_steps).backward()
        if (i + 1) % grad_accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
    """, "ACC102", [("ACC102", 5)]),
    "ACC202 torch.autograd.backward form": ("""
    import torch
    for i, batch in enumerate(loader):
        loss = model(batch) / A
        torch.autograd.backward(loss, retain_graph=True)
        if (i + 1) % A == 0:
            optimizer.step()
            optimizer.zero_grad()
    """, "ACC202", [("ACC202", 5)]),
    "ACC105 Lightning manual optimization without division": ("""
    import lightning as L

    class Model(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False

        def training_step(self, batch, batch_idx):
            opt = self.optimizers()
            loss = self.compute(batch)
            self.manual_backward(loss)
            if (batch_idx + 1) % 4 == 0:
                opt.step()
                opt.zero_grad()
    """, "ACC105", [("ACC105", 12)]),
    "ACC105 HF compute_loss override ignoring the count": ("""
    from transformers import Trainer

    class MyTrainer(Trainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            labels = inputs.pop("labels")
            outputs = model(**inputs)
            loss = torch.nn.functional.cross_entropy(outputs.logits.flatten(0, 1), labels.flatten())
            return (loss, outputs) if return_outputs else loss
    """, "ACC105", [("ACC105", 5)]),
    "ACC105 model with loss kwargs given to the Trainer": ("""
    import torch
    from transformers import Trainer

    class TinyLM(torch.nn.Module):
        def forward(self, input_ids, labels=None, **kwargs):
            return self.head(input_ids)

    class MyTrainer(Trainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            labels = inputs.pop("labels")
            return torch.nn.functional.cross_entropy(model(**inputs).flatten(0, 1), labels.flatten())

    MyTrainer(model=TinyLM(), args=args, train_dataset=data).train()
    """, "ACC105", [("ACC105", 10)]),
    "ACC202 retain_graph with no second backward": ("""
    for i, batch in enumerate(loader):
        loss = model(batch) / A
        loss.backward(retain_graph=True)
        if (i + 1) % A == 0:
            optimizer.step()
            optimizer.zero_grad()
    """, "ACC202", [("ACC202", 4)]),
}

GOOD = {
    "ACC005 length asserted to be a multiple of A": ("""
    assert len(loader) % accum == 0
    steps = len(loader) // accum
    for epoch in range(epochs):
        for i, batch in enumerate(loader):
            (model(batch) / accum).backward()
            if (i + 1) % accum == 0:
                optimizer.step()
                optimizer.zero_grad()
    """, "ACC005"),
    "ACC005 tail flushed with its true count (no division by A)": ("""
    steps = len(loader) // accum
    for epoch in range(epochs):
        for i, batch in enumerate(loader):
            model(batch).backward()
            if (i + 1) % accum == 0 or (i + 1) == len(loader):
                for p in model.parameters():
                    p.grad /= ((i % accum) + 1)
                optimizer.step()
                optimizer.zero_grad()
    """, "ACC005"),
    "ACC005 tail dropped on purpose: reset at the start of every epoch": ("""
    steps = len(loader) // accum
    for epoch in range(epochs):
        optimizer.zero_grad()
        for i, batch in enumerate(loader):
            (model(batch) / accum).backward()
            if (i + 1) % accum == 0:
                optimizer.step()
                optimizer.zero_grad()
    """, "ACC005"),
    "ACC005 tail stepped after the loop": ("""
    steps = len(loader) // accum
    for epoch in range(epochs):
        for i, batch in enumerate(loader):
            model(batch).backward()
            if (i + 1) % accum == 0:
                optimizer.step()
                optimizer.zero_grad()
        optimizer.step()
        optimizer.zero_grad()
    """, "ACC005"),
    "ACC005 silent: a global counter runs across epochs (groups span the boundary)": ("""
    steps = len(loader) // accum
    global_step = 0
    for epoch in range(epochs):
        for batch in loader:
            global_step += 1
            (model(batch) / accum).backward()
            if global_step % accum == 0:
                optimizer.step()
                optimizer.zero_grad()
    """, "ACC005"),
    "ACC005 silent: Accelerate's prepared loader decides the tail": ("""
    from accelerate import Accelerator
    accelerator = Accelerator(gradient_accumulation_steps=4)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    steps = len(loader) // 4
    for batch in loader:
        with accelerator.accumulate(model):
            accelerator.backward(model(batch))
            optimizer.step()
            optimizer.zero_grad()
    """, "ACC005"),
    "ACC102 silent: fixed-length pretraining slices (no masked labels)": ("""
    import torch.nn.functional as F
    for i, data in enumerate(loader):
        x, y = data[:, :-1], data[:, 1:]
        logits = model(x)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.reshape(-1))
        (loss / gradient_accumulation_steps).backward()
        if (i + 1) % gradient_accumulation_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
    """, "ACC102"),
    "ACC102 silent: summed token loss divided by the group's token count": ("""
    import torch.nn.functional as F
    for i, batch in enumerate(loader):
        logits = model(batch["input_ids"])
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), batch["labels"].view(-1), reduction="sum")
        (loss / group_tokens).backward()
        if (i + 1) % gradient_accumulation_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
    """, "ACC102"),
    "ACC102 silent: a hand-masked mean (the model does not follow masks by hand yet)": ("""
    import torch
    for step, (x, y, mask) in enumerate(loader):
        loss = torch.nn.functional.cross_entropy(model(x).view(-1, V), y.view(-1), reduction="none")
        loss = (loss * mask.view(-1)).sum() / mask.sum()
        (loss / accumulation_steps).backward()
        if (step + 1) % accumulation_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
    """, "ACC102"),
    "ACC102 silent: per-example classification labels": ("""
    import torch.nn.functional as F
    for i, batch in enumerate(loader):
        loss = F.cross_entropy(model(batch["pixels"]), batch["labels"])
        (loss / gradient_accumulation_steps).backward()
        if (i + 1) % gradient_accumulation_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
    """, "ACC102"),
    "ACC103 silent: loss divided by A": ("""
    for i, (x, y) in enumerate(loader):
        (loss_fn(model(x), y) / accum_steps).backward()
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
    """, "ACC103"),
    "ACC103 silent: gradients rescaled by hand before the update": ("""
    for i, (x, y) in enumerate(loader):
        loss_fn(model(x), y).backward()
        if (i + 1) % accum_steps == 0:
            for p in model.parameters():
                p.grad.div_(accum_steps)
            optimizer.step()
            optimizer.zero_grad()
    """, "ACC103"),
    "ACC103 silent: Accelerate divides in backward": ("""
    from accelerate import Accelerator
    accelerator = Accelerator(gradient_accumulation_steps=4)
    for i, b in enumerate(loader):
        accelerator.backward(model(b))
        if (i + 1) % 4 == 0:
            optimizer.step()
            optimizer.zero_grad()
    """, "ACC103"),
    "ACC104 silent: division only for the log after a divided backward": ("""
    for i, batch in enumerate(loader):
        loss = model(batch) / accum_steps
        loss.backward()
        logged = loss / accum_steps
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
    """, "ACC104"),
    "ACC104 silent: division before the backward": ("""
    for i, batch in enumerate(loader):
        loss = model(batch)
        loss = loss / accum_steps
        loss.backward()
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
    """, "ACC104"),
    "ACC104 silent: the divided value is what is backpropagated": ("""
    def micro(batch):
        return model(batch)

    for i, batch in enumerate(loader):
        loss = micro(batch) / accum_steps
        loss.backward()
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
    """, "ACC104"),
    "ACC105 silent: manual optimization that divides": ("""
    import lightning as L

    class Model(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False

        def training_step(self, batch, batch_idx):
            opt = self.optimizers()
            loss = self.compute(batch) / 4
            self.manual_backward(loss)
            if (batch_idx + 1) % 4 == 0:
                opt.step()
                opt.zero_grad()
    """, "ACC105"),
    "ACC105 silent: override that uses the count": ("""
    from transformers import Trainer

    class MyTrainer(Trainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            outputs = model(**inputs)
            loss = outputs.logits.float().pow(2).sum() / num_items_in_batch
            return (loss, outputs) if return_outputs else loss
    """, "ACC105"),
    "ACC105 silent: override declares its loss unscaled (loss_is_scaled_for_ga)": ("""
    from transformers import Trainer

    class MyTrainer(Trainer):
        loss_is_scaled_for_ga = False

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            return model(**inputs).logits.mean()
    """, "ACC105"),
    "ACC105 silent: override without the count parameter (older contract, unknown version)": ("""
    from transformers import Trainer

    class MyTrainer(Trainer):
        def compute_loss(self, model, inputs, return_outputs=False):
            return model(**inputs).logits.mean()
    """, "ACC105"),
    "ACC105 silent: a trl trainer base may declare its own normalization": ("""
    from trl import SFTTrainer

    class MyTrainer(SFTTrainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            return model(**inputs, labels=inputs["labels"]).logits.mean()
    """, "ACC105"),
    "ACC105 silent: batches without labels (the Trainer counts nothing and divides by A)": ("""
    from transformers import Trainer

    class MyTrainer(Trainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            return model(**inputs).logits.mean()
    """, "ACC105"),
    "ACC105 silent: the model given to the Trainer takes no loss kwargs (the Trainer divides by A)": ("""
    import torch
    from transformers import Trainer

    class TinyLM(torch.nn.Module):
        def forward(self, input_ids, labels=None):
            return self.head(input_ids)

    class MyTrainer(Trainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            labels = inputs.pop("labels")
            return torch.nn.functional.cross_entropy(model(**inputs).flatten(0, 1), labels.flatten())

    model = TinyLM()
    MyTrainer(model=model, args=args, train_dataset=data).train()
    """, "ACC105"),
    "ACC202 silent: backward repeated through one graph built before the loop": ("""
    loss = model(x).sum()
    for i in range(3):
        loss.backward(retain_graph=True)
        if (i + 1) % A == 0:
            optimizer.step()
            optimizer.zero_grad()
    """, "ACC202"),
    "ACC202 silent: one backward per output of a single forward": ("""
    out = model(x)
    for i, tensor in enumerate(out):
        tensor.backward(retain_graph=True)
        if (i + 1) % A == 0:
            optimizer.step()
    """, "ACC202"),
    "ACC103 silent: reset every microbatch (nothing is summed)": ("""
    for i, (x, y) in enumerate(loader):
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        if (i + 1) % accum_steps == 0:
            optimizer.step()
    """, "ACC103"),
    "ACC104 silent: Accelerate configured with A already divided in backward": ("""
    from accelerate import Accelerator
    accelerator = Accelerator(gradient_accumulation_steps=4)
    for i, b in enumerate(loader):
        loss = model(b)
        accelerator.backward(loss)
        loss = loss / 4
        if (i + 1) % 4 == 0:
            optimizer.step()
            optimizer.zero_grad()
    """, "ACC104"),
    "ACC103 silent: a late division is ACC104's finding, not a second one": ("""
    for i, batch in enumerate(loader):
        loss = model(batch)
        loss.backward()
        loss = loss / accum_steps
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
    """, "ACC103"),
    "ACC103 silent: torch.autograd.backward of a divided loss": ("""
    import torch
    for i, batch in enumerate(loader):
        loss = model(batch) / accum_steps
        torch.autograd.backward(loss)
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
    """, "ACC103"),
    "ACC105 silent: override divides by A in HF's conditional return form": ("""
    from transformers import Trainer

    class MyTrainer(Trainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            outputs = model(**inputs)
            loss = outputs.loss / self.args.gradient_accumulation_steps
            return (loss, outputs) if return_outputs else loss
    """, "ACC105"),
    "ACC105 silent: **kwargs signature (which transformers version passes the count is unknown)": ("""
    from transformers import Trainer

    class MyTrainer(Trainer):
        def compute_loss(self, model, inputs, return_outputs=False, **kwargs):
            labels = inputs.pop("labels")
            return model(**inputs).logits.mean()
    """, "ACC105"),
    "ACC202 silent: a second backward through the same graph": ("""
    for i, batch in enumerate(loader):
        out = model(batch)
        (out.a / A).backward(retain_graph=True)
        (out.b / A).backward()
        if (i + 1) % A == 0:
            optimizer.step()
            optimizer.zero_grad()
    """, "ACC202"),
    "ACC202 silent: retain_graph=False": ("""
    for i, batch in enumerate(loader):
        (model(batch) / A).backward(retain_graph=False)
        if (i + 1) % A == 0:
            optimizer.step()
            optimizer.zero_grad()
    """, "ACC202"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_reports(name: str) -> None:
    source, code, expected = BAD[name]
    assert lint(source, select=code) == expected


@pytest.mark.parametrize("name", sorted(GOOD))
def test_stays_silent(name: str) -> None:
    source, code = GOOD[name]
    assert lint(source, select=code) == []


def test_partial_group_message_says_what_happens_to_the_tail() -> None:
    leak = BAD["ACC005 tail leaks into the next epoch (updates per epoch counted with //)"][0]
    weighted = BAD["ACC005 flushed tail still divided by A (weighted r/A)"][0]
    messages = [
        check_source("s.py", textwrap.dedent(src).encode(), rules_for(["ACC005"])).findings[0].message
        for src in (leak, weighted)
    ]
    assert "join the next epoch's first update" in messages[0] and "(A + r)/A" in messages[0]
    assert "weighs r/A" in messages[1]
