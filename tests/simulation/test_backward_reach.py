"""Entries whose simulated runs never reached the backward the code writes (field trial 54: "no
run reached a backward", the second-largest undecided reason). Each shape below, reduced from real
trainers in our own words, was undecided with that reason; each is now decided, or says the
reason that is really left, or is no accumulation loop at all:

- a run-level choice met first in the set-up (``if scaled_step is None: optimizer.zero_grad()``)
  whose later test picks the only branch that trains: check's few runs spent themselves on the
  later flags and never took the training side;
- a helper that only steps the optimizer (after gradients made elsewhere, or written by hand): it
  draws no microbatch and runs no forward, so it is no accumulation loop;
- a group's microbatches fetched ``range(chunks)`` at a time into a list, with ``chunks`` open: the
  run cannot count them (an assertion on the list's length used to rule out the plain path, and the
  run that was left had lost its draws)."""

from __future__ import annotations

import textwrap

import libcst as cst

from accumlint.model.module_functions import ModuleFunctions
from accumlint.model.simulation import NO_TRAINING, Simulation, accumulation_loops, simulate
from tests.support import lint

NO_REACH = "no run reached a backward"


def checked(code: str) -> list[Simulation]:
    """The entries of ``code`` as ``check`` simulates them (its runs and budgets)."""
    return simulate(ModuleFunctions(cst.parse_module(textwrap.dedent(code))), "train.py", judged_only=True)


# --- a choice met first in the set-up: its training side first ---------------------------------

#: the plain path trains when no scaled step is passed; ``{reset}`` is where the group's reset goes
#: (after the update: right; before it, between the backwards and the update: ACC003). Three flags
#: met after the choice take check's three runs unless the choice takes its training side first
SET_UP_CHOICE = """
    import torch


    def train_one_epoch(model, loader, optimizer, scaled_step, scheduler, accum, max_norm, mixup, bf16, contiguous):
        if scaled_step is None:
            optimizer.zero_grad()
        for i, (x, y) in enumerate(loader):
            if mixup is not None:
                x, y = mixup(x, y)
            if contiguous:
                x = x.contiguous(memory_format=torch.channels_last)
            if bf16:
                x = x.bfloat16()
            loss = torch.nn.functional.cross_entropy(model(x), y) / accum
            if scaled_step is None:
                loss.backward()
                if (i + 1) % accum == 0:
                    {early}
                    if max_norm:
                        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
                    optimizer.step()
                    if scheduler is not None:
                        scheduler.step()
                    {late}
            else:
                scaled_step(loss, optimizer, update=(i + 1) % accum == 0)
"""
GOOD_SET_UP = SET_UP_CHOICE.format(early="pass", late="optimizer.zero_grad()")
BAD_SET_UP = SET_UP_CHOICE.format(early="optimizer.zero_grad()  # the bug: the update applies nothing", late="pass")


def test_a_choice_met_in_the_set_up_takes_its_training_side_first():
    (result,) = checked(GOOD_SET_UP)
    assert result.decided, result.reasons()
    assert all(dict(t.choices)["scaled_step is None"] for t in result.traces)
    assert accumulation_loops([result]) == [()]


def test_the_training_side_taken_first_finds_the_reset_before_the_update():
    assert lint(GOOD_SET_UP, "ALL") == []
    line = next(i for i, text in enumerate(textwrap.dedent(BAD_SET_UP).splitlines(), 1) if "the bug" in text)
    assert lint(BAD_SET_UP, "ALL") == [("ACC003", line)]


def test_a_choice_whose_tests_all_train_on_both_sides_keeps_the_written_first_value():
    # both branches of the later test write a backward: no side is the training one, `False` first
    both = GOOD_SET_UP.replace("scaled_step(loss, optimizer, update=(i + 1) % accum == 0)",
                               "(loss * 2).backward()")
    (result,) = checked(both)
    assert dict(result.traces[0].choices)["scaled_step is None"] is False


# --- an update without data is no accumulation loop -----------------------------------------------

ENGINE = """
    import torch


    class Engine:
        def __init__(self, model, optimizer):
            self.model = model
            self.optimizer = optimizer

        def accumulate(self, batches):
            for x, y in batches:
                loss = self.model(x, y) / len(batches)
                loss.backward()

        def step_optimizer(self, grad_norm):
            if torch.isnan(grad_norm) or torch.isinf(grad_norm):
                self.optimizer.zero_grad()
            else:
                self.optimizer.step()
                self.optimizer.zero_grad()
            return grad_norm
"""


def test_a_helper_that_only_steps_the_optimizer_is_no_accumulation_loop():
    results = {r.entry.name: r for r in checked(ENGINE)}
    assert results["Engine.step_optimizer"].undecided == [NO_TRAINING]
    assert accumulation_loops(list(results.values())) == []
    assert lint(ENGINE, "ALL") == []


def test_a_framework_engine_that_runs_the_backward_itself_stays_an_undecided_loop():
    # `train_batch` draws and trains inside DeepSpeed: the code shows no data, yet it is a training loop
    results = checked("""
        def train(engine, loader, steps):
            for _ in range(steps):
                engine.train_batch(loader)
                engine.step()
    """)
    assert [any(NO_REACH in reason for reason in r.reasons()) for r in results] == [True]
    assert len(accumulation_loops(results)) == 1


# --- microbatches fetched an open number at a time ------------------------------------------------

FETCHED = """
    import torch


    class Trainer:
        def __init__(self, model, loader, accum):
            self.model = model
            self.loader = loader
            self.accum = accum
            self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

        def micro(self, batch):
            loss = self.model(batch).mean() / self.accum
            loss.backward()

        def train_step(self, it):
            self.optimizer.zero_grad()
            groups = []
            for _ in range(self.accum):
                held = []
                for _ in range(self.chunks):
                    held.append(next(it))
                groups.append(held)
            for held in groups:
                if self.pipelined:
                    self.schedule.run(held)
                else:
                    assert len(held) == 1
                    self.micro(held[0])
            self.optimizer.step()

        def train(self, steps):
            it = iter(self.loader)
            for _ in range(steps):
                self.train_step(it)
"""


def test_a_group_fetched_an_open_number_at_a_time_says_so():
    results = checked(FETCHED)
    reasons = {reason for r in results for reason in r.reasons()}
    assert "the loop over `range(self.chunks)` keeps an unknown number of items it draws: the simulation " \
           "cannot count the microbatches it takes" in reasons
    assert not any(r.decided for r in results if r.entry.name == "Trainer.train")


def test_the_plain_path_is_no_longer_ruled_out_by_the_length_of_the_open_fetch():
    # the assertion on `len(held)` reads a length the run does not know: the plain path's backward runs
    results = simulate(ModuleFunctions(cst.parse_module(textwrap.dedent(FETCHED))), "train.py")
    (train,) = [r for r in results if r.entry.name == "Trainer.train"]
    plain = [t for t in train.traces if not dict(t.choices).get("self.pipelined", False)]
    assert plain and all(any(e.kind.name == "BACKWARD" for e in t.events) for t in plain)


def test_a_fetch_of_a_known_count_stays_decided():
    known = FETCHED.replace("range(self.chunks)", "range(1)")
    results = {r.entry.name: r for r in checked(known)}
    assert results["Trainer.train"].decided, results["Trainer.train"].reasons()
