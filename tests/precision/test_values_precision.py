"""Issue 31, the false alarms about values: each reduced in our own words, with the real bug of
the same rule beside it (it must still be reported).

- ACC102 on targets that are the token ids themselves (``input_ids.clone()``, ``ids[:, 1:]``)
  under a negative ``ignore_index``: no id equals it, so every position is supervised and the
  token mean is the microbatch's mean over its shape (fixed-length packed blocks weigh alike);
  also labels a dataset's ``__getitem__`` cuts from a packed block, or a ``dataset.map``
  function copies from ``input_ids``, stacked by a collator that adds nothing. A pad id as the
  ignore value, ``labels[m] = -100`` or a padding collator keep the finding.
- ACC201 on a slot overwritten every microbatch (``stats["loss"] = loss``, ``self.log["loss"]``
  in a method): one microbatch's value at a time, as a plain name; on ``loss.data``; and in an
  Accelerate loop whose Accelerator is built without ``gradient_accumulation_steps`` (one
  microbatch per group: nothing to keep alive). Kept as findings, as the rule's spec and its
  catalogue say: a list of losses, ``history[i] = loss``, and a running tensor sum
  (``total += loss`` pins every microbatch's autograd nodes even after its backward).
- ACC005 on a tail clause whose short group's gradients are rescaled in place by ``A / r``
  before the update (by hand, in a helper, a method, ``div_(r / A)``): the tail weighs its true
  size. A rescale the other way (``r / A``) or none keeps the finding.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.project.test_interprocedural import one


def codes(tmp_path: Path, source: str, code: str) -> list[int]:
    """The lines of ``code``'s findings in ``source`` (every rule selected)."""
    return [line for found, line in one(tmp_path, source) if found == code]


# --- ACC102: targets that are the token ids, never masked ---------------------------------------

IDS_AS_TARGETS = """
import torch.nn.functional as F


def train(model, opt, loader, accum_steps):
    for step, batch in enumerate(loader):
        input_ids = batch["input_ids"]
        labels = input_ids.clone()
        {mask}
        logits = model(input_ids)
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), labels[:, 1:].reshape(-1),
                               ignore_index={ignore})
        (loss / accum_steps).backward()
        if (step + 1) % accum_steps == 0:
            opt.step()
            opt.zero_grad()
"""


@pytest.mark.parametrize(("mask", "ignore", "expected"), [
    ("pass", "-100", []),  # a copy of the ids: no id is -100, every position is supervised
    ("labels[labels == 0] = -100", "-100", [13]),  # the padding becomes -100: counts vary
    ("labels.masked_fill_(batch['attention_mask'] == 0, -100)", "-100", [13]),
    ("pass", "pad_id", [13]),  # the pad id is ignored: the padding is not supervised
])
def test_targets_copied_from_the_ids(tmp_path: Path, mask: str, ignore: str, expected: list[int]) -> None:
    assert codes(tmp_path, IDS_AS_TARGETS.format(mask=mask, ignore=ignore), "ACC102") == expected


TOKEN_HELPER = """
import torch.nn.functional as F


def token_loss(model, batch, pad_id):
    ids = batch["input_ids"]
    logits = model(ids[:, :-1])
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), ids[:, 1:].reshape(-1), ignore_index={ignore})


def fit(model, opt, loader, accum, pad_id):
    for i, batch in enumerate(loader):
        loss = token_loss(model, batch, pad_id)
        (loss / accum).backward()
        if (i + 1) % accum == 0:
            opt.step()
            opt.zero_grad()
"""


@pytest.mark.parametrize(("ignore", "expected"), [("-1", []), ("pad_id", [14])])
def test_targets_shifted_from_the_ids_in_a_helper(tmp_path: Path, ignore: str, expected: list[int]) -> None:
    # the helper's own names decide what its targets are
    assert codes(tmp_path, TOKEN_HELPER.format(ignore=ignore), "ACC102") == expected


ACCELERATE_IDS = """
import torch.nn.functional as F
from accelerate import Accelerator


def main(model, opt, loader, args):
    accelerator = Accelerator(gradient_accumulation_steps=args.accum)
    model, opt, loader = accelerator.prepare(model, opt, loader)
    for batch in loader:
        with accelerator.accumulate(model):
            ids = batch["input_ids"]
            logits = model(ids[:, :-1])
            loss = F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten(), ignore_index={ignore})
            accelerator.backward(loss)
            opt.step()
            opt.zero_grad()
"""


