"""Loops that the code leaves nothing open in must not be left undecided by the simulator's
budgets (field trial 52, issue 30: "cannot decide" must come from the code, not from the model's
reach). Each shape below spent check's statement budget before: an epoch loop over tqdm's
``trange``, a ``while True`` loop that updates every pass and stops on a counter, a ``for`` over a
fixed count with a loop over the parameter groups inside, ``next(iter(loader))`` taken anew for
each microbatch, set-up and evaluation loops that perform no training event, a data branch that an
assertion rules out, a sampling loop over a second pass. Each is decided now, and each has a twin
with a bug seeded that is still reported. Loops that never end still end in a budget with its
reason."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from accumlint.model.module_functions import ModuleFunctions
from accumlint.model.simulation import NO_BACKWARD, Simulation, accumulation_loops, simulate
from accumlint.model.trace import Configuration
from accumlint.spec.vocabulary import EventKind
from tests.support import lint

#: the group's reset after its update; the bug seeded: the reset before it (the update applies zeros)
GOOD, BAD = ("pass", "opt.zero_grad()"), ("opt.zero_grad()  # the bug seeded", "pass")


def checked(code: str, judged_only: bool = True) -> list[Simulation]:
    """The entries of ``code`` as ``check`` simulates them (the largest A's whole groups, check's budget),
    or, not ``judged_only``, as ``explain`` does (every configuration, its budget)."""
    return simulate(ModuleFunctions(cst.parse_module(textwrap.dedent(code))), "train.py", judged_only=judged_only)


def seeded(template: str, resets: tuple[str, str]) -> str:
    """``template`` with the reset of its group ``{before}`` or ``{after}`` the update."""
    before, after = resets
    return textwrap.dedent(template).replace("{before}", before).replace("{after}", after)


def line_of(code: str, mark: str) -> int:
    return next(n for n, text in enumerate(code.splitlines(), 1) if mark in text)


def whole_groups(result: Simulation) -> list[tuple[int, int | None]]:
    """Where the updates of the runs with whole groups of A = 4 (N = 8) land, (epoch, microbatch): the
    same in every run of that configuration."""
    (updates,) = {tuple(t.updates_at()) for t in result.traces if t.configuration == Configuration(4, 8)}
    return list(updates)


# --- an epoch loop over tqdm's trange --------------------------------------------------------

TRANGE = """
    import argparse

    import torch
    from torch.utils.data import DataLoader
    from tqdm import trange

    parser = argparse.ArgumentParser()
    parser.add_argument("--accum", type=int, default=4)
    parser.add_argument("--epochs", type=float, default=2.0)
    parser.add_argument("--first_epoch", type=int, default=0)
    args = parser.parse_args()
    net = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    data = DataLoader(torch.randn(64, 8), batch_size=4)
    assert len(data) % args.accum == 0
    for epoch in EPOCHS:
        for i, x in enumerate(data):
            (net(x).pow(2).mean() / args.accum).backward()
            if (i + 1) % args.accum == 0:
                {before}
                opt.step()
                {after}
"""

#: the epoch loop's iterable: trange is range with a progress bar, over one argument or two
EPOCH_LOOPS = {
    "two arguments": "trange(args.first_epoch, int(args.epochs), desc='epoch')",
    "one argument": "trange(int(args.epochs))",
    "under enumerate": "enumerate(trange(args.first_epoch, int(args.epochs)))",
}


@pytest.mark.parametrize("loop", sorted(EPOCH_LOOPS))
def test_an_epoch_loop_over_trange_advances_the_microbatches_of_the_loader(loop: str) -> None:
    # trange's first argument is no data: the loader inside draws the epoch's microbatches
    (result,) = checked(seeded(TRANGE, GOOD).replace("EPOCHS", EPOCH_LOOPS[loop]))
    assert result.decided, result.reasons()
    assert whole_groups(result) == [(0, 3), (0, 7), (1, 3), (1, 7)]


@pytest.mark.parametrize("loop", sorted(EPOCH_LOOPS))
def test_a_reset_before_the_update_inside_a_trange_epoch_loop_is_reported(loop: str) -> None:
    code = seeded(TRANGE, BAD).replace("EPOCHS", EPOCH_LOOPS[loop])
    assert lint(code) == [("ACC003", line_of(code, "the bug seeded"))]
    assert lint(seeded(TRANGE, GOOD).replace("EPOCHS", EPOCH_LOOPS[loop])) == []


# --- `while True` that stops on a counter ----------------------------------------------------

#: a trainer whose base class carries an accumulation setting; ``{loop}`` is its training loop
TRAINER = """
    import argparse

    import torch


    class Base:
        def __init__(self, config):
            self.limit = config["limit"]
            self.accum = config["accum"]
            self.data = torch.randn(1000, 8)

        def sample(self):
            rows = torch.randint(len(self.data), (4,))
            return self.data[rows]


    class Trainer(Base):
        def train(self):
            net = torch.nn.Linear(8, 1)
            opt = torch.optim.AdamW(net.parameters())
            self.count = 0
            while True:
                for group in opt.param_groups:
                    group["lr"] = 1e-3
                x = self.sample()
                LOOP
                self.count += 1
                if self.count > self.limit:
                    break


    parser = argparse.ArgumentParser()
    parser.add_argument("--accum", type=int, default=4)
    Trainer({"limit": 100000, "accum": parser.parse_args().accum}).train()
