"""Each rule's gate (decided from the bytes and the names of a file's code, before LibCST)
never excludes a file the rule fires on.

The rules run ungated on every file with findings we have: the catalogue's examples, the
bundled examples, the reduced real bug reports (``../shared/cases``) and the corpus of real
training loops (``../shared/corpus``); wherever a rule yields a hit, it must apply.
"""

from __future__ import annotations

import ast
import csv
from collections import Counter
from pathlib import Path

import libcst as cst
import pytest

from accumlint.checks import ALL_RULES
from accumlint.model import build_model
from accumlint.pipeline import engine
from accumlint.pipeline.engine import ALL_RULES_INSTANCES, check_source, rules_for
from accumlint.source.source_facts import source_facts
from tests.precision.test_corpus import corpus_root
from tests.shared_data import REPO, needs_shared, require_shared


def unapplied_hits(paths: list[Path]) -> tuple[list[str], Counter[str]]:
    """Every (file, rule) where the rule yields a hit but does not apply or its byte test drops
    the file, and the hits per code."""
    wrong: list[str] = []
    hits: Counter[str] = Counter()
    for path in paths:
        data = path.read_bytes()
        text = engine.decode_source(data)
        model = build_model(cst.parse_module(text))
        facts = source_facts(ast.parse(text), data)
        for rule in ALL_RULES_INSTANCES:
            found = len(list(rule.check(model)))
            hits[rule.code] += found
            if found and not rule.gate.admits(facts):
                wrong.append(f"{path}: {rule.code} fires but its gate drops the file")
            if found and not engine.may_fire(data, [rule]):
                wrong.append(f"{path}: {rule.code} fires but the byte prefilter drops the file")
    return wrong, hits


def test_on_the_catalogue_and_the_examples() -> None:
    paths = sorted([*REPO.glob("rules/ACC*/*.py"), *REPO.glob("examples/*.py")])
    wrong, hits = unapplied_hits(paths)
    assert wrong == []
    # every rule of the catalogue fires somewhere in it, so every gate was tried on a hit
    assert {code for code, count in hits.items() if count} == {rule.code for rule in ALL_RULES}


@needs_shared
def test_on_the_real_bug_reports() -> None:
    paths = sorted(require_shared("cases").glob("*.py"))
    wrong, hits = unapplied_hits(paths)
    assert wrong == []
    assert sum(hits.values()) >= 20


def corpus_loop_files() -> list[Path]:
    """The labelled loop files of ``../shared/corpus`` (fetched once); skips the test where
    ``../shared`` is absent or the corpus cannot be downloaded."""
    manifest = require_shared("corpus", "manifest.tsv")
    root = corpus_root()
    if root is None:
        pytest.skip("the corpus could not be downloaded (no package index reachable)")
    with manifest.open(newline="") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    return sorted({root / f"{r['package']}-{r['version']}-{r['archive_kind']}" / r["path"] for r in rows})


@needs_shared
def test_on_the_corpus_of_real_training_loops() -> None:
    paths = corpus_loop_files()
    wrong, hits = unapplied_hits(paths)
    assert wrong == []
    assert len(paths) >= 40 and sum(hits.values()) >= 10


def applies(code: str, source: str) -> bool:
    (rule,) = rules_for([code])
    return rule.gate.admits(source_facts(ast.parse(source), source.encode()))


LIGHTNING = "import lightning as L\nclass M(L.LightningModule):\n    def training_step(self, batch, i):\n{body}"


