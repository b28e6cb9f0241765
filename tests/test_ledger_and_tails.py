"""Issue 16: the normalization ledger (ACC101, ACC102, ACC307, ACC405 read the same
denominators), tail model v2 (ACC005 without length arithmetic, counter gates, aliases of the
loader, ``range`` + ``next``) and ACC006's plain-loop update counter. Each reported shape has
a silent twin that differs by the one fact that makes it correct; the shared norm_/tail_
patterns are checked against their expected.tsv rows."""

from __future__ import annotations

import csv
import textwrap

import libcst as cst
import pytest

from accumlint.checks import ALL_RULES
from accumlint.engine import check_source, rules_for
from accumlint.model import EventKind, build_model
from accumlint.model.ledger import Factor
from tests.shared_data import SHARED, require_shared
from tests.test_model import lint

EVERY_RULE = rules_for(rule.code for rule in ALL_RULES)

BAD = {
    # --- ledger: token means -------------------------------------------------------------
    "ACC102 masked mean by hand through a helper-free chain, other names": ("""
    def step_all(net, opt, batches, accum_iters):
        for part in batches:
            w = part["weights"]
            raw = net(part["x"])
            per_elem = raw * part["y"]
            avg = (per_elem * w).sum() / w.float().sum()
            scaled = avg / accum_iters
            scaled.backward()
        opt.step()
        opt.zero_grad()
    """, "ACC102", [("ACC102", 8)]),
    "ACC102 masked mean over a padding comparison, divided by A": ("""
    def pretrain(net, opt, train_loader, accum):
        assert len(train_loader) % accum == 0
        for i, (ids, tgt) in enumerate(train_loader):
            real = tgt != 0
            err = net(ids, tgt)
            loss = (err * real).sum() / real.sum()
            (loss / accum).backward()
            if (i + 1) % accum == 0:
                opt.step()
                opt.zero_grad()
    """, "ACC102", [("ACC102", 8)]),
    "ACC102 HF outputs['loss'] with DataCollatorForTokenClassification": ("""
    from torch.utils.data import DataLoader
    from transformers import DataCollatorForTokenClassification

    def finetune(model, tok, ds, opt, grad_acc_steps):
        coll = DataCollatorForTokenClassification(tok)
        dl = DataLoader(ds, batch_size=4, collate_fn=coll)
        assert len(dl) % grad_acc_steps == 0
        for k, inputs in enumerate(dl):
            out = model(**inputs)
            (out["loss"] / grad_acc_steps).backward()
            if (k + 1) % grad_acc_steps == 0:
                opt.step()
                opt.zero_grad()
    """, "ACC102", [("ACC102", 11)]),
    "ACC102 token mean behind Accelerate's own division by A (no manual / A)": ("""
    import torch.nn.functional as F
    from accelerate import Accelerator

    def main(net, opt, train_loader, k):
        acc = Accelerator(gradient_accumulation_steps=k)
        net, opt, train_loader = acc.prepare(net, opt, train_loader)
        for b in train_loader:
            with acc.accumulate(net):
                out = net(b["ids"])
                loss = F.cross_entropy(out.flatten(0, 1), b["labels"].flatten(), ignore_index=-100)
                acc.backward(loss)
                opt.step()
                opt.zero_grad()
    """, "ACC102", [("ACC102", 12)]),
    "ACC102 model loss over labels the module's collate pads with -100, under Accelerate": ("""
    import torch
    from accelerate import Accelerator

    def pad_batch(items, pad):
        labels = torch.nn.utils.rnn.pad_sequence([it["labels"] for it in items], batch_first=True, padding_value=-100)
        return {"x": torch.stack([it["x"] for it in items]), "labels": labels}

    def main(net, opt, train_loader, k):
        acc = Accelerator(gradient_accumulation_steps=k)
        net, opt, train_loader = acc.prepare(net, opt, train_loader)
        for b in train_loader:
            with acc.accumulate(net):
                res = net(x=b["x"], labels=b["labels"])
                acc.backward(res.loss)
                opt.step()
                opt.zero_grad()
    """, "ACC102", [("ACC102", 15)]),
    "ACC102 prompt tokens set to -100 in preprocessing, model loss under Accelerate": ("""
    from accelerate import Accelerator

    def prepare(examples, tok, prompt_lens):
        enc = tok(examples["text"], padding="max_length")
        labels = enc["input_ids"].clone()
        for row, n in enumerate(prompt_lens):
            labels[row, :n] = -100
        enc["labels"] = labels
        return enc

    def main(net, opt, train_loader, k):
        acc = Accelerator(gradient_accumulation_steps=k)
        net, opt, train_loader = acc.prepare(net, opt, train_loader)
        for b in train_loader:
            with acc.accumulate(net):
                acc.backward(net(**b).loss)
                opt.step()
                opt.zero_grad()
    """, "ACC102", [("ACC102", 17)]),
    # --- ledger: two token denominators ----------------------------------------------------
    "ACC101 token mean then grads divided by the group's mask count (div_)": ("""
    import torch.nn.functional as F

    def run(net, opt, dl, accumulation_steps):
        assert len(dl) % accumulation_steps == 0
        seen = 0
        for j, (ids, tgt) in enumerate(dl):
            seen += tgt.ne(-100).sum().item()
            out = net(ids)
            F.cross_entropy(out.view(-1, out.size(-1)), tgt.view(-1), ignore_index=-100).backward()
            if (j + 1) % accumulation_steps == 0:
                for prm in net.parameters():
                    prm.grad.div_(seen)
                opt.step()
                opt.zero_grad()
                seen = 0
    """, "ACC101", [("ACC101", 13)]),
    "ACC101 token mean, then scale_grads(model, 1 / num_tokens) through a named count": ("""
    import torch.nn.functional as F
    from torchtune import training

    def recipe(model, opt, dl, grad_accum_steps, ignore):
        num_tokens = 0
        for idx, batch in enumerate(dl):
            labels = batch["labels"]
            here = (labels != ignore).sum()
            num_tokens += here
            logits = model(batch["tokens"])
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1), ignore_index=ignore)
            loss.backward()
            if (idx + 1) % grad_accum_steps == 0:
                training.scale_grads(model, 1 / num_tokens)
                opt.step()
                opt.zero_grad()
                num_tokens = 0
    """, "ACC101", [("ACC101", 15)]),
    # --- ledger: global denominators on the gradient side -----------------------------------
    "ACC405 grads divided in place by an all-reduced count under DDP": ("""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    def train(net, opt, dl, accum):
        net = DistributedDataParallel(net)
        assert len(dl) % accum == 0
        n_valid = 0
        for i, b in enumerate(dl):
            n_valid += b["mask"].sum()
            (net(b["x"]) * b["mask"]).sum().backward()
            if (i + 1) % accum == 0:
                dist.all_reduce(n_valid)
                for p in net.parameters():
                    p.grad /= n_valid
                opt.step()
                opt.zero_grad()
                n_valid = 0
    """, "ACC405", [("ACC405", 15)]),
    # --- tail model v2 ----------------------------------------------------------------------
    "ACC005 leak with no length arithmetic, tuple target, other names": ("""
    def fit(net, opt, shard_loader, crit, n_ep, k_acc):
        for ep in range(n_ep):
            for idx, (a, b) in enumerate(shard_loader):
                (crit(net(a), b) / k_acc).backward()
                if (idx + 1) % k_acc == 0:
                    opt.step()
                    opt.zero_grad()
    """, "ACC005", [("ACC005", 6)]),
    "ACC005 leak through an enumerate alias made inside the epoch loop": ("""
    def fit(net, opt, train_loader, crit, n_ep, accum):
        for ep in range(n_ep):
            it = enumerate(train_loader)
            for idx, (a, b) in it:
                (crit(net(a), b) / accum).backward()
                if (idx + 1) % accum == 0:
                    opt.step()
                    opt.zero_grad()
    """, "ACC005", [("ACC005", 7)]),
    "ACC005 flush after the loop, each tail microbatch divided by A": ("""
    def one_epoch(net, opt, train_loader, crit, grad_accum):
        for s, (a, b) in enumerate(train_loader):
            (crit(net(a), b) / grad_accum).backward()
            if (s + 1) % grad_accum == 0:
                opt.step()
                opt.zero_grad()
        if (s + 1) % grad_accum:
            opt.step()
            opt.zero_grad()
    """, "ACC005", [("ACC005", 8)]),
    "ACC005 counter survives the epoch, grads wiped at epoch start": ("""
    def fit(net, opt, train_loader, crit, n_ep, accum_steps):
        pending = 0
        for ep in range(n_ep):
            opt.zero_grad()
            for a, b in train_loader:
                (crit(net(a), b) / accum_steps).backward()
                pending += 1
                if pending == accum_steps:
                    opt.step()
                    opt.zero_grad()
                    pending = 0
    """, "ACC005", [("ACC005", 9)]),
    "ACC005 counter restarts each epoch but the grads are not reset: leak": ("""
    def fit(net, opt, train_loader, crit, n_ep, accum_steps):
        for ep in range(n_ep):
            pending = 0
            for a, b in train_loader:
                (crit(net(a), b) / accum_steps).backward()
                pending += 1
                if pending == accum_steps:
                    opt.step()
                    opt.zero_grad()
                    pending = 0
    """, "ACC005", [("ACC005", 8)]),
    "ACC005 range(steps_per_epoch) + next(it), epoch loop in the caller": ("""
    def run_epoch(net, opt, stream, steps_per_epoch, accum):
        for n in range(steps_per_epoch):
            batch = next(stream)
            (net(batch) / accum).backward()
            if (n + 1) % accum == 0:
                opt.step()
                opt.zero_grad()

    def main(net, opt, stream, epochs, steps_per_epoch, accum):
        for _ in range(epochs):
            run_epoch(net, opt, stream, steps_per_epoch, accum)
    """, "ACC005", [("ACC005", 6)]),
    "ACC005 method called per epoch through self, nothing resets": ("""
    class Runner:
        def epoch(self, train_loader):
            for i, b in enumerate(train_loader):
                (self.net(b) / self.accum).backward()
                if (i + 1) % self.accum == 0:
                    self.opt.step()
                    self.opt.zero_grad()

        def fit(self, train_loader, epochs):
            for _ in range(epochs):
                self.epoch(train_loader)
    """, "ACC005", [("ACC005", 6)]),
    # --- ACC006 plain-loop update counter ------------------------------------------------------
    "ACC006 clip gated on the update counter, per microbatch": ("""
    import torch

    def fit(net, opt, train_loader, accum):
        updates_done = 0
        for i, b in enumerate(train_loader):
            (net(b) / accum).backward()
            if (updates_done + 1) % accum == 0:
                torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
            if (i + 1) % accum == 0:
                opt.step()
                opt.zero_grad()
                updates_done += 1
    """, "ACC006", [("ACC006", 8)]),
    "ACC006 scheduler gated on the update counter, nested in another if": ("""
    def fit(net, opt, sched, train_loader, accum, warm):
        n_upd = 0
        for i, b in enumerate(train_loader):
            (net(b) / accum).backward()
            if (i + 1) % accum == 0:
                opt.step()
                opt.zero_grad()
                n_upd += 1
            if warm:
                if n_upd % accum == 0:
                    sched.step()
    """, "ACC006", [("ACC006", 11)]),
}

