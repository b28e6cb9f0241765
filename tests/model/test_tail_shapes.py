"""Issue 16, tail model v2, the last two shapes: a gate on a sample count (``seen += len(batch);
if seen >= global_batch_size: ...``) and ``drop_last`` on the groups (a loader whose sampler
drops the partial group, not only the partial batch). Each reported shape has a silent twin
that differs by the one fact that makes it correct."""

# The tests kept here need more than one snippet's findings: message text, a snippet shared with
# twins made by str.replace. A plain "this one-file snippet reports exactly these (code, line)
# findings" test belongs in the rule's rules/<CODE>-<name>/cases.toml (tests/catalogue/test_rule_folders.py
# runs them all).

from __future__ import annotations

import textwrap

import pytest

from accumlint.pipeline.engine import check_source, rules_for
from tests.catalogue.test_rule_folders import case_code
from tests.support import lint


def test_sample_gate_message_speaks_of_samples() -> None:
    source = textwrap.dedent(case_code("sample gate restarted every epoch, nothing resets the tail")).encode()
    (finding,) = check_source("s.py", source, rules_for(["ACC005"])).findings
    assert "sample count is not a multiple of the group's size in samples" in finding.message
    assert "join the next epoch's first update" in finding.message


_ENGINE_WINDOWS = """
import deepspeed


def grouped(source, accum_steps):
    buf = []
    for b in source:
        buf.append(b)
        if len(buf) == accum_steps:
            weight = sum(int(x["keep"].sum()) for x in buf)
            for x in buf:
                yield x, weight
            buf = []
    if buf:
        weight = sum(int(x["keep"].sum()) for x in buf)
        for x in buf:
            yield x, weight


def run(engine, source, accum_steps, epochs):
    for _ in range(epochs):
        for x, weight in grouped(source, accum_steps):
            engine.backward((engine(x["ids"]) * x["keep"]).sum() / weight)
            engine.step()
"""


def test_engine_window_builder_yields_its_partial_window() -> None:
    """A window builder over the loader that yields the trailing short window to a DeepSpeed
    loop (the engine counts micro-steps across epochs): reported at the trailing yield."""
    assert lint(_ENGINE_WINDOWS, select="ACC005") == [("ACC005", 17)]


@pytest.mark.parametrize("change", [
    ("    if buf:\n        weight = sum(int(x[\"keep\"].sum()) for x in buf)\n        for x in buf:\n"
     "            yield x, weight\n", ""),  # only full windows: drop_last on the groups
    ("            engine.step()\n",
     "            engine.step()\n        engine.set_gradient_accumulation_boundary(True)\n"),
    ("    for _ in range(epochs):\n        for x, weight in grouped(source, accum_steps):\n"
     "            engine.backward((engine(x[\"ids\"]) * x[\"keep\"]).sum() / weight)\n            engine.step()\n",
     "    for x, weight in grouped(source, accum_steps):\n"
     "        engine.backward((engine(x[\"ids\"]) * x[\"keep\"]).sum() / weight)\n        engine.step()\n"),
], ids=["only-full-windows", "boundary-told-by-hand", "one-pass"])
def test_engine_window_twins_stay_silent(change: tuple[str, str]) -> None:
    old, new = change
    assert old in _ENGINE_WINDOWS
    assert lint(_ENGINE_WINDOWS.replace(old, new), select="ACC005") == []
