"""``check --statistics`` and ``explain`` agree on loops that check's statement budget leaves
undecided (issue 30): ``check`` gives an entry point 15,000 statements, ``explain`` 150,000, so a
loop that explain decides may be one check is silent on. explain says so on the loop, with both
budgets, instead of calling it decided without a word. And a shape of field trial 53 that spent
check's budget (a hyper-parameter grid around a whole training run) is decided, its bad twin found."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from accumlint.commands.explain import explain_source, render_markdown, render_text, to_json
from accumlint.model import simulation
from accumlint.model.module_functions import ModuleFunctions
from accumlint.model.simulation import JUDGED_ENTRY_STATEMENTS, simulate
from tests.support import lint

#: check's budget of an entry point in the test of the note (smaller than the product's: explain makes about
#: eight times check's runs, and its own budget must hold them)
CHECK_BUDGET = 5_000
#: statements of the set-up function; called twice it spends more than that budget of an entry
SETUP_STATEMENTS = CHECK_BUDGET // 2 + 100

LOOP = """
def train(loader, net, opt, accum):
    setup()
    setup()
    for i, x in enumerate(loader):
        (net(x).mean() / accum).backward()
        if (i + 1) % accum == 0:
            opt.step()
            opt.zero_grad()
"""


def long_setup(statements: int) -> str:
    """A script whose loop is preceded by ``statements`` straight-line statements run twice."""
    body = "\n".join(f"    s{i} = {i}" for i in range(statements))
    return f"import torch\n\n\ndef setup():\n{body}\n    return 0\n\n{textwrap.dedent(LOOP)}"


def test_explain_says_check_leaves_the_loop_to_its_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(simulation, "JUDGED_ENTRY_STATEMENTS", CHECK_BUDGET)
    source = long_setup(SETUP_STATEMENTS)
    checked = simulate(ModuleFunctions(cst.parse_module(source)), "train.py", judged_only=True)
    assert any(f"the statement budget of an entry point ({CHECK_BUDGET}) ran out" in r for r in checked[0].reasons())
    (result,) = explain_source("train.py", source.encode(), None, None)
    assert result.decided
    assert result.statements > 2 * SETUP_STATEMENTS
    note = (f"check leaves this loop to its statement budget ({CHECK_BUDGET} statements per entry point; explain ran "
            f"{result.statements})")
    assert result.notes == [note]
    assert f"  note: {note}" in render_text("train.py", [result]).splitlines()
    assert to_json("train.py", [result])[0]["notes"] == [note]
    assert f"note: {note}" in render_markdown(result)


def test_explain_says_nothing_where_check_decides_the_loop() -> None:
    source = long_setup(10)
    checked = simulate(ModuleFunctions(cst.parse_module(source)), "train.py", judged_only=True)
    assert checked[0].decided
    (result,) = explain_source("train.py", source.encode(), None, None)
    assert result.decided and result.notes == []


def test_explain_says_nothing_where_its_own_budget_runs_out() -> None:
    """A loop that never ends spends both budgets: explain's own reason says so already."""
    source = textwrap.dedent("""
        def train(net, opt, make_batch):
            while True:
                net(make_batch()).mean().backward()
                opt.step()
                opt.zero_grad()
                while True:
                    pass
    """)
    (result,) = explain_source("train.py", source.encode(), None, None)
    assert any("budget" in r or "iterations" in r for r in result.reasons())
    assert result.notes == []


# --- a loop over unknown items, each of which trains over data --------------------------------
#
# A loop over items the run cannot see whose body runs a whole training loop over data (a grid of
# hyper-parameter configurations, a schedule of phases) was taken as the microbatch loop: the
# training loop inside drew a second pass that only check's budget ended (rasbt/LLMs-from-scratch
# `hparam_search.py`, trial 53). Its items are runs of training now, as the run's epochs last.

#: the update's place; the bug seeded: the reset between the group's last backward and its update
GOOD_UPDATE = ("optimizer.step()", "optimizer.zero_grad()")
BAD_UPDATE = ("optimizer.zero_grad()  # the bug seeded", "optimizer.step()")

GRID = """
    import itertools

    import torch
    from helpers import make_loader, Model

    GRID = {"lr": [1e-3, 1e-4], "batch_size": [2, 4]}
    ACCUM = 4


    def train_model(model, loader, optimizer, n_epochs):
        assert len(loader) % ACCUM == 0
        for epoch in range(n_epochs):
            for i, (x, y) in enumerate(loader):
                (model(x).mean() / ACCUM).backward()
                if (i + 1) % ACCUM == 0:
                    {first}
                    {second}


    if __name__ == "__main__":
        for combination in list(itertools.product(*GRID.values())):
            config = dict(zip(GRID.keys(), combination))
            model = Model()
            optimizer = torch.optim.AdamW(model.parameters(), lr=config["lr"])
            train_model(model, make_loader(config["batch_size"]), optimizer, config["n_epochs"])
"""

