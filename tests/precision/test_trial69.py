"""Field trial 69 and the loops the budgets of ``check`` left open in trials 67 and 68, reduced and
written anew.

- A loop inherited by a family of trainers that differ only in how they compute the loss (each
  subclass overrides ``loss`` with arithmetic): one run of the loop stands for the family, not one
  run per subclass (the file's budget ran out after three, the rest undecided). A run as the base,
  whose ``loss`` only raises, is counted with a concrete subclass's run. A subclass whose override
  acts on the gradients, or whose class attribute the loop reads, still gets a run of its own.
- Two ``accumulate()`` blocks one after the other in a microbatch (the forward in one, the backward and
  the update in the next): the runs see the second entry count a microbatch again (ACC501); the
  reading of one ``with`` statement saw nothing wrong.
- A group drawn ahead by ``next()`` in a loop of ``range(n_in_group)`` where ``n_in_group`` is A (or
  the tail's remainder) and the outer loop runs ``ceil(len(loader) / A)`` times: the count named as
  A binds A, and the count of groups computed from it follows (it was bound as the epoch's length,
  which made groups of the whole epoch).

A loop that reaches its backward through an object of another module relaying to an object it
keeps on ``self`` (a third module's class): its family is in ``test_relays.py``.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import libcst as cst

from accumlint.model.module_functions import ModuleFunctions
from accumlint.model.simulation import Simulation, accumulation_loops, simulate
from tests.precision import test_relays as relays
from tests.support import findings, line_of, lint

_FAMILY = """
class Base:
    use_reference = True

    def __init__(self, policy, opt, loader, config):
        self.policy, self.opt, self.loader, self.config = policy, opt, loader, config

    def pair(self, batch):
        chosen, rejected = self.policy(batch)
        return chosen, rejected

    def loss(self, batch):
        raise NotImplementedError

    def train(self):
        self.opt.zero_grad()
        for i, batch in enumerate(self.loader):
            loss = self.loss(batch) / self.config.grad_accum_steps
            loss.backward()
            if (i + 1) % self.config.grad_accum_steps == 0:
                self.opt.step()
                self.opt.zero_grad()


class Sigmoid(Base):
    def loss(self, batch):
        chosen, rejected = self.pair(batch)
        return -(chosen - rejected).sigmoid().log().mean()


class Hinge(Base):
    def loss(self, batch):
        chosen, rejected = self.pair(batch)
        margin = 1.0 - (chosen - rejected)
        return margin.clamp(min=0).mean()


class Squared(Base):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)

    def loss(self, batch):
        chosen, rejected = self.pair(batch)
        return ((chosen - rejected - 0.5) ** 2).mean()
{extra}"""


def _check_runs(source: str) -> list[Simulation]:
    return simulate(ModuleFunctions(cst.parse_module(textwrap.dedent(source))), "train.py", judged_only=True)


def test_a_family_that_only_computes_its_loss_otherwise_is_one_loop() -> None:
    results = _check_runs(_FAMILY.format(extra=""))
    assert [r.entry.name for r in results] == ["Base.train", "Squared.train"]
    assert "it leaves a method abstract: the entry 'Squared.train' runs the loop" in results[0].reasons()
    assert results[1].decided, results[1].reasons()
    assert accumulation_loops(results) == [()]


def test_twelve_subclasses_stay_within_the_budget_of_one_run() -> None:
    extra = "".join(f"\n\nclass Variant{n}(Hinge):\n    def loss(self, batch):\n"
                    f"        return (self.pair(batch)[0] * {n}).relu().mean()\n" for n in range(12))
    results = _check_runs(_FAMILY.format(extra=extra))
    assert accumulation_loops(results) == [()]
    assert sum(r.statements for r in results) < 2 * max(r.statements for r in results) + 1


_RESETS_IN_LOSS = """

class Eager(Base):
    def loss(self, batch):
        self.opt.zero_grad()
        return self.pair(batch)[0].mean()
"""


def test_an_override_that_resets_the_gradients_gets_its_own_run() -> None:
    source = _FAMILY.format(extra=_RESETS_IN_LOSS)
    results = _check_runs(source)
    assert "Eager.train" in [r.entry.name for r in results]
    assert all(r.decided for r in results[1:]), [r.reasons() for r in results]
    assert ("ACC001", line_of(source, "class Eager(Base):") + 2) in lint(source)


_READS_FLAG = """

class Gated(Sigmoid):
    use_reference = False
"""


def test_a_class_attribute_the_loop_reads_makes_a_run_of_its_own() -> None:
    source = _FAMILY.replace("        return chosen, rejected\n",
                             "        if self.use_reference:\n            rejected = rejected.detach()\n"
                             "        return chosen, rejected\n")
    assert [r.entry.name for r in _check_runs(source.format(extra=_READS_FLAG))] == [
        "Base.train", "Gated.train", "Squared.train"]
    assert [r.entry.name for r in _check_runs(source.format(extra=""))] == ["Base.train", "Squared.train"]


_AHEAD = """
import math


