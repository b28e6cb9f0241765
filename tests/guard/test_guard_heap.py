"""The guard's search for live objects (``runtime_guard.heap``): near the loop (from the stack), bounded,
and the full pass by exact type."""

from __future__ import annotations

import dataclasses
import functools
import sysconfig
import threading
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


@dataclasses.dataclass(slots=True)
class TrainState:
    """A slotted train state (no ``__dict__``): what it holds is read through its slots."""

    optimizer: torch.optim.Optimizer
    scheduler: object = None


def _train_step(optimizer: torch.optim.Optimizer, *, scheduler: object = None) -> None:
    optimizer.step()


def _holder(shape: str) -> tuple[object, int]:
    """What a loop keeps of its step (``shape``), the only holder of an optimizer, and that optimizer's id."""
    optimizer = _optimizer()

    def train_step(opt: torch.optim.Optimizer = optimizer) -> None:
        opt.step()

    def train_step_kw(*, opt: torch.optim.Optimizer = optimizer) -> None:
        opt.step()

    holders = {"partial": lambda: functools.partial(_train_step, optimizer),
               "partial keyword": lambda: functools.partial(_train_step, None, scheduler=Holder(optimizer)),
               "slots": lambda: TrainState(optimizer),
               "default": lambda: train_step, "keyword default": lambda: train_step_kw}
    return holders[shape](), id(optimizer)


@pytest.mark.parametrize("shape", ["partial", "partial keyword", "slots", "default", "keyword default"])
def test_finds_objects_behind_partials_bound_methods_slots_and_defaults(shape: str) -> None:
    """Shapes the stack search missed before: the loop holds only a ``functools.partial`` of its step, a
    slotted dataclass, or a function whose default arguments bind the object."""
    holder, wanted = _holder(shape)
    found = heap.near_the_loop([torch.optim.Optimizer])
    assert found is not None and wanted in {id(o) for o in found}
    assert holder


def test_one_walk_is_shared_and_dropped() -> None:
    kept = _optimizer()
    with heap.one_walk():
        first = heap.near_the_loop([torch.optim.Optimizer])
        later = _optimizer()  # made after the walk: a search inside the block filters the same walk
        again = heap.near_the_loop([torch.optim.Optimizer])
        assert first is not None and again is not None
        assert any(o is kept for o in again) and not any(o is later for o in again)
    assert any(o is later for o in heap.near_the_loop([torch.optim.Optimizer]) or [])
    assert not heap._shared_walk()  # the walk's objects are not kept after the block


BOUND_STEP_SCRIPT = """
import threading

import torch
from torch import nn
A = 4
torch.manual_seed(0)
model = nn.Linear(16, 1)
opt = torch.optim.AdamW(model.parameters(), lr=0.05)
lr_step = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1 / (1 + s)).step  # the scheduler's only holder
for i in range(3 * A):
    x = torch.randn(8, 16)
    (nn.functional.mse_loss(model(x), x.sum(1, keepdim=True)) / A).backward()
    if (i + 1) % A == 0:
        opt.step()
        lr_step()
        opt.zero_grad()
"""


def test_a_scheduler_held_only_by_a_bound_step_is_not_claimed(tmp_path) -> None:  # noqa: ANN001
    """A method bound before the probe attached bypasses its wrapper: the scheduler behind it is not taken
    as the loop's (its steps would all look missing); the card says no scheduler was found."""
    from runtime_guard.discover import run_script

    script = tmp_path / "train.py"
    script.write_text(BOUND_STEP_SCRIPT, encoding="utf-8")
    report = run_script(script, accumulation_steps=4).report()
    assert report is not None and report.findings == []
    assert report.card["scheduler_steps_per_update"] is None


def test_live_threads_elsewhere_do_not_exhaust_the_walk_from_a_thread() -> None:
    # threading's module globals list every live thread: a long-lived process (a test runner, a
    # server) with many idle threads holding data must not push the walk past its bound
    stop = threading.Event()

    def idle(data: list[object]) -> None:  # a thread that holds its data until the test ends
        stop.wait()

    holders = [threading.Thread(target=idle, args=([object() for _ in range(500)],), daemon=True)
               for _ in range(300)]
    for holder in holders:
        holder.start()
    found: list[bool | None] = []

    def search() -> None:
        kept = _optimizer()
        objects = heap.near_the_loop([torch.optim.Optimizer])
        found.append(None if objects is None else any(o is kept for o in objects))

    try:
        worker = threading.Thread(target=search)
        worker.start()
        worker.join()
    finally:
        stop.set()
        for holder in holders:
            holder.join()
    assert found == [True]


class _Record:
    """A report-like object with a few fields of its own (a test runner keeps one per test)."""

    def __init__(self, index: int) -> None:
        self.index, self.fields = index, {"outcome": "passed", "sections": [str(index)]}


def _many_records() -> list[list[_Record]]:
    """60k records in lists narrower than ``WIDE``: followed, they pass the walk's bound."""
    return [[_Record(i) for i in range(5_000)] for _ in range(12)]


@pytest.mark.parametrize("folder", ["stdlib", "scripts"])  # `python -m pytest` (runpy), `bin/pytest`
def test_a_launchers_frames_and_the_import_systems_names_are_not_walked(folder: str) -> None:
    # a launcher (a test runner, runpy) calls the program: its frames' locals and what the program's
    # module names as its ``__loader__`` can hold every test report of a long session
    program = (
        "def search(near_the_loop, optimizer_class, make, found):\n"
        "    kept = make()\n"
        "    objects = near_the_loop([optimizer_class])\n"
        "    found.append(None if objects is None else any(o is kept for o in objects))\n"
    )
    launcher = "def launch(program, *args):\n    records = RECORDS\n    return program(*args)\n"
    namespace = {"__name__": "program_module", "__loader__": types.SimpleNamespace(records=_many_records())}
    exec(compile(program, "/project/train.py", "exec"), namespace)  # noqa: S102 - the program under test
    library = {"__name__": "launcher_module", "RECORDS": _many_records()}
    library_file = f"{sysconfig.get_paths()[folder]}/launcher_module.py"
    exec(compile(launcher, library_file, "exec"), library)  # noqa: S102 - a launcher in the standard library
    found: list[bool | None] = []
    worker = threading.Thread(target=library["launch"], args=(  # the launcher is the thread's outermost frame
        namespace["search"], heap.near_the_loop, torch.optim.Optimizer, _optimizer, found))
    worker.start()
    worker.join()
    assert found == [True]
