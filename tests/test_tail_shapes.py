"""Issue 16, tail model v2, the last two shapes: a gate on a sample count (``seen += len(batch);
if seen >= global_batch_size: ...``) and ``drop_last`` on the groups (a loader whose sampler
drops the partial group, not only the partial batch). Each reported shape has a silent twin
that differs by the one fact that makes it correct."""

from __future__ import annotations

import textwrap

import pytest

from accumlint.engine import check_source, rules_for
from tests.test_model import lint

BAD = {
    "sample gate restarted every epoch, nothing resets the tail": ("""
    def fit(net, opt, loader, epochs, global_batch_size):
        for epoch in range(epochs):
            seen = 0
            for batch in loader:
                (net(batch).sum() / global_batch_size).backward()
                seen += len(batch)
                if seen >= global_batch_size:
                    opt.step()
                    opt.zero_grad()
                    seen = 0
    """, [("ACC005", 8)]),
    "sample gate, examples counted from the batch's shape, carried over with -=": ("""
    def fit(model, optimizer, train_loader, n_epochs, samples_per_update):
        for _ in range(n_epochs):
            n_samples = 0
            for x, y in train_loader:
                model.loss(x, y).backward()
                n_samples += x.shape[0]
                if n_samples >= samples_per_update:
                    optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
                    n_samples -= samples_per_update
    """, [("ACC005", 8)]),
    "sample gate in a function the epoch loop calls, nothing resets between calls": ("""
    def one_epoch(net, opt, loader, effective_batch_size):
        examples_seen = 0
        for b in loader:
            net(b).sum().backward()
            examples_seen += b.size(0)
            if examples_seen >= effective_batch_size:
                opt.step()
                opt.zero_grad()
                examples_seen = 0

    def fit(net, opt, loader, epochs, effective_batch_size):
        for _ in range(epochs):
            one_epoch(net, opt, loader, effective_batch_size)
    """, [("ACC005", 7)]),
    "drop_last on the batches only: the partial group still leaks": ("""
    from torch.utils.data import DataLoader

    def fit(net, opt, ds, epochs, bs, accum):
        loader = DataLoader(ds, batch_size=bs, shuffle=True, drop_last=True)
        for epoch in range(epochs):
            for i, b in enumerate(loader):
                (net(b).mean() / accum).backward()
                if (i + 1) % accum == 0:
                    opt.step()
                    opt.zero_grad()
    """, [("ACC005", 9)]),
}

GOOD = {
    "sample gate, the gradients reset at every epoch start (tail dropped on purpose)": """
    def fit(net, opt, loader, epochs, global_batch_size):
        for epoch in range(epochs):
            seen = 0
            opt.zero_grad()
            for batch in loader:
                (net(batch).sum() / global_batch_size).backward()
                seen += len(batch)
                if seen >= global_batch_size:
                    opt.step()
                    opt.zero_grad()
                    seen = 0
    """,
    "sample gate whose count survives the epoch (groups run across epochs)": """
    def fit(net, opt, loader, epochs, global_batch_size):
        seen = 0
        for epoch in range(epochs):
            for batch in loader:
                (net(batch).sum() / global_batch_size).backward()
                seen += len(batch)
                if seen >= global_batch_size:
                    opt.step()
                    opt.zero_grad()
                    seen = 0
    """,
    "sample gate flushed after the loop": """
    def fit(net, opt, loader, epochs, global_batch_size):
        for epoch in range(epochs):
            seen = 0
            for batch in loader:
                net(batch).sum().backward()
                seen += len(batch)
                if seen >= global_batch_size:
                    opt.step()
                    opt.zero_grad()
                    seen = 0
            if seen:
                opt.step()
                opt.zero_grad()
    """,
    "a sample count compared without ever restarting it is no gate of groups": """
    def fit(net, opt, loader, epochs, global_batch_size):
        for epoch in range(epochs):
            samples_seen = 0
            for batch in loader:
                net(batch).sum().backward()
                samples_seen += len(batch)
                if samples_seen >= global_batch_size:
                    opt.step()
                    opt.zero_grad()
    """,
    "drop_last on the groups: a batch sampler sized with A drops the partial group": """
    from torch.utils.data import DataLoader

    def fit(net, opt, ds, epochs, bs, accum, WholeGroups):
        loader = DataLoader(ds, batch_sampler=WholeGroups(ds, bs, accum, drop_last=True))
        for epoch in range(epochs):
            for i, b in enumerate(loader):
                (net(b).mean() / accum).backward()
                if (i + 1) % accum == 0:
                    opt.step()
                    opt.zero_grad()
    """,
    "drop_last with a sampler drawing whole groups of samples": """
    from torch.utils.data import DataLoader, RandomSampler

    def fit(net, opt, ds, epochs, bs, grad_accum, n_updates):
        draws = RandomSampler(ds, num_samples=n_updates * bs * grad_accum)
        loader = DataLoader(ds, batch_size=bs, sampler=draws, drop_last=True)
        for epoch in range(epochs):
            for i, b in enumerate(loader):
                (net(b).mean() / grad_accum).backward()
                if (i + 1) % grad_accum == 0:
                    opt.step()
                    opt.zero_grad()
    """,
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_reports(name: str) -> None:
    source, expected = BAD[name]
    assert lint(source, select="ACC005") == expected


@pytest.mark.parametrize("name", sorted(GOOD))
def test_stays_silent(name: str) -> None:
    assert lint(GOOD[name], select="ACC005") == []


def test_sample_gate_message_speaks_of_samples() -> None:
    source = textwrap.dedent(BAD["sample gate restarted every epoch, nothing resets the tail"][0]).encode()
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
