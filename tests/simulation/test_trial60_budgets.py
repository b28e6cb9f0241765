"""Loops of trials 56–58 that ``check`` left to its statement budget though the code leaves
nothing open (issue 30: "cannot decide" must come from the code, not from the model's reach):

- a hyperparameter search that clamps the settings in a loop too long to step (its effect is
  summarised), then trains on a copy of them: what that loop writes was taken for per-microbatch
  data, so the loader built from the settings was a microbatch's parts in the second epoch, and
  the run trained on them until the budget ended it. Before the first microbatch, nothing varies
  with one: the loop's writes are run-level unknowns;
- a script's body with no loop of its own whose runs are left open (here: an assertion that no
  configuration meets), beside the loop in the function it calls, decided as an entry of its own:
  the body counted as a second, undecided, accumulation loop;
- a ``while True:`` retry loop around one microbatch's forward, left by ``break`` once the loss is
  good: the data condition's way out is the main path (it took the repeating branch, and spent the
  run's budget);
- ``self.encoder.train()`` in an evaluation called under the update gate, resolved to the trainer's
  own ``train(self, loader, ...)``, which its arguments cannot bind: the gate was read as starting
  a training phase of its own;
- an optimizer's module that tries the optimizer in a function its ``__main__`` guard calls (an
  epoch loop around a loop that updates on every pass; the construction asserts what the try
  does not give): nothing decides when the optimizer updates, yet the guard, the epoch loop and
  the optimizer's own ``step`` were read as gates, and the runs' assertion left three
  "accumulation loops" undecided;
- an RL driver whose period (``time % update_every == 0``) starts a training phase, ``learn()``,
  a loop of its own: the driver's only open fact is that it gates phases, and the phase is
  decided as its own entry (counted there, or no accumulation loop at all where nothing in it
  decides when the optimizer updates); the driver counted as an undecided loop.
"""

from __future__ import annotations

import textwrap

import libcst as cst

from accumlint.model.module_functions import ModuleFunctions
from accumlint.model.simulation import Simulation, accumulation_loops, simulate
from accumlint.model.trace import Configuration
from tests.support import check

SEARCH = """
import torch

from datasets import build_data


def train(hyp, opt):
    model = build(opt)
    optimizer = torch.optim.SGD(model.parameters(), lr=hyp["lr"])
    loader, dataset = build_data(opt.data, hyp)
    accumulate = max(round(64 / hyp["batch"]), 1)
    for epoch in range(opt.epochs):
        for i, (x, y) in enumerate(loader):
            (model(x, y) / accumulate).backward()
            if (i + 1) % accumulate == 0:
                optimizer.step()
                optimizer.zero_grad()
        {flush}
    return 0.5


if __name__ == "__main__":
    opt = parse()
    hyp = load(opt.hyp)
    limits = {gains}
    if not opt.evolve:
        train(hyp, opt)
    else:
        for _ in range(300):
            for k, v in limits.items():
                hyp[k] = min(max(hyp[k], v[0]), v[1])
            results = train(hyp.copy(), opt)
"""

#: the settings SEARCH clamps: more than a loop is stepped over (its effect is summarised)
GAINS = tuple(f"gain_{k}" for k in range(20))

#: the line of the gate in SEARCH
GATE_LINE = 15


def _search(flush: str) -> str:
    return SEARCH.format(flush=flush, gains=repr(dict.fromkeys(GAINS, (0.0, 1.0))))


def simulated(code: str, judged_only: bool = False) -> list[Simulation]:
    return simulate(ModuleFunctions(cst.parse_module(textwrap.dedent(code))), "train.py", judged_only=judged_only)


def test_a_search_that_clamps_its_settings_trains_two_epochs_of_groups() -> None:
    (body,) = [r for r in simulated(_search("pass")) if r.entry.kind == "module"]
    assert body.decided
    searched = [t for t in body.traces if t.configuration == Configuration(4, 8) and dict(t.choices).get("opt.evolve")]
    assert searched and all(t.updates_at() == [(0, 3), (0, 7), (1, 3), (1, 7)] for t in searched)


def test_a_search_that_clamps_its_settings_leaks_its_tail() -> None:
    (found,) = check(_search("pass"), "ACC005").findings
    assert found.line == GATE_LINE and "not applied in that epoch" in found.message


def test_a_search_that_flushes_its_tail_weighs_it_r_over_a() -> None:
    (found,) = check(_search("optimizer.step()\n        optimizer.zero_grad()"), "ACC005").findings
    assert "weighs r/A" in found.message


# --- a script's body that only calls the loop ------------------------------------------------

CALLER = """
import torch


def train(net, loader, accum):
    opt = torch.optim.AdamW(net.parameters())
    for i, (x, y) in enumerate(loader):
        loss = net(x, y) / accum
        loss.backward()
        {skip}
        if (i + 1) % accum == 0:
            opt.step()
            opt.zero_grad()


cfg = parse_config()
assert cfg.accum % 3 == 0, "the accumulation steps must be a multiple of 3"
train(build_net(cfg), build_loader(cfg), cfg.accum)
"""