"""

#: every pass a whole group of one microbatch (no accumulation, whatever the base class carries)
EVERY_PASS = """loss = net(x).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()"""
#: a group of `self.accum` passes
GATED = """(net(x).pow(2).mean() / self.accum).backward()
                if (self.count + 1) % self.accum == 0:
                    {before}
                    opt.step()
                    {after}"""


def test_a_while_true_loop_that_updates_every_pass_is_decided_and_no_accumulation_loop() -> None:
    # check does not simulate it (nothing decides when it updates); explain's runs complete
    assert accumulation_loops(checked(TRAINER.replace("LOOP", EVERY_PASS))) == []
    results = checked(TRAINER.replace("LOOP", EVERY_PASS), judged_only=False)
    assert [r.decided for r in results] == [True], [r.reasons() for r in results]
    assert accumulation_loops(results) == []
    # one microbatch per pass, as many passes as each configuration's microbatches, each updated
    for trace in results[0].traces:
        n = trace.configuration.microbatches
        assert trace.updates_at() == [(e, m) for e in (0, 1) for m in range(n)], trace.configuration


def test_a_while_true_loop_that_accumulates_is_decided_with_groups_of_a() -> None:
    (result,) = checked(seeded(TRAINER.replace("LOOP", GATED), GOOD))
    assert result.decided, result.reasons()
    assert whole_groups(result) == [(0, 3), (0, 7), (1, 3), (1, 7)]


def test_a_reset_before_the_update_in_a_while_true_loop_is_reported() -> None:
    code = seeded(TRAINER.replace("LOOP", GATED), BAD)
    assert lint(code) == [("ACC003", line_of(code, "the bug seeded"))]
    assert lint(seeded(TRAINER.replace("LOOP", GATED), GOOD)) == []


def test_a_while_loop_with_no_way_out_still_ends_in_a_budget() -> None:
    # nothing breaks out of it and its condition never changes: it runs until a budget ends it
    (result,) = checked("""
        def train(net, opt, batch, accum):
            count = 0
            while True:
                net(batch).sum().backward()
                if count % accum == 0:
                    opt.step()
                    opt.zero_grad()
    """)
    assert not result.decided
    assert any("ran past 2000 iterations" in r or "budget" in r for r in result.reasons()), result.reasons()


# --- a fixed count of passes with a loop over the parameter groups inside ----------------------

FIXED_COUNT = """
    import torch

    accum = 4
    net = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    data = torch.randn(1000, 8)
    for it in range(100000):
        for group in opt.param_groups:
            group["lr"] = 0.1 / (1 + it)
        x = data[torch.randint(1000, (4,))]
        (net(x).sum() / accum).backward()
        if (it + 1) % accum == 0:
            {before}
            opt.step()
            {after}