@pytest.mark.parametrize(
    ("code", "source", "expected"),
    [
        ("ACC001", "for b in loader:\n    loss.backward()\n", True),
        ("ACC001", "for b in loader:\n    torch.autograd.backward(loss)\n", True),
        ("ACC001", "torch.autograd.backward(loss)\n", False),  # no loop: no group
        ("ACC001", "def test_grad():\n    loss.backward()\n    assert x.grad is not None\n"
                   "for case in cases:\n    print(case)\n", False),  # the loop reaches no backward
        # a loop reaches the backward through a module function, a method, a bound name, a parameter
        ("ACC001", "def step(b):\n    loss.backward()\nfor b in loader:\n    step(b)\n", True),
        ("ACC001", "class T:\n    def train_step(self, b):\n        self.loss.backward()\n"
                   "    def fit(self):\n        for b in self.loader:\n            self.train_step(b)\n", True),
        ("ACC001", "f = functools.partial(loss.backward)\nfor b in loader:\n    f()\n", True),
        ("ACC001", "def run(fn):\n    for b in loader:\n        fn(b)\ndef train(b):\n    loss.backward()\n"
                   "run(train)\n", True),
        # a function handed to another module's function, which may loop over it (a project helper)
        ("ACC001", "from utils import run_loop\ndef step(b):\n    loss.backward()\nrun_loop(loader, step)\n", True),
        ("ACC001", "class Step:\n    def __call__(self, b):\n        loss.backward()\nfor b in loader:\n    s(b)\n",
         True),
        # forward-only loop: the losses kept in the loop, one backward after it
        ("ACC201", "def f():\n    for b in loader:\n        losses.append(model(b))\n    sum(losses).backward()\n",
         True),
        ("ACC404", "tokens = micro_bs * grad_accum * torch.cuda.device_count()\n", True),
        ("ACC404", "accum_dtype = torch.float32\nn = len(x)\n", False),  # an A-like name, no count read
        ("ACC404", "n = world_size\nout = accumulated_log_probs + n\n", False),  # no A in a product
        ("ACC006", "from transformers import Trainer\nclass T(Trainer):\n    def training_step(self, m, i):\n"
                   "        if self.state.global_step % 4 == 0:\n            pass\n", True),
        ("ACC006", "from lightning import Trainer\nclass M:\n    def training_step(self, b):\n        pass\n",
         False),  # no HF Trainer, no update counter
        ("ACC005", "trainer = Trainer(accumulate_grad_batches=8, limit_train_batches=4)\n", True),
        ("ACC005", "trainer = Trainer(max_epochs=1)\n", False),
        ("ACC001", "loader = DataLoader(ds)\nopt.zero_grad()\n", False),
        ("ACC403", "loader = DataLoader(ds)\nmodel = DDP(model)\n", False),  # no loop that runs a backward
        ("ACC404", "global_batch_size = m * torch.cuda.device_count()\n", True),
        ("ACC404", "cfg.gradient_accumulation_steps = 4\nn = torch.cuda.device_count()\n", True),
        ("ACC404", "cfg.gradient_accumulation_steps = 4\n", False),  # no GPU count or world size read
        ("ACC404", "n_gpu = torch.cuda.device_count()\nmodel = DDP(model)\nloss.backward()\n", False),
        ("ACC306", "scheduler.step()\n", True),
        ("ACC306", "engine, opt, _, sched = deepspeed.initialize(model=m, lr_scheduler=s)\n", False),
        ("ACC302", "clip_grad_norm_(params, 1.0)\nscaler.step(opt)\n", True),
        ("ACC302", "clip_grad_norm_(params, 1.0)\n", False),
        ("ACC301", "for b in loader:\n    clip_grad_norm_(params, 1.0)\n    loss.backward()\n", True),
        ("ACC301", "clip_grad_norm_(params, 1.0)\nloss.backward()\n", False),  # no group to clip in
        ("ACC301", LIGHTNING.format(body="        clip_grad_norm_(self.parameters(), 1.0)\n"), True),
        ("ACC301", "class M:\n    def training_step(self, b):\n        clip_grad_norm_(p, 1.0)\n", False),
        ("ACC101", LIGHTNING.format(body="        return loss / self.accum\n"), True),
        ("ACC101", "class M:\n    def training_step(self, b):\n        return loss / accum\n", False),
        ("ACC105", "from transformers import Trainer\nclass T(Trainer):\n    def compute_loss(self, m, i):\n"
                   "        pass\n", True),
        ("ACC105", "class Model:\n    def compute_loss(self, logits, labels):\n        pass\n", False),
    ],
)
def test_what_each_gate_needs(code: str, source: str, expected: bool) -> None:
    assert applies(code, source) is expected


def test_the_names_of_the_code() -> None:
    facts = source_facts(ast.parse(
        "import torch.distributed as dist\nfrom transformers import Trainer as T\n"
        "class F(torch.autograd.Function):\n    @staticmethod\n    def backward(ctx, g):\n        return g\n"
        "def training_step(self, batch):\n    '''then loss.backward()'''\n"
        "for (a, *rest) in pairs:\n    pass\n"
        "with open(p) as self.handle:\n    pass\n"
        "if (n := len(x)):\n    run(accum=n)\n"
    ))
    assert facts.defined == {"training_step"}  # an autograd Function's backward(ctx) is no hook
    assert facts.called == {"open", "len", "run"}  # the docstring's backward is prose
    assert {"a", "rest", "handle", "n"} <= facts.bound
    assert {"torch", "distributed", "dist", "transformers", "Trainer", "T", "accum", "batch", "F"} <= facts.mentioned


def test_a_file_no_rule_applies_to_is_never_given_to_libcst(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(text: str) -> cst.Module:
        raise AssertionError("LibCST parsed a file that no selected rule applies to")

    monkeypatch.setattr(engine, "parse_module", refuse)
    # device_count (ACC404's marker) and "accum" pass the byte prefilter, but nothing is named like A
    source = b"import torch\nn_gpu = torch.cuda.device_count()  # for gradient accumulation, see below\n"
    assert may_pass_bytes(source)
    assert check_source("utils.py", source).findings == []


def may_pass_bytes(source: bytes) -> bool:
    return engine.may_fire(source, ALL_RULES_INSTANCES)


def test_a_file_without_code_at_all_still_gets_acc000() -> None:
    source = b"accum = torch.cuda.device_count(\n"
    assert [f.code for f in check_source("broken.py", source).findings] == ["ACC000"]