@pytest.mark.parametrize(("ignore", "expected"), [("-100", []), ("args.pad_id", [14])])
def test_targets_from_the_ids_under_accelerate(tmp_path: Path, ignore: str, expected: list[int]) -> None:
    assert codes(tmp_path, ACCELERATE_IDS.format(ignore=ignore), "ACC102") == expected


PACKED_DATASET = """
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset


class PackedBlocks(Dataset):
    def __init__(self, tokens, block):
        self.tokens = tokens
        self.block = block

    def __len__(self):
        return (len(self.tokens) - 1) // self.block

    def __getitem__(self, i):
        chunk = self.tokens[i * self.block:(i + 1) * self.block + 1]
        labels = chunk[1:]
        {mask}
        return {{"input_ids": chunk[:-1], "labels": labels}}


def train(model, opt, tokens, accum_steps):
    loader = DataLoader(PackedBlocks(tokens, 1024), batch_size=8, shuffle=True)
    for step, batch in enumerate(loader):
        logits = model(batch["input_ids"])
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), batch["labels"].view(-1))
        (loss / accum_steps).backward()
        if (step + 1) % accum_steps == 0:
            opt.step()
            opt.zero_grad()
"""


@pytest.mark.parametrize(("mask", "expected"), [
    ("pass", []),  # every block holds the same number of supervised tokens
    ("labels[labels == 0] = -100", [26]),
])
def test_labels_cut_by_a_datasets_getitem(tmp_path: Path, mask: str, expected: list[int]) -> None:
    assert codes(tmp_path, PACKED_DATASET.format(mask=mask), "ACC102") == expected


GROUPED_TEXTS = """
import torch.nn.functional as F
from torch.utils.data import DataLoader
from transformers import DataCollatorForSeq2Seq, default_data_collator


def group_texts(examples, block_size):
    joined = {{k: sum(examples[k], []) for k in examples.keys()}}
    total = (len(joined["input_ids"]) // block_size) * block_size
    result = {{k: [t[i:i + block_size] for i in range(0, total, block_size)] for k, t in joined.items()}}
    result["labels"] = {labels}
    return result


def train(model, opt, dataset, tok, accum_steps):
    loader = DataLoader(dataset, batch_size=8, collate_fn={collator})
    for step, batch in enumerate(loader):
        logits = model(batch["input_ids"]).logits
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), batch["labels"][:, 1:].reshape(-1))
        (loss / accum_steps).backward()
        if (step + 1) % accum_steps == 0:
            opt.step()
            opt.zero_grad()
"""


@pytest.mark.parametrize(("labels", "collator", "expected"), [
    ('result["input_ids"].copy()', "default_data_collator", []),
    ('[[t if t else -100 for t in ids] for ids in result["input_ids"]]', "default_data_collator", [20]),
    ('result["input_ids"].copy()', "DataCollatorForSeq2Seq(tok)", [20]),  # the collator pads labels with -100
])
def test_labels_copied_from_the_ids_by_a_map_function(tmp_path: Path, labels: str, collator: str,
                                                      expected: list[int]) -> None:
    assert codes(tmp_path, GROUPED_TEXTS.format(labels=labels, collator=collator), "ACC102") == expected


# --- ACC201: what keeps a graph alive across microbatches ----------------------------------------

KEPT = """
def train(model, opt, loader, crit, accum):
    stats, history, kept, total = {{}}, {{}}, [], 0.0
    for i, (x, y) in enumerate(loader):
        loss = crit(model(x), y) / accum
        loss.backward()
        {keep}
        if (i + 1) % accum == 0:
            opt.step()
            opt.zero_grad()
    return stats, history, kept, total
"""


@pytest.mark.parametrize(("keep", "expected"), [
    ('stats["loss"] = loss', []),  # overwritten every microbatch: one loss at a time
    ("stats[accum] = loss", []),  # a key the loop never rebinds
    ("total += loss.data", []),  # no autograd history
    ("history[i] = loss", [7]),  # a slot per microbatch
    ("kept.append(loss)", [7]),
    ("total += loss", [7]),  # the running tensor sum pins every microbatch's autograd nodes
    ("total = total + loss", [7]),
])
def test_what_a_gated_loop_keeps(tmp_path: Path, keep: str, expected: list[int]) -> None:
    assert codes(tmp_path, KEPT.format(keep=keep), "ACC201") == expected


RUNNER = """
class Runner:
    def __init__(self, model, opt, crit, accum):
        self.model, self.opt, self.crit, self.accum = model, opt, crit, accum
        self.log = {{}}
        self.history = []

    def train_step(self, x, y):
        loss = self.crit(self.model(x), y) / self.accum
        loss.backward()
        {keep}
        return loss

    def fit(self, loader):
        for i, (x, y) in enumerate(loader):
            self.train_step(x, y)
            if (i + 1) % self.accum == 0:
                self.opt.step()
                self.opt.zero_grad()
"""


