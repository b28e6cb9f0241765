"""Rules judged on the simulated runs alone, and the simulator's reading they need: groups cut
as strides of a list of the epoch's microbatches (``batches[start:start + A]``), and the place
where a ``no_sync()`` context is chosen (a finding points there, not at the backward)."""

from __future__ import annotations

from pathlib import Path

from tests.simulation.test_simulation import only, run, simulated, updates
from tests.support import one

STRIDES = """
    def train(model, optimizer, loader, crit, accum, epochs):
        for epoch in range(epochs):
            batches = list(loader)
            for start in range(0, len(batches), accum):
                group = batches[start:start + accum]
                for x, y in group:
                    (crit(model(x), y) / len(group)).backward()
                {before}
                optimizer.step()
                {after}
"""


def test_the_stride_of_a_loop_over_slices_of_the_epochs_microbatches_is_a():
    result = only(STRIDES.format(before="", after="optimizer.zero_grad()"))
    assert result.symbols == ("accum",)
    # each slice draws the next A microbatches of one pass; the last, shorter one holds the tail
    assert updates(run(result, 2, 4)) == [(0, 1), (0, 3), (1, 1), (1, 3)]
    assert updates(run(result, 2, 5)) == [(0, 1), (0, 3), (0, 4), (1, 1), (1, 3), (1, 4)]


def test_a_reset_between_the_slices_backwards_and_the_update_is_acc003(tmp_path: Path):
    source = STRIDES.format(before="optimizer.zero_grad()", after="")
    assert one(tmp_path, source) == [("ACC003", 9)]
    assert one(tmp_path, STRIDES.format(before="", after="optimizer.zero_grad()")) == []


def test_a_group_taken_by_position_leaves_the_entry_undecided():
    result = only("""
        def train(model, optimizer, loader, crit, accum):
            batches = list(loader)
            for start in range(0, len(batches), accum):
                group = batches[start:start + accum]
                for x, y in group[:-1]:
                    crit(model(x), y).backward()
                x, y = group[-1]
                crit(model(x), y).backward()
                optimizer.step()
                optimizer.zero_grad()
    """)
    assert any("by position" in reason for reason in result.reasons())


NO_SYNC = """
    from contextlib import nullcontext

    def train(ddp, optimizer, loader, crit, accum):
        for i, (x, y) in enumerate(loader):
{choice}
            with ctx:
                (crit(ddp(x), y) / accum).backward()
            if (i + 1) % accum == 0:
                optimizer.step()
                optimizer.zero_grad()
"""


def test_acc402_points_at_the_choice_of_the_context(tmp_path: Path):
    # a conditional expression (line 6), an `if` re-binding a null context (its test, line 7)
    expression = " " * 12 + "ctx = nullcontext() if i % accum == 0 else ddp.no_sync()"
    pad = " " * 12
    statement = f"{pad}ctx = nullcontext()\n{pad}if i % accum != 0:\n{pad}    ctx = ddp.no_sync()"
    assert one(tmp_path, NO_SYNC.format(choice=expression)) == [("ACC402", 6)]
    assert one(tmp_path, NO_SYNC.format(choice=statement)) == [("ACC402", 7)]
    aligned = " " * 12 + "ctx = nullcontext() if (i + 1) % accum == 0 else ddp.no_sync()"
    assert one(tmp_path, NO_SYNC.format(choice=aligned)) == []


def test_acc402_a_method_reference_called_in_the_with_points_at_its_choice(tmp_path: Path):
    source = """
        def train(ddp, optimizer, loader, crit, accum):
            for i, (x, y) in enumerate(loader):
                last = (i + 1) % accum == 0
                enter = ddp.no_sync if last else nullcontext
                with enter():
                    (crit(ddp(x), y) / accum).backward()
                if last:
                    optimizer.step()
                    optimizer.zero_grad()
    """
    assert one(tmp_path, source) == [("ACC402", 5)]


def test_acc402_runs_of_a_setting_that_never_enters_no_sync_are_left_out(tmp_path: Path):
    # the single-process runs (`multi_gpu` false) never skip a sync: the verdict is the DDP runs'
    source = """
        from contextlib import nullcontext

        def train(ddp, optimizer, loader, crit, accum, multi_gpu):
            for i, (x, y) in enumerate(loader):
                ctx = nullcontext()
                if multi_gpu:
                    ctx = ddp.no_sync() if i % accum == 0 else nullcontext()
                with ctx:
                    (crit(ddp(x), y) / accum).backward()
                if (i + 1) % accum == 0:
                    optimizer.step()
                    optimizer.zero_grad()
    """
    assert one(tmp_path, source) == []  # the first microbatch of each group skips its sync: the last syncs
    assert one(tmp_path, source.replace("i % accum == 0", "i % accum != 0")) == [("ACC402", 8)]


def test_acc402_whatever_the_names_and_however_the_update_is_gated(tmp_path: Path):
    # the object whose no_sync() is entered is the model (its call is a forward) whatever it is
    # called, and a gate written as `if not boundary: continue` before the update decides it too
    source = """
        import contextlib

        def fit(a, b, c, d, e):
            for f, (g, h) in enumerate(c):
                k = contextlib.nullcontext() if f % e == 0 else a.no_sync()
                with k:
                    (d(a(g), h) / e).backward()
                if (f + 1) % e:
                    continue
                b.step()
                b.zero_grad()
    """
    assert one(tmp_path, source) == [("ACC402", 6)]
    assert one(tmp_path, source.replace("if f % e == 0", "if (f + 1) % e == 0")) == []


COMPREHENSION = """
    import torch

    def one_update(model, optimizer, crit, group):
        for x, y in group:
            (crit(model(x), y) / len(group)).backward()
        optimizer.step()
        {reset}
        return 0.0

    def train(model, optimizer, loader, crit, accum, epochs):
        for epoch in range(epochs):
            batches = list(loader)
            losses = [one_update(model, optimizer, crit, batches[start:start + accum])
                      for start in range(0, len(batches), accum)]
"""


def test_a_comprehension_that_trains_runs_as_the_loop_it_spells():
    # the groups come from a list comprehension over the strides: the same runs as the `for` spelling
    result = next(r for r in simulated(COMPREHENSION.format(reset="optimizer.zero_grad()")) if r.entry.name == "train")
    assert result.symbols == ("accum",)
    assert updates(run(result, 2, 4)) == [(0, 1), (0, 3), (1, 1), (1, 3)]
    assert updates(run(result, 2, 5)) == [(0, 1), (0, 3), (0, 4), (1, 1), (1, 3), (1, 4)]


def test_acc002_on_groups_a_comprehension_drives(tmp_path: Path):
    assert one(tmp_path, COMPREHENSION.format(reset="")) == [("ACC002", 7)]
    assert one(tmp_path, COMPREHENSION.format(reset="optimizer.zero_grad()")) == []


def test_a_comprehension_that_trains_nothing_stays_a_value_of_the_run():
    # a comprehension with no training event inside is not run: the loop around it is unchanged
    result = only("""
        def train(model, optimizer, loader, crit, accum):
            for i, (x, y) in enumerate(loader):
                sizes = [len(part) for part in x]
                (crit(model(x), y) / accum).backward()
                if (i + 1) % accum == 0:
                    optimizer.step()
                    optimizer.zero_grad()
    """)
    assert updates(run(result, 2, 4)) == [(0, 1), (0, 3), (1, 1), (1, 3)]