def test_a_body_that_only_calls_a_decided_loop_is_no_loop_of_its_own() -> None:
    results = simulated(CALLER.format(skip="pass"), judged_only=True)
    body = next(r for r in results if r.entry.kind == "module")
    assert not body.decided and body.apart == "`train`"
    assert accumulation_loops(results) == [()]


def test_a_body_that_calls_an_undecided_loop_is_counted_with_it() -> None:
    skip = "if loss.item() > 10.0:\n            opt.zero_grad()"
    results = simulated(CALLER.format(skip=skip), judged_only=True)
    body = next(r for r in results if r.entry.kind == "module")
    assert body.apart == ""
    assert len(accumulation_loops(results)) == 2 and all(accumulation_loops(results))


# --- a retry loop around one microbatch's forward --------------------------------------------

RETRY = """
import torch


def fit(net, opt, loader, cfg, moving):
    for i, (x, y) in enumerate(loader):
        repeats = 0
        while True:
            loss = net(x, y)
            if cfg.max_repeats == 0:
                break
            if loss.item() > moving.average():
                repeats += 1
                if repeats > cfg.max_repeats:
                    break
                loss.backward()
                opt.step()
                opt.zero_grad()
            else:
                break
        (loss / cfg.accum).backward()
        if (i + 1) % cfg.accum == 0:
            opt.step()
            opt.zero_grad()
"""


def test_a_retry_loop_left_by_break_takes_its_way_out() -> None:
    results = simulated(RETRY, judged_only=True)
    assert accumulation_loops(results) == [()]
    (loop,) = results
    assert all(t.updates_at() == [(0, 3), (0, 7), (1, 3), (1, 7)]
               for t in loop.traces if t.configuration == Configuration(4, 8))


# --- a module's mode switch named like the trainer's method ----------------------------------

MODE_SWITCH = """
import torch


class Encoder(torch.nn.Module):
    def forward(self, x, y=None):
        return x.sum()


class Retriever:
    def __init__(self, cfg):
        self.encoder = Encoder()
        self.cfg = cfg

    def evaluate(self, data):
        self.encoder.eval()
        score = sum(float(self.encoder(x)) for x in data)
        self.encoder.train()
        return score

    def train(self, loader, held_out):
        opt = torch.optim.AdamW(self.encoder.parameters())
        for i, (x, y) in enumerate(loader):
            (self.encoder(x, y) / self.cfg.accum).backward()
            if (i + 1) % self.cfg.accum == 0:
                opt.step()
                opt.zero_grad()
                if self.cfg.eval_every and i % self.cfg.eval_every == 0:
                    self.evaluate(held_out)
"""


def test_a_mode_switch_in_the_evaluation_is_no_training_phase() -> None:
    results = simulated(MODE_SWITCH, judged_only=True)
    assert accumulation_loops(results) == [()]


# --- an optimizer's module with its own test run ---------------------------------------------

OPTIMIZER_MODULE = """
import torch


class Clipped(torch.optim.Optimizer):
    def __init__(self, params, lr=0.1, names=None):
        assert names is not None, "give the parameters' names"
        super().__init__(params, dict(lr=lr))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(p.grad.clamp(-1, 1), alpha=-group["lr"])


def _try_it():
    net = torch.nn.Linear(4, 4)
    opt = Clipped(net.parameters())
    for epoch in range(10):
        for step in range(20):
            net(torch.randn(8, 4)).square().sum().backward()
            opt.step()
            opt.zero_grad()


if __name__ == "__main__":
    _try_it()
"""


def test_an_optimizers_own_test_run_is_no_accumulation_loop() -> None:
    assert accumulation_loops(simulated(OPTIMIZER_MODULE, judged_only=True)) == []


# --- an RL driver whose period starts a training phase ---------------------------------------

RL_DRIVER = """
import torch


class Trainer:
    def __init__(self, policy, cfg):
        self.policy = policy
        self.cfg = cfg
        self.opt = torch.optim.Adam(policy.parameters())

    def learn(self, memories):
        for i, (states, rewards) in enumerate(memories):
            loss = self.policy(states, rewards){divided}
            loss.backward()
            {update}

    def train(self, env, episodes, update_every):
        memories, time = [], 0
        for _ in range(episodes):
            memories.append(env.rollout(self.policy))
            time += 1
            if time % update_every == 0:
                self.learn(memories)
                memories.clear()
"""

GROUPED = ("if (i + 1) % self.cfg.accum == 0:\n                self.opt.step()\n                self.opt.zero_grad()",
           " / self.cfg.accum")
EACH = ("self.opt.step()\n            self.opt.zero_grad()", "")


def test_a_driver_whose_period_starts_a_training_phase_counts_the_phase_alone() -> None:
    update, divided = GROUPED
    results = simulated(RL_DRIVER.format(update=update, divided=divided), judged_only=True)
    driver = next(r for r in results if r.entry.name == "Trainer.train")
    assert driver.apart == "`Trainer.learn`"
    assert accumulation_loops(results) == [()]


def test_a_driver_of_phases_that_never_accumulate_is_no_accumulation_loop() -> None:
    update, divided = EACH
    assert accumulation_loops(simulated(RL_DRIVER.format(update=update, divided=divided), judged_only=True)) == []