"""


def test_a_fixed_count_of_passes_with_a_loop_over_the_parameter_groups_counts_microbatches() -> None:
    (result,) = checked(seeded(FIXED_COUNT, GOOD))
    assert result.decided, result.reasons()
    (trace,) = result.traces
    assert trace.updates_at() == [(0, 3), (0, 7), (1, 3), (1, 7)]


def test_a_reset_before_the_update_over_a_fixed_count_is_reported() -> None:
    code = seeded(FIXED_COUNT, BAD)
    assert lint(code) == [("ACC003", line_of(code, "the bug seeded"))]


def test_passes_whose_inner_loop_steps_each_optimizer_stay_uncounted() -> None:
    # a warm-up that alternates between updating the first optimizer and all of them: its inner loop
    # performs training events, so its passes are not taken for microbatches (the roles of what the
    # inner loop steps are not known well enough to judge groups: it stays silent)
    code = """
        def warm(a, b, c, times=6):
            for k in range(times):
                a(c).sum().backward()
                if k % 2 == 0:
                    b[0].step()
                    b[0].zero_grad()
                else:
                    for d in b:
                        d.step()
                    a.zero_grad()
    """
    (result,) = checked(code, judged_only=False)
    assert "no run drew a microbatch" in result.reasons()
    assert lint(code) == []


# --- next(iter(loader)) taken anew for each microbatch ---------------------------------------

FRESH_ITERATOR = """
    import torch
    from torch.utils.data import DataLoader


    class Trainer:
        def __init__(self, accum):
            self.accum = accum
            self.loader = DataLoader(torch.randn(64, 8), batch_size=4, shuffle=True)

        def batch(self):
            return next(iter(self.loader))

        def train(self, net, opt):
            first = self.batch()
            step = 0
            while True:
                x = self.batch()
                (net(x).sum() / self.accum).backward()
                if (step + 1) % self.accum == 0:
                    {before}
                    opt.step()
                    {after}
                step += 1
                if step > 100000:
                    break
"""


def test_a_new_iterator_for_each_microbatch_gives_the_epochs_next_microbatch() -> None:
    # the look at one batch before the loop is no microbatch; each call after it is the next one
    (result,) = checked(seeded(FRESH_ITERATOR, GOOD))
    assert result.decided, result.reasons()
    assert whole_groups(result) == [(0, 3), (0, 7), (1, 3), (1, 7)]
    (trace,) = [t for t in result.traces if t.configuration == Configuration(4, 8)]
    assert sum(e.kind is EventKind.BACKWARD for e in trace.events) == 16


def test_a_reset_before_the_update_with_a_new_iterator_for_each_microbatch_is_reported() -> None:
    # each group draws from a pass restarted at its first item (ACC009, at the `iter` that restarts it)
    # whichever the reset's place; the reset before the update is reported beside it
    code = seeded(FRESH_ITERATOR, BAD)
    restart = line_of(code, "next(iter(self.loader))")
    assert lint(code) == [("ACC009", restart), ("ACC003", line_of(code, "the bug seeded"))]
    assert lint(seeded(FRESH_ITERATOR, GOOD)) == [("ACC009", restart)]


# --- set-up and evaluation that perform no training event ------------------------------------

SET_UP = """
    import argparse

    import torch
    from torch.utils.data import DataLoader

    parser = argparse.ArgumentParser()
    parser.add_argument("--accum", type=int, default=4)
    args = parser.parse_args()

    while True:  # a prompt that repeats until the answer is one it knows
        answer = input("train? ")
        if answer in ("y", "n"):
            break
    names = []
    for i in range(5000):  # a table built over concrete values
        names.append("<token_" + str(i) + ">")
    for repeat in range(100):  # timing a function passed in
        time_it = lambda: sum(range(10))
        time_it()


    @torch.no_grad()
    def evaluate(net, data):
        total = 0.0
        for k in range(200):
            total += net(data[k]).sum().item()
        return total


    net = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    data = torch.randn(200, 8)
    loader = DataLoader(torch.randn(64, 8), batch_size=4)
    assert len(loader) % args.accum == 0
    for epoch in range(2):
        evaluate(net, data)
        for i, x in enumerate(loader):
            (net(x).sum() / args.accum).backward()
            if (i + 1) % args.accum == 0:
                {before}
                opt.step()
                {after}
"""


def test_set_up_and_evaluation_without_training_events_leave_checks_budget_to_the_loop() -> None:
    (result,) = checked(seeded(SET_UP, GOOD))
    assert result.decided, result.reasons()
    assert whole_groups(result) == [(0, 3), (0, 7), (1, 3), (1, 7)]
    # the loops that were not stepped say so (the prompt's, the table's, the timing's, the evaluation's)
    notes = {note for t in result.traces for note in t.notes if "performs no training event" in note}
    assert {note.split("`")[1].split()[0] for note in notes} == {"while", "for"}, notes
    assert len(notes) == 4, notes


def test_a_reset_before_the_update_after_a_long_set_up_is_reported() -> None:
    code = seeded(SET_UP, BAD)
    assert lint(code) == [("ACC003", line_of(code, "the bug seeded"))]
    assert lint(seeded(SET_UP, GOOD)) == []


REPEATED = """
    import torch

    def repeat(fn, times):
        for _ in range(times):
            fn()

    DECORATOR
    def probe():
        return net(x).sum()  # (the microbatch the loop drew)

    net = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for x in loader:
        repeat(probe, 50)
        net(x).sum().backward()
        opt.step()
        opt.zero_grad()
