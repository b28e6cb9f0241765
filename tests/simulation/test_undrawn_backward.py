"""A run that backpropagates before it drew any microbatch, then draws (issue 30: a decision only
where the run knows which microbatch each event belongs to).

A diffusion trainer draws its items through a preprocessor the simulation does not follow: its
runs recorded backwards at no microbatch, and groups of two backwards in one microbatch, and the
loop was decided on that trace. A backward before the loop (a probe) made "groups of [5, 4]"
(ACC006) where the loop itself updates on every A-th microbatch. Such a run is undecided, with
the reason, unless the gradients are reset before the first microbatch's backward (a reference
backward written out before the loop); a run that draws nothing at all keeps "no run drew a
microbatch".
"""

from __future__ import annotations

import textwrap

import libcst as cst

from accumlint.model.module_functions import ModuleFunctions
from accumlint.model.simulation import simulate
from tests.support import lint

PROBED = """
import torch


def train(model, loader, accum, probe):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    {probe}
    for i, (x, y) in enumerate(loader):
        loss = model(x, y) / accum
        loss.backward()
        if (i + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
"""


def _reasons(source: str) -> tuple[str, ...]:
    module = cst.parse_module(textwrap.dedent(source))
    (result,) = simulate(ModuleFunctions(module), "train.py", judged_only=True)
    return result.reasons()


def test_a_backward_before_the_first_microbatch_leaves_the_loop_undecided() -> None:
    code = PROBED.format(probe="model(probe).sum().backward()")
    (reason,) = _reasons(code)
    assert reason.startswith("`model(probe).sum().backward()` backpropagates before the run drew a microbatch")
    assert lint(code) == []


def test_without_it_the_loop_is_decided() -> None:
    assert list(_reasons(PROBED.format(probe="model.train()"))) == []


def test_a_reference_backward_whose_gradients_are_reset_first_is_no_reason() -> None:
    # a forward and backward written out for reference before the loop, the gradients reset before
    # the first group: they reach no update, and the loop is decided as without them
    code = PROBED.format(probe="model(probe).sum().backward()\n    optimizer.zero_grad()")
    assert list(_reasons(code)) == []
    assert lint(code) == []
