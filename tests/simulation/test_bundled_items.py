"""A loader whose items each bundle several microbatches (issue 30: one stream, however the data
is packed).

Speech trainers draw a large batch, sort it by length in the ``collate_fn`` and split it into a
list of batches, then train on each: ``for batches in loader: for batch in batches: ...``. The
loop was undecided ("each item holds several microbatches, which the simulation does not
count"). Where the outer loop does nothing per item that the inner loop can see (no training
event, no assignment; leaving the loop, a progress bar), the bundles' borders change no event:
the inner items are the epoch's microbatches. A per-bundle event keeps the loop undecided.
"""

from __future__ import annotations

import textwrap

import libcst as cst

from accumlint.model.module_functions import ModuleFunctions
from accumlint.model.simulation import simulate
from tests.support import lint

BUNDLED = """
import torch
from torch.utils.data import DataLoader


def train(model, dataset, optimizer, accum, bar, total):
    loader = DataLoader(dataset, batch_size=64, collate_fn=dataset.split_sorted)
    step = 1
    running = True
    while running:
        for batches in loader:
            if not running:
                break
            for batch in batches:
                {reset}loss = model(batch).mean() / accum
                loss.backward()
                if step % accum == 0:
                    optimizer.step()
                    optimizer.zero_grad()
                if step == total:
                    running = False
                step += 1
            {per_bundle}
"""


def _result(source: str):
    (result,) = simulate(ModuleFunctions(cst.parse_module(textwrap.dedent(source))), "train.py", judged_only=True)
    return result


def test_the_bundles_microbatches_are_one_stream() -> None:
    result = _result(BUNDLED.format(reset="", per_bundle="bar.update(1)"))
    assert list(result.reasons()) == []
    assert all(t.updates_at()[:2] == [(0, 3), (0, 7)] for t in result.traces)


def test_a_reset_on_every_bundled_microbatch_is_found() -> None:
    source = BUNDLED.format(reset="optimizer.zero_grad()\n                ", per_bundle="bar.update(1)")
    assert [code for code, _ in lint(source)] == ["ACC001"]


def test_an_update_per_bundle_leaves_the_loop_undecided() -> None:
    result = _result(BUNDLED.format(reset="", per_bundle="optimizer.step()"))
    assert any("each item holds several microbatches" in reason for reason in result.reasons())
