"""The card's precision under a framework's mixed precision (issue 35, item 4): Accelerate
(``mixed_precision="bf16"``) and Fabric (``precision="bf16-mixed"``) enter autocast inside the
model's forward, after the probe's forward pre-hook; the card must still name the autocast dtype
the microbatches ran in, and the loop stays clean."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import runtime_guard  # noqa: E402

A = 2
CLASSES = 3


def _classifier() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, CLASSES))


def _probed_loop(model: Any, optimizer: Any, backward: Callable[[torch.Tensor], None],
                 **options: Any) -> runtime_guard.Report:
    """Two groups of A microbatches of 4 examples, cross entropy divided by A, through ``backward``."""
    with runtime_guard.probe(model, optimizer, accumulation_steps=A, **options) as p:
        for i in range(3 * A):
            x, y = torch.randn(4, 6), torch.randint(0, CLASSES, (4,))
            backward(torch.nn.functional.cross_entropy(model(x), y) / A)
            if (i + 1) % A == 0:
                optimizer.step()
                optimizer.zero_grad()
    return p.report()


def _assert_bf16_autocast(report: runtime_guard.Report) -> None:
    assert report.card["precision"]["autocast"] == ["cpu:bfloat16"]
    assert report.codes == set()


def test_accelerate_bf16_autocast_is_on_the_card(fresh_accelerate) -> None:
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True, mixed_precision="bf16")
    model = _classifier()
    model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    _assert_bf16_autocast(_probed_loop(model, optimizer, accelerator.backward, accelerator=accelerator))


def test_fabric_bf16_mixed_autocast_is_on_the_card() -> None:
    pytest.importorskip("lightning")
    from lightning.fabric import Fabric

    fabric = Fabric(accelerator="cpu", devices=1, precision="bf16-mixed")
    model = _classifier()
    model, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    _assert_bf16_autocast(_probed_loop(model, optimizer, fabric.backward))


def test_the_loops_own_autocast_is_read_at_the_forward() -> None:
    """Autocast entered by the loop around the call is read at the pre-hook; none is none."""

    def run(autocast: bool) -> runtime_guard.Report:
        model = _classifier()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            return _probed_loop(model, torch.optim.SGD(model.parameters(), lr=0.1), torch.Tensor.backward)

    _assert_bf16_autocast(run(autocast=True))
    assert run(autocast=False).card["precision"]["autocast"] is None