GOOD = {
    # --- ledger twins ---------------------------------------------------------------------
    "ACC102 silent: masked sum divided by the group's mask count, not by A": ("""
    def step_all(net, opt, batches, group_valid):
        for part in batches:
            w = part["weights"]
            per_elem = net(part["x"]) * part["y"]
            ((per_elem * w).sum() / group_valid).backward()
        opt.step()
        opt.zero_grad()
    """, "ACC102"),
    "ACC102 silent: a masked mean over a mask the model draws (fixed masking ratio)": ("""
    def pretrain(net, opt, train_loader, accum):
        assert len(train_loader) % accum == 0
        for i, imgs in enumerate(train_loader):
            pred, target, hidden = net(imgs)
            hidden = net.random_masking(imgs, 0.75)
            err = ((pred - target) ** 2).mean(-1)
            loss = (err * hidden).sum() / hidden.sum()
            (loss / accum).backward()
            if (i + 1) % accum == 0:
                opt.step()
                opt.zero_grad()
    """, "ACC102"),
    # undecided, so silent: over grouped fixed-length blocks the causal labels hold no padding
    "ACC102 silent: outputs['loss'] with DataCollatorForLanguageModeling": ("""
    from torch.utils.data import DataLoader
    from transformers import DataCollatorForLanguageModeling

    def finetune(model, tok, ds, opt, grad_acc_steps):
        coll = DataCollatorForLanguageModeling(tok, mlm=False)
        dl = DataLoader(ds, batch_size=4, collate_fn=coll)
        assert len(dl) % grad_acc_steps == 0
        for k, inputs in enumerate(dl):
            out = model(**inputs)
            (out["loss"] / grad_acc_steps).backward()
            if (k + 1) % grad_acc_steps == 0:
                opt.step()
                opt.zero_grad()
    """, "ACC102"),
    "ACC102 silent: the label-padding collator feeds only the eval loader": ("""
    from torch.utils.data import DataLoader
    from transformers import DataCollatorForSeq2Seq, default_data_collator

    def finetune(model, tok, train_ds, eval_ds, opt, grad_acc_steps):
        eval_dl = DataLoader(eval_ds, collate_fn=DataCollatorForSeq2Seq(tok, model=model))
        train_dl = DataLoader(train_ds, batch_size=8, collate_fn=default_data_collator)
        assert len(train_dl) % grad_acc_steps == 0
        for k, inputs in enumerate(train_dl):
            out = model(**inputs)
            (out.loss / grad_acc_steps).backward()
            if (k + 1) % grad_acc_steps == 0:
                opt.step()
                opt.zero_grad()
        return eval_dl
    """, "ACC102"),
    "ACC102 silent: token mean under Accelerate with no accumulation configured": ("""
    import torch.nn.functional as F
    from accelerate import Accelerator

    def main(net, opt, train_loader):
        acc = Accelerator()
        net, opt, train_loader = acc.prepare(net, opt, train_loader)
        for b in train_loader:
            with acc.accumulate(net):
                out = net(b["ids"])
                loss = F.cross_entropy(out.flatten(0, 1), b["labels"].flatten(), ignore_index=-100)
                acc.backward(loss)
                opt.step()
                opt.zero_grad()
    """, "ACC102"),
    "ACC102 silent: model loss under Accelerate, labels never padded with -100 here": ("""
    import torch
    from accelerate import Accelerator

    def pad_batch(items, pad):
        labels = torch.nn.utils.rnn.pad_sequence([it["labels"] for it in items], batch_first=True, padding_value=pad)
        return {"x": torch.stack([it["x"] for it in items]), "labels": labels}

    def main(net, opt, train_loader, k):
        acc = Accelerator(gradient_accumulation_steps=k)
        net, opt, train_loader = acc.prepare(net, opt, train_loader)
        for b in train_loader:
            with acc.accumulate(net):
                res = net(x=b["x"], labels=b["labels"])
                acc.backward(res.loss)
                opt.step()
                opt.zero_grad()
    """, "ACC102"),
    "ACC102 silent: the model is given the group's item count": ("""
    from torch.utils.data import DataLoader
    from transformers import DataCollatorForSeq2Seq

    def finetune(model, tok, ds, opt, grad_acc_steps, group_items):
        dl = DataLoader(ds, batch_size=4, collate_fn=DataCollatorForSeq2Seq(tok))
        assert len(dl) % grad_acc_steps == 0
        for k, inputs in enumerate(dl):
            out = model(**inputs, num_items_in_batch=group_items)
            (out.loss / grad_acc_steps).backward()
            if (k + 1) % grad_acc_steps == 0:
                opt.step()
                opt.zero_grad()
    """, "ACC102"),
    "ACC102 silent: summed token loss under Accelerate": ("""
    import torch.nn.functional as F
    from accelerate import Accelerator

    def main(net, opt, train_loader, k):
        acc = Accelerator(gradient_accumulation_steps=k)
        net, opt, train_loader = acc.prepare(net, opt, train_loader)
        for b in train_loader:
            with acc.accumulate(net):
                out = net(b["ids"])
                loss = F.cross_entropy(out.flatten(0, 1), b["labels"].flatten(), ignore_index=-100, reduction="sum")
                acc.backward(loss)
                opt.step()
                opt.zero_grad()
    """, "ACC102"),
    "ACC102 silent: outputs.loss without a label-masking collator": ("""
    def finetune(model, dl, opt, grad_acc_steps):
        assert len(dl) % grad_acc_steps == 0
        for k, inputs in enumerate(dl):
            out = model(**inputs)
            (out.loss / grad_acc_steps).backward()
            if (k + 1) % grad_acc_steps == 0:
                opt.step()
                opt.zero_grad()
    """, "ACC102"),
    "ACC101 silent: token mean weighted by its tokens, grads divided by the group count": ("""
    import torch.nn.functional as F

    def run(net, opt, dl, accumulation_steps):
        assert len(dl) % accumulation_steps == 0
        seen = 0
        for j, (ids, tgt) in enumerate(dl):
            k = tgt.ne(-100).sum()
            seen += k
            out = net(ids)
            (F.cross_entropy(out.view(-1, out.size(-1)), tgt.view(-1), ignore_index=-100) * k).backward()
            if (j + 1) % accumulation_steps == 0:
                for prm in net.parameters():
                    prm.grad.div_(seen)
                opt.step()
                opt.zero_grad()
                seen = 0
    """, "ACC101"),
    "ACC101 silent: summed token loss divided once on the gradient side": ("""
    import torch.nn.functional as F

    def run(net, opt, dl, accumulation_steps):
        assert len(dl) % accumulation_steps == 0
        seen = 0
        for j, (ids, tgt) in enumerate(dl):
            seen += tgt.ne(-100).sum()
            out = net(ids)
            F.cross_entropy(out.view(-1, out.size(-1)), tgt.view(-1), ignore_index=-100, reduction="sum").backward()
            if (j + 1) % accumulation_steps == 0:
                for prm in net.parameters():
                    prm.grad.mul_(1.0 / seen)
                opt.step()
                opt.zero_grad()
                seen = 0
    """, "ACC101"),
    "ACC101 silent: torchtune's own shape, the token mean weighted by its tokens": ("""
    import torch.nn.functional as F
    from torchtune import training

    def recipe(model, opt, dl, grad_accum_steps, ignore):
        num_tokens = 0
        for idx, batch in enumerate(dl):
            labels = batch["labels"]
            here = (labels != ignore).sum()
            num_tokens += here
            logits = model(batch["tokens"])
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1), ignore_index=ignore) * here
            loss.backward()
            if (idx + 1) % grad_accum_steps == 0:
                training.scale_grads(model, 1 / num_tokens)
                opt.step()
                opt.zero_grad()
                num_tokens = 0
    """, "ACC101"),
    # the acceptance case: sum over tokens, one division by the group's global token
    # count, times the world size under DDP
    "ACC405 silent: global count compensated by the world size on the gradient side": ("""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    def train(net, opt, dl, accum):
        net = DistributedDataParallel(net)
        assert len(dl) % accum == 0
        world = dist.get_world_size()
        n_valid = 0
        for i, b in enumerate(dl):
            n_valid += b["mask"].sum()
            (net(b["x"]) * b["mask"]).sum().backward()
            if (i + 1) % accum == 0:
                dist.all_reduce(n_valid)
                for p in net.parameters():
                    p.grad.mul_(world / n_valid)
                opt.step()
                opt.zero_grad()
                n_valid = 0
    """, "ACC405,ACC101,ACC102,ACC103"),
    "ACC405 silent: local count on the gradient side": ("""
    from torch.nn.parallel import DistributedDataParallel

    def train(net, opt, dl, accum):
        net = DistributedDataParallel(net)
        assert len(dl) % accum == 0
        n_valid = 0
        for i, b in enumerate(dl):
            n_valid += b["mask"].sum()
            (net(b["x"]) * b["mask"]).sum().backward()
            if (i + 1) % accum == 0:
                for p in net.parameters():
                    p.grad /= n_valid
                opt.step()
                opt.zero_grad()
                n_valid = 0
    """, "ACC405,ACC103"),
    # --- tail twins -------------------------------------------------------------------------
    "ACC005 silent: length asserted to be a multiple of A": ("""
    def fit(net, opt, shard_loader, crit, n_ep, k_acc):
        assert len(shard_loader) % k_acc == 0
        for ep in range(n_ep):
            for idx, (a, b) in enumerate(shard_loader):
                (crit(net(a), b) / k_acc).backward()
                if (idx + 1) % k_acc == 0:
                    opt.step()
                    opt.zero_grad()
    """, "ACC005"),
    "ACC005 silent: grads reset at epoch start (tail dropped on purpose)": ("""
    def fit(net, opt, shard_loader, crit, n_ep, k_acc):
        for ep in range(n_ep):
            opt.zero_grad()
            for idx, (a, b) in enumerate(shard_loader):
                (crit(net(a), b) / k_acc).backward()
                if (idx + 1) % k_acc == 0:
                    opt.step()
                    opt.zero_grad()
    """, "ACC005"),
    "ACC005 silent: one pass, no epoch loop, no length arithmetic": ("""
    def one_pass(net, opt, shard_loader, crit, k_acc):
        for idx, (a, b) in enumerate(shard_loader):
            (crit(net(a), b) / k_acc).backward()
            if (idx + 1) % k_acc == 0:
                opt.step()
                opt.zero_grad()
    """, "ACC005"),
    "ACC005 silent: losses collected and backpropagated at the boundary only": ("""
    def fit(net, opt, shard_loader, crit, n_ep, k_acc):
        for ep in range(n_ep):
            kept = []
            for idx, (a, b) in enumerate(shard_loader):
                kept.append(crit(net(a), b))
                if (idx + 1) % k_acc == 0:
                    (sum(kept) / k_acc).backward()
                    opt.step()
                    opt.zero_grad()
                    kept = []
    """, "ACC005"),
    "ACC005 silent: flush after the loop with the true tail size": ("""
    def one_epoch(net, opt, train_loader, crit, grad_accum):
        for s, (a, b) in enumerate(train_loader):
            (crit(net(a), b)).backward()
            if (s + 1) % grad_accum == 0:
                for p in net.parameters():
                    p.grad.div_(grad_accum)
                opt.step()
                opt.zero_grad()
        r = (s + 1) % grad_accum
        if r:
            for p in net.parameters():
                p.grad.div_(r)
            opt.step()
            opt.zero_grad()
    """, "ACC005"),
    "ACC005 silent: counter and grads both restart each epoch": ("""
    def fit(net, opt, train_loader, crit, n_ep, accum_steps):
        for ep in range(n_ep):
            pending = 0
            opt.zero_grad()
            for a, b in train_loader:
                (crit(net(a), b) / accum_steps).backward()
                pending += 1
                if pending == accum_steps:
                    opt.step()
                    opt.zero_grad()
                    pending = 0
    """, "ACC005"),
    "ACC005 silent: counter survives and nothing resets (groups run across epochs)": ("""
    def fit(net, opt, train_loader, crit, n_ep, accum_steps):
        pending = 0
        for ep in range(n_ep):
            for a, b in train_loader:
                (crit(net(a), b) / accum_steps).backward()
                pending += 1
                if pending == accum_steps:
                    opt.step()
                    opt.zero_grad()
                    pending = 0
    """, "ACC005"),
    "ACC005 silent: range over a total (not per-epoch) count of microbatches": ("""
    def run(net, opt, stream, total_micro, accum):
        for n in range(total_micro):
            batch = next(stream)
            (net(batch) / accum).backward()
            if (n + 1) % accum == 0:
                opt.step()
                opt.zero_grad()

    def main(net, opt, stream, epochs, total_micro, accum):
        for _ in range(epochs):
            run(net, opt, stream, total_micro, accum)
    """, "ACC005"),
    "ACC005 silent: the caller's epoch loop resets the gradients before each call": ("""
    def run_epoch(net, opt, stream, steps_per_epoch, accum):
        for n in range(steps_per_epoch):
            batch = next(stream)
            (net(batch) / accum).backward()
            if (n + 1) % accum == 0:
                opt.step()
                opt.zero_grad()

    def main(net, opt, stream, epochs, steps_per_epoch, accum):
        for _ in range(epochs):
            opt.zero_grad()
            run_epoch(net, opt, stream, steps_per_epoch, accum)
    """, "ACC005"),
    "ACC005 silent: a method of another class with the same name is called in a loop": ("""
    class Runner:
        def epoch(self, train_loader):
            for i, b in enumerate(train_loader):
                (self.net(b) / self.accum).backward()
                if (i + 1) % self.accum == 0:
                    self.opt.step()
                    self.opt.zero_grad()

    class Other:
        def fit(self, epochs):
            for _ in range(epochs):
                self.epoch()
    """, "ACC005"),
    # --- ACC006 twins -------------------------------------------------------------------------
    "ACC006 silent: the update counter tested under the update gate": ("""
    def fit(net, opt, sched, train_loader, accum):
        n_upd = 0
        for i, b in enumerate(train_loader):
            (net(b) / accum).backward()
            if (i + 1) % accum == 0:
                opt.step()
                opt.zero_grad()
                n_upd += 1
                if n_upd % accum == 0:
                    sched.step()
    """, "ACC006"),
    "ACC006 silent: a microbatch counter (advanced every microbatch)": ("""
    import torch

    def fit(net, opt, train_loader, accum):
        micro = 0
        for b in train_loader:
            (net(b) / accum).backward()
            micro += 1
            if micro % accum == 0:
                torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
                opt.step()
                opt.zero_grad()
    """, "ACC006"),
    "ACC006 silent: the update counter modulo a logging interval": ("""
    def fit(net, opt, train_loader, accum, log_every, log):
        n_upd = 0
        for i, b in enumerate(train_loader):
            (net(b) / accum).backward()
            if (i + 1) % accum == 0:
                opt.step()
                opt.zero_grad()
                n_upd += 1
            if n_upd % log_every == 0:
                log(n_upd)
    """, "ACC006"),
    "ACC006 silent: update-counter test that gates no accumulation event": ("""
    def fit(net, opt, train_loader, accum, log):
        n_upd = 0
        for i, b in enumerate(train_loader):
            (net(b) / accum).backward()
            if (i + 1) % accum == 0:
                opt.step()
                opt.zero_grad()
                n_upd += 1
            if n_upd % accum == 0:
                log(n_upd)
    """, "ACC006"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_reports(name: str) -> None:
    source, code, expected = BAD[name]
    assert lint(source, select=code) == expected


@pytest.mark.parametrize("name", sorted(GOOD))
def test_stays_silent(name: str) -> None:
    source, codes = GOOD[name]
    assert lint(source, select=codes) == []


def _message(source: str, code: str) -> str:
    found = check_source("s.py", textwrap.dedent(source).encode(), rules_for([code])).findings
    assert len(found) == 1, found
    return found[0].message


def test_messages_say_the_resulting_scale_and_what_happens_to_the_tail() -> None:
    assert "1/(tokens per microbatch)" in _message(
        BAD["ACC101 token mean then grads divided by the group's mask count (div_)"][0], "ACC101")
    assert "D times too small" in _message(
        BAD["ACC405 grads divided in place by an all-reduced count under DDP"][0], "ACC405")
    shifted = _message(BAD["ACC005 counter survives the epoch, grads wiped at epoch start"][0], "ACC005")
    assert "A - r microbatches" in shifted and "dropped" in shifted
    leak = _message(BAD["ACC005 leak with no length arithmetic, tuple target, other names"][0], "ACC005")
    assert "join the next epoch's first update" in leak
    assert "weighs r/A" in _message(BAD["ACC005 flush after the loop, each tail microbatch divided by A"][0], "ACC005")
    assert "`n_upd` counts optimizer updates" in _message(
        BAD["ACC006 scheduler gated on the update counter, nested in another if"][0], "ACC006")


def test_ledger_entries_per_kind() -> None:
    """One backward's ledger lists the token mean, the division by A, a product and a
    gradient-side rescale with its divisor and cadence."""
    source = textwrap.dedent("""
    import torch.nn.functional as F

    def run(net, opt, dl, accum, w):
        seen = 0
        for j, (ids, tgt) in enumerate(dl):
            seen += tgt.ne(-100).sum()
            out = net(ids)
            loss = F.cross_entropy(out.view(-1, out.size(-1)), tgt.view(-1), ignore_index=-100)
            (loss * w / accum).backward()
            if (j + 1) % accum == 0:
                for p in net.parameters():
                    p.grad.div_(seen)
                opt.step()
                opt.zero_grad()
    """)
    model = build_model(cst.parse_module(source))
    (group,) = [g for g in model.loops if g.accumulates]
    (backward,) = group.of_kind(EventKind.BACKWARD)
    book = model.ledger(group, backward)
    kinds = [entry.factor for entry in book.entries]
    assert kinds == [Factor.TOKEN_MEAN, Factor.DIVIDE_A, Factor.MULTIPLY, Factor.GRAD_RESCALE]
    (rescale,) = book.of(Factor.GRAD_RESCALE)
    assert rescale.divisor is not None and rescale.divisor.value == "seen"  # type: ignore[attr-defined]
    assert rescale.cadence.name == "UPDATE"
    assert "ignore_index" in book.of(Factor.TOKEN_MEAN)[0].evidence


def _shared_rows(prefixes: tuple[str, ...]) -> list[dict[str, str]]:
    table = SHARED / "patterns" / "expected.tsv"
    if not table.exists():
        return []
    with table.open(newline="") as handle:
        return [row for row in csv.DictReader(handle, delimiter="\t") if row["file"].startswith(prefixes)]


@pytest.mark.parametrize("row", _shared_rows(("norm_", "tail_")), ids=lambda row: row["file"])
def test_shared_norm_and_tail_patterns(row: dict[str, str]) -> None:
    """Each faulty norm_/tail_ pattern reports its code on one of its lines (every rule
    selected; other true findings its header names may come too); each silent twin reports nothing."""
    path = require_shared("patterns", row["file"])
    found = [(f.code, f.line) for f in check_source(str(path), path.read_bytes(), EVERY_RULE).findings]
    if row["required"] == "-":
        assert found == []
        return
    lines = {int(line) for line in row["lines"].split(",")}
    assert any(code == row["required"] and line in lines for code, line in found), found


LEDGER_KINDS = {
    Factor.FRAMEWORK_A: ("""
    from accelerate import Accelerator

    accelerator = Accelerator(gradient_accumulation_steps=accum)
    for i, b in enumerate(loader):
        with accelerator.accumulate(model):
            accelerator.backward(model(b) / accum)
            optimizer.step()
            optimizer.zero_grad()
    """, "Accelerate"),
    Factor.DIVIDE_GLOBAL_COUNT: ("""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = DDP(model)
    for i, b in enumerate(loader):
        n = b["mask"].sum()
        dist.all_reduce(n)
        ((model(b["x"]) * b["mask"]).sum() / n).backward()
        if (i + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
    """, ""),
    Factor.DIVIDE_WORLD: ("""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = DDP(model)
    world_size = dist.get_world_size()
    for i, b in enumerate(loader):
        (model(b) / accum / world_size).backward()
        if (i + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
    """, ""),
    Factor.TOKEN_MEAN: ("""
    for i, b in enumerate(loader):
        keep = b["mask"]
        loss = (model(b["x"]) * keep).sum() / keep.sum()
        (loss / accum).backward()
        if (i + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
    """, "keep.sum()"),
}


@pytest.mark.parametrize("factor", list(LEDGER_KINDS), ids=lambda f: f.name)
def test_each_ledger_entry_kind(factor: Factor) -> None:
    source, evidence = LEDGER_KINDS[factor]
    model = build_model(cst.parse_module(textwrap.dedent(source)))
    backwards = [e for e in model.all_events() if e.kind is EventKind.BACKWARD]
    assert len(backwards) == 1
    (group,) = [g for g in model.loops if g.accumulates]
    entries = model.ledger(group, backwards[0]).of(factor)
    assert len(entries) == 1, model.ledger(group, backwards[0]).entries
    assert evidence in entries[0].evidence
    if factor is Factor.FRAMEWORK_A:
        assert len(entries[0].repeats) == 1  # the manual `/ accum` Accelerate repeats