"""


@pytest.mark.parametrize(("decorator", "probes"), [("", 50), ("@torch.no_grad()", 0)])
def test_a_long_loop_is_summarised_only_where_its_first_pass_records_no_event(decorator: str, probes: int) -> None:
    # no event is written in `repeat`'s loop: the function it is handed decides. A forward with
    # gradients on is an event (the loop is stepped, 50 forwards); under `no_grad` the first pass's
    # forward is all there is, the rest of the loop is summarised, and the trace leaves it out (no
    # graph: no part of a group)
    (result,) = checked(REPEATED.replace("DECORATOR", decorator), judged_only=False)
    assert result.decided, result.reasons()
    trace = result.traces[0]
    first_microbatch = [e for e in trace.events if (e.epoch, e.microbatch) == (0, 0)]
    assert [e.kind for e in first_microbatch].count(EventKind.FORWARD) == probes + 1
    summarised = any("performs no training event" in note for note in trace.notes)
    assert summarised is (probes == 0)


# --- a data branch that an assertion rules out ---------------------------------------------

ASSERTED = """
    import argparse

    import torch


    class Item:
        def __init__(self, x, scale=None):
            self.x = x
            self.scale = scale


    def gather(rows):
        return Item(torch.stack(rows))


    def epoch(net, opt, loader, accum, training=True):
        assert len(loader) % accum == 0
        for i, item in enumerate(loader):
            with torch.set_grad_enabled(training):
                loss = net(item.x).pow(2).mean()
                if training:
                    (loss / accum).backward()
            if i % accum == accum - 1:
                if item.scale is not None:
                    ASSERT
                    for p in net.parameters():
                        p.grad = p.grad * item.scale
                if training:
                    {before}
                    opt.step()
                    {after}


    parser = argparse.ArgumentParser()
    parser.add_argument("--accum", type=int, default=4)
    args = parser.parse_args()
    net = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    loader = torch.utils.data.DataLoader(torch.randn(64, 8), batch_size=4, collate_fn=gather)
    for _ in range(2):
        epoch(net, opt, loader, args.accum)
        epoch(net, opt, loader, args.accum, training=False)
"""


def test_a_data_branch_that_asserts_a_equals_one_is_not_taken_when_a_exceeds_one() -> None:
    code = seeded(ASSERTED, GOOD).replace("ASSERT", "assert accum == 1, 'rescaling needs no accumulation'")
    results = checked(code)
    assert [r.decided for r in results] == [True], [r.reasons() for r in results]
    # (each of the run's two epochs is one call: the training call's, then the evaluation call's)
    assert whole_groups(results[0]) == [(0, 3), (0, 7)]
    assert lint(code) == []


def test_a_data_branch_without_the_assertion_stays_open() -> None:
    # nothing rules the rescaling out: whether a microbatch carries a scale is the data's, left open
    code = seeded(ASSERTED, GOOD).replace("ASSERT", "pass")
    (result,) = checked(code)
    assert not result.decided
    assert any("on the microbatch's data decides an event" in r for r in result.reasons()), result.reasons()


def test_a_reset_before_the_update_beside_an_asserted_branch_is_reported() -> None:
    code = seeded(ASSERTED, BAD).replace("ASSERT", "assert accum == 1")
    assert lint(code) == [("ACC003", line_of(code, "the bug seeded"))]


# --- a sampling loop that trains nothing ---------------------------------------------------

def test_a_sampling_loop_over_a_second_pass_ends_and_trains_nothing() -> None:
    # the steps of each prompt are a second pass over data the run does not know; no backward is
    # written anywhere: the entry trains nothing, whatever its `scheduler.step(...)` looked like
    results = checked("""
        import torch

        def sample(model, scheduler, prompts, steps):
            images = []
            for prompt in prompts:
                latent = torch.randn(1, 4)
                for t in scheduler.timesteps:
                    with torch.no_grad():
                        noise = model(latent, t, prompt)
                    latent = scheduler.step(noise, t, latent)
                images.append(latent)
            return images
    """)
    # (a noise scheduler's `step(noise, t, latent)` is no update by its shape: with neither a backward
    # nor an update, the loop is no entry at all)
    assert [r.undecided for r in results] == []
    assert accumulation_loops(results) == []
    # an update-like step of one argument keeps the entry: it trains nothing
    results = checked("""
        import torch

        def sample(model, scheduler, prompts):
            for prompt in prompts:
                latent = model(torch.randn(1, 4), prompt)
                scheduler.step(latent)
    """)
    assert [r.undecided for r in results] == [[NO_BACKWARD]]