@pytest.mark.parametrize(("keep", "expected"), [
    ('self.log["loss"] = loss', []),
    ("self.history.append(loss)", [11]),
])
def test_what_a_trainer_method_keeps(tmp_path: Path, keep: str, expected: list[int]) -> None:
    assert codes(tmp_path, RUNNER.format(keep=keep), "ACC201") == expected


ACCELERATE_TOTAL = """
from accelerate import Accelerator


def main(model, opt, loader, crit, args):
    accelerator = Accelerator({options})
    model, opt, loader = accelerator.prepare(model, opt, loader)
    total = 0
    for x, y in loader:
        with accelerator.accumulate(model):
            loss = crit(model(x), y)
            accelerator.backward(loss)
            opt.step()
            opt.zero_grad()
        total += loss
    return total
"""


@pytest.mark.parametrize(("options", "expected"), [
    ("", []),  # Accelerate's default: one microbatch per group, no accumulation at all
    ("gradient_accumulation_steps=1", []),
    ("gradient_accumulation_steps=args.accum", [15]),
])
def test_a_running_sum_under_accelerate(tmp_path: Path, options: str, expected: list[int]) -> None:
    assert codes(tmp_path, ACCELERATE_TOTAL.format(options=options), "ACC201") == expected


# --- ACC005: a short last group rescaled to its true size ----------------------------------------

TAIL = """
import torch


def scale_grads(model, factor):
    for p in model.parameters():
        if p.grad is not None:
            p.grad.mul_(factor)


def train(model, opt, loader, crit, accum):
    for step, (x, y) in enumerate(loader):
        loss = crit(model(x), y) / accum
        loss.backward()
        if (step + 1) % accum == 0 or step + 1 == len(loader):
            pending = step % accum + 1
            {rescale}
            opt.step()
            opt.zero_grad()
"""


@pytest.mark.parametrize(("rescale", "expected"), [
    ("scale_grads(model, accum / pending)", []),
    ("[p.grad.mul_(accum / pending) for p in model.parameters()]", []),
    ("grads = [p.grad for p in model.parameters()]\n            torch._foreach_div_(grads, pending / accum)", []),
    ("scale_grads(model, pending / accum)", [15]),  # the wrong way round: r²/A²
    ("pass", [15]),  # each tail microbatch still weighs 1/A
])
def test_a_tail_rescaled_in_place(tmp_path: Path, rescale: str, expected: list[int]) -> None:
    assert codes(tmp_path, TAIL.format(rescale=rescale), "ACC005") == expected


TAIL_METHOD = """
class Trainer:
    def __init__(self, model, opt, loader, crit, accum):
        self.model, self.opt, self.loader, self.crit, self.accum = model, opt, loader, crit, accum

    def fit(self, epochs):
        for epoch in range(epochs):
            for i, (x, y) in enumerate(self.loader):
                loss = self.crit(self.model(x), y) / self.accum
                loss.backward()
                last = i + 1 == len(self.loader)
                if (i + 1) % self.accum == 0 or last:
                    {rescale}
                    self.opt.step()
                    self.opt.zero_grad()

    def true_mean(self, seen):
        for p in self.model.parameters():
            if p.grad is not None:
                p.grad *= self.accum / seen
"""


@pytest.mark.parametrize(("rescale", "expected"), [
    ("self.true_mean(i % self.accum + 1)", []),
    ("self.true_mean(self.accum)", [12]),  # A / A: no rescale at all
])
def test_a_tail_rescaled_by_a_method(tmp_path: Path, rescale: str, expected: list[int]) -> None:
    assert codes(tmp_path, TAIL_METHOD.format(rescale=rescale), "ACC005") == expected


FLUSHED_TAIL = """
def train(model, opt, loader, crit, accum, epochs):
    for epoch in range(epochs):
        for step, (x, y) in enumerate(loader):
            loss = crit(model(x), y) / accum
            loss.backward()
            if (step + 1) % accum == 0:
                opt.step()
                opt.zero_grad()
        left = len(loader) % accum
        if left:
            {rescale}
            opt.step()
            opt.zero_grad()
"""


@pytest.mark.parametrize(("rescale", "expected"), [
    ("for p in model.parameters():\n                p.grad.mul_(accum / left)", []),
    ("pass", [11]),
])
def test_a_flushed_tail_rescaled_in_place(tmp_path: Path, rescale: str, expected: list[int]) -> None:
    assert codes(tmp_path, FLUSHED_TAIL.format(rescale=rescale), "ACC005") == expected
