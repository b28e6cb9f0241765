"""Which data each simulated backward learns from (``Fetch`` on its trace event, ACC009's fact) and
the actions meant once per update (ACC010's): a new pass over a loader starts again at its first
item, an iterator goes on; actions are recorded apart from the guard's events."""

from __future__ import annotations

import textwrap

import libcst as cst

from accumlint.model.module_functions import ModuleFunctions
from accumlint.model.simulation import simulate
from accumlint.model.trace import Configuration, Trace
from accumlint.spec.vocabulary import EventKind


def _trace(source: str, a: int = 2, n: int = 4) -> Trace:
    results = simulate(ModuleFunctions(cst.parse_module(textwrap.dedent(source))), "train.py")
    return next(t for r in results for t in r.traces if t.configuration == Configuration(a, n))


def _fetches(trace: Trace) -> list[tuple[int, int]]:
    """(pass, position) of each backward, passes numbered from 0 in the order first seen."""
    serials: dict[int, int] = {}
    return [(serials.setdefault(e.fetch.serial, len(serials)), e.fetch.position)
            for e in trace.events if e.kind is EventKind.BACKWARD]


def test_a_new_iterator_per_group_starts_again_at_the_first_item() -> None:
    trace = _trace("""
        import itertools
        for update in range(3):
            for x in itertools.islice(train_loader, accum):
                (model(x).sum() / accum).backward()
            optimizer.step()
            optimizer.zero_grad()
    """)
    assert _fetches(trace)[:4] == [(0, 0), (0, 1), (1, 0), (1, 1)]


def test_an_iterator_kept_across_groups_goes_on() -> None:
    trace = _trace("""
        import itertools
        it = iter(train_loader)
        for update in range(2):
            for x in itertools.islice(it, accum):
                (model(x).sum() / accum).backward()
            optimizer.step()
            optimizer.zero_grad()
    """)
    assert _fetches(trace) == [(0, 0), (0, 1), (0, 2), (0, 3)]


def test_an_action_is_recorded_apart_with_the_events_before_it() -> None:
    trace = _trace("""
        import torch
        for i, x in enumerate(train_loader):
            (model(x).sum() / accum).backward()
            if (i + 1) % accum == 0:
                optimizer.step()
                optimizer.zero_grad()
                torch.save(model.state_dict(), "ckpt.pt")
    """)
    assert all(e.kind is not EventKind.ACTION for e in trace.events)
    assert [(a.target, a.microbatch) for _, a in trace.actions][:2] == [("checkpoint save", 1), ("checkpoint save", 3)]
    before = trace.events[:trace.actions[0][0]]
    assert [e.kind for e in before].count(EventKind.UPDATE) == 1
