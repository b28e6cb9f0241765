"""ACC101 with A written as a literal on both sides: `Accelerator(gradient_accumulation_steps=4)`
and `loss / 4` under `accelerator.backward` divide by A twice (found by a new user's trial)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.project.test_single_file_runs import check_paths, write_project

ACCELERATE_LITERAL = """
from accelerate import Accelerator

def fit(net, opt, loader, crit):
    accelerator = Accelerator(gradient_accumulation_steps={configured})
    net, opt, loader = accelerator.prepare(net, opt, loader)
    for x, y in loader:
        with accelerator.accumulate(net):
            loss = crit(net(x), y) / {divisor}
            accelerator.backward(loss)
            opt.step()
            opt.zero_grad()
"""


@pytest.mark.parametrize(("configured", "divisor", "expected"), [
    (4, 4, [("train.py", "ACC101", 9)]),  # Accelerate divides by 4 itself: 1/16 of the gradient
    (4, 2, []),  # another divisor is no division by A (it may be a loss weight)
    (1, 4, []),  # A = 1: Accelerate divides by nothing
])
def test_a_literal_a_divided_again_under_accelerate(tmp_path: Path, configured: int, divisor: int,
                                                     expected: list[tuple[str, str, int]]) -> None:
    write_project(tmp_path, {"train.py": ACCELERATE_LITERAL.format(configured=configured, divisor=divisor)})
    assert [f for f in check_paths(tmp_path, "train.py") if f[1] == "ACC101"] == expected
