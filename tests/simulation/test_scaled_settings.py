"""A script that scales its own accumulation setting once before training (``accum *= 8`` to
simulate 8 GPUs on one, ``accum //= world_size``, the nanoGPT family) still names the count of its
micro-loop: the configuration binds it to A, and a scaling is no counter (a counter counts with
``+=``/``-=``). Field trial 53: pre-training scripts left with "no value decides when the
optimizer updates" and runs that never reached an update."""

from __future__ import annotations

import libcst as cst

from accumlint.model.module_functions import ModuleFunctions
from accumlint.model.simulation import simulate
from tests.support import lint

#: ``{scale}``: how the script scales its setting; ``{reset}``: a reset inside the micro-loop
_SCRIPT = """
import os

import torch

micro_steps = 5
rank = int(os.environ.get("RANK", -1))
if rank != -1:
    world = int(os.environ["WORLD_SIZE"])
    micro_steps {scale}
else:
    micro_steps *= 8
net = torch.nn.Linear(16, 16)
opt = torch.optim.AdamW(net.parameters())
it = 0
x = draw()
while True:
    for micro in range(micro_steps):{reset}
        loss = net(x).pow(2).mean() / micro_steps
        x = draw()
        loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    it += 1
    if it > 100000:
        break
"""


def _source(scale: str = "//= world", reset: bool = False) -> str:
    return _SCRIPT.replace("{scale}", scale).replace("{reset}", "\n        opt.zero_grad()" if reset else "")


def test_a_setting_the_script_scales_is_still_the_micro_loops_a() -> None:
    (result,) = simulate(ModuleFunctions(cst.parse_module(_source())), "train.py")
    assert result.decided, result.reasons()
    assert result.symbols == ("micro_steps",)
    assert sorted({t.configuration.accumulation for t in result.traces}) == [1, 2, 4]
    assert lint(_source()) == []


def test_the_scaled_setting_keeps_a_reset_inside_the_micro_loop_reported() -> None:
    assert lint(_source(reset=True)) == [("ACC001", 19)]
