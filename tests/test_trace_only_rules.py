"""Rules judged on the simulated runs alone, and the simulator's reading they need: groups cut
as strides of a list of the epoch's microbatches (``batches[start:start + A]``), and the place
where a ``no_sync()`` context is chosen (a finding points there, not at the backward)."""

from __future__ import annotations

from pathlib import Path

from tests.test_interprocedural import one
from tests.test_simulation import only, run, updates

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