def main(cfg, model, opt, loader, epochs):
    for epoch in range(epochs):
        it = iter(loader)
        n = len(loader)
        rest = n % cfg.gradient_accumulation_steps
        rest = rest if rest != 0 else cfg.gradient_accumulation_steps
        groups = math.ceil(n / cfg.gradient_accumulation_steps)
        g = -1
        for _ in range(groups):
            g += 1
            held = []
            n_in_group = cfg.gradient_accumulation_steps if g != groups - 1 else rest
            for _ in range(n_in_group):
                held += [next(it)]
            for batch in held:
                (model(batch).sum() / len(held)).backward()
            opt.step()
            opt.zero_grad()
"""


def test_a_group_drawn_ahead_by_a_count_named_as_a_binds_a() -> None:
    results = _check_runs(_AHEAD)
    assert len(results) == 1
    assert results[0].symbols == ("cfg.gradient_accumulation_steps",)
    assert results[0].lengths == ()
    assert results[0].decided, results[0].reasons()
    assert accumulation_loops(results) == [()]
    trace = results[0].traces[0]
    backwards = [e for e in trace.events if e.kind.name == "BACKWARD"]
    updates = [e for e in trace.events if e.kind.name == "UPDATE"]
    assert (len(backwards), len(updates)) == (2 * trace.configuration.microbatches, 4)


_TWO_BLOCKS = """
import torch
from accelerate import Accelerator


def main(model, loader, steps):
    acc = Accelerator(gradient_accumulation_steps=steps)
    opt = torch.optim.AdamW(model.parameters())
    model, opt, loader = acc.prepare(model, opt, loader)
    for x, y in loader:
        with acc.accumulate(model):
            loss = ((model(x) - y) ** 2).mean()
        with acc.accumulate(model):
            acc.backward(loss)
            opt.step()
            opt.zero_grad()
"""


def test_two_accumulate_blocks_one_after_the_other_are_acc501() -> None:
    assert lint(_TWO_BLOCKS, "ACC501") == [("ACC501", line_of(_TWO_BLOCKS, "loss = ((model(x)") + 1)]


def test_one_block_around_forward_backward_and_update_is_silent() -> None:
    one = _TWO_BLOCKS.replace("            loss = ((model(x) - y) ** 2).mean()\n        with acc.accumulate(model):\n",
                              "            loss = ((model(x) - y) ** 2).mean()\n")
    assert lint(one, "ACC501") == []


def test_the_relay_family_in_one_module_is_acc001(tmp_path: Path) -> None:
    # (across modules: tests/precision/test_relays.py)
    one = "".join(textwrap.dedent(part) for part in (relays.STEPPER, relays.RELAY, relays.SCRIPT))
    one = one.replace("from relay import Relay\n", "").replace("from stepper import Stepper\n", "")
    assert "ACC001" in [code for _, code, _ in findings(tmp_path, {"run.py": one.replace("BUILD", relays.BY_NAME)})]


_EPOCH_HELPER = """
def one_epoch(acc, model, opt, loader):
    for x, y in loader:
        with acc.accumulate(model):
            loss = ((model(x) - y) ** 2).mean()
        with acc.accumulate(model):
            acc.backward(loss)
            opt.step()
            opt.zero_grad()
"""

_EPOCH_SCRIPT = """
import torch
from accelerate import Accelerator
from loops import one_epoch

acc = Accelerator(gradient_accumulation_steps=4)
model = torch.nn.Linear(4, 1)
opt = torch.optim.AdamW(model.parameters())
loader = torch.utils.data.DataLoader(range(64), batch_size=4)
model, opt, loader = acc.prepare(model, opt, loader)
for epoch in range(3):
    one_epoch(acc, model, opt, loader)
"""


def test_two_blocks_in_a_helper_that_a_script_of_the_project_runs_are_acc501(tmp_path: Path) -> None:
    found = findings(tmp_path, {"loops.py": _EPOCH_HELPER, "train.py": _EPOCH_SCRIPT})
    assert ("loops.py", "ACC501", line_of(_EPOCH_HELPER, "loss = ((model(x)") + 1) in found


_CONFIG_DEFAULT = """
def train(cfg, vae, opt, loader, booster):
    accumulation_steps = int(cfg.get("accumulation_steps", 1))
    for epoch in range(cfg.epochs):
        for step, batch in enumerate(loader):
            booster.backward(loss=vae(batch).mean() / accumulation_steps, optimizer=opt)
            if (step + 1) % accumulation_steps == 0:
                opt.step()
                opt.zero_grad()
"""


def test_a_config_default_passed_through_int_stays_the_named_a() -> None:
    (result,) = _check_runs(_CONFIG_DEFAULT)
    assert result.symbols == ("accumulation_steps",)
    assert result.decided, result.reasons()
    assert accumulation_loops([result]) == [()]
