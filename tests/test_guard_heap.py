"""The guard's search for live objects (``runtime_guard.heap``): near the loop (from the stack), bounded,
and the full pass by exact type."""

from __future__ import annotations

import types

import pytest

torch = pytest.importorskip("torch")

from runtime_guard import heap  # noqa: E402


class Holder:
    """A trainer-like object holding its optimizer as an attribute."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.optimizer = optimizer


def _optimizer() -> torch.optim.Optimizer:
    return torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1)


def test_finds_objects_in_locals_attributes_containers_and_closures() -> None:
    in_local, in_attribute, in_dict, in_closure = _optimizer(), _optimizer(), _optimizer(), _optimizer()
    holder = Holder(in_attribute)
    state = {"opt": [in_dict]}

    def step() -> None:
        in_closure.step()

    found = heap.near_the_loop([torch.optim.Optimizer])
    assert found is not None
    assert {id(o) for o in (in_local, in_attribute, in_dict, in_closure)} <= {id(o) for o in found}
    assert holder and state and step  # held by this frame until the search ran


def test_wide_containers_are_data_and_the_bound_gives_up() -> None:
    rows = [None] * heap.WIDE + [_optimizer()]  # an in-memory dataset: not followed
    found = heap.near_the_loop([torch.optim.Optimizer])
    assert found is not None and all(o is not rows[-1] for o in found)
    assert heap.near_the_loop([torch.optim.Optimizer], limit=10) is None


def test_the_full_pass_matches_by_type_and_subclass() -> None:
    class MySGD(torch.optim.SGD):
        pass

    mine = MySGD(torch.nn.Linear(2, 2).parameters(), lr=0.1)
    namespace = types.SimpleNamespace(kept=mine)
    assert any(o is mine for o in heap.live_instances([torch.optim.Optimizer]))
    assert MySGD in heap.subclasses(torch.optim.Optimizer) and namespace