PHASES = """
    def train(model, loader, optimizer, schedule, accum):
        assert len(loader) % accum == 0
        for phase in schedule:
            for i, x in enumerate(loader):
                (model(x).mean() / accum).backward()
                if (i + 1) % accum == 0:
                    {first}
                    {second}
"""


def update(template: str, order: tuple[str, str]) -> str:
    first, second = order
    return textwrap.dedent(template).replace("{first}", first).replace("{second}", second)


@pytest.mark.parametrize("template", [GRID, PHASES], ids=["grid", "phases"])
def test_a_loop_over_items_that_each_train_is_decided(template: str) -> None:
    (result,) = simulate(ModuleFunctions(cst.parse_module(update(template, GOOD_UPDATE))), "train.py",
                         judged_only=True)
    assert result.reasons() == []
    assert result.statements < JUDGED_ENTRY_STATEMENTS
    # the largest A's whole groups (N = 8, two epochs): an update after every fourth microbatch
    assert [t.updates_at() for t in result.traces][0] == [(0, 3), (0, 7), (1, 3), (1, 7)]


@pytest.mark.parametrize("template", [GRID, PHASES], ids=["grid", "phases"])
def test_a_reset_before_the_update_in_a_loop_over_items_that_each_train_is_reported(template: str) -> None:
    code = update(template, BAD_UPDATE)
    assert lint(code) == [("ACC003", line_of(code, "the bug seeded"))]
    assert lint(update(template, GOOD_UPDATE)) == []


def test_a_loader_zipped_with_the_training_pass_stays_a_second_pass() -> None:
    """A pass that shares the training pass's loop (zipped with it) is no loop of runs: the
    microbatches are still the zipped items, one update per group of A."""
    code = textwrap.dedent("""
        def train(model, loader, extra, optimizer, accum):
            for i, (x, y) in enumerate(zip(loader, extra)):
                (model(x, y).mean() / accum).backward()
                if (i + 1) % accum == 0:
                    optimizer.step()
                    optimizer.zero_grad()
    """)
    (result,) = simulate(ModuleFunctions(cst.parse_module(code)), "train.py", judged_only=True)
    assert result.reasons() == []
    assert [t.updates_at() for t in result.traces][0] == [(0, 3), (0, 7), (1, 3), (1, 7)]


def test_a_microbatch_split_into_parts_stays_one_microbatch() -> None:
    """``for mb in batch.split(k)`` inside the loop over the loader runs over parts of the drawn
    microbatch, not a pass of its own: the loader's items stay the microbatches."""
    code = textwrap.dedent("""
        def train(model, loader, optimizer, accum):
            for i, batch in enumerate(loader):
                for part in batch.split(2):
                    (model(part).mean() / accum / 2).backward()
                if (i + 1) % accum == 0:
                    optimizer.step()
                    optimizer.zero_grad()
    """)
    (result,) = simulate(ModuleFunctions(cst.parse_module(code)), "train.py", judged_only=True)
    assert result.reasons() == []
    assert [t.updates_at() for t in result.traces][0] == [(0, 3), (0, 7), (1, 3), (1, 7)]


def test_a_loop_that_trains_on_its_own_items_too_keeps_them_as_microbatches() -> None:
    """A backward on the outer item before a nested pass trains: its items are microbatches, not
    runs; the nested pass stays a second one (left to the budget, silent, as before)."""
    code = textwrap.dedent("""
        def train(model, loader, extra, optimizer, accum):
            for i, x in enumerate(loader):
                (model(x).mean() / accum).backward()
                for y in extra:
                    (model(y).mean() / accum).backward()
                if (i + 1) % accum == 0:
                    optimizer.step()
                    optimizer.zero_grad()
    """)
    (result,) = simulate(ModuleFunctions(cst.parse_module(code)), "train.py", judged_only=True)
    assert f"the statement budget of an entry point ({JUDGED_ENTRY_STATEMENTS}) ran out" in result.reasons()
    assert lint(code) == []


def line_of(code: str, mark: str) -> int:
    return next(n for n, text in enumerate(code.splitlines(), 1) if mark in text)
