"""Which function of a module starts the runs of a loop that a method of the same class holds: the
script's ``Trainer().train(cfg)`` (a call of the module's own class) reaches the loop, and a
trainer's ``train`` that the module calls only as ``model.train()`` / ``self.net.train()`` (the
model's mode switch) is the top of the module's calls. Either way the loop is decided with the
accelerator its caller built (field trial 52: an accelerator returned in a tuple by a set-up
method and passed on to the loop method)."""

from __future__ import annotations

import libcst as cst

from accumlint.model.module_functions import ModuleFunctions
from accumlint.model.simulation import simulate
from tests.support import lint

#: ``{reset}``: a reset written before the backward in the bad twin; ``{main}``: the script's end
_TRAINER = """
import torch
from accelerate import Accelerator


def new_accelerator(cfg):
    return Accelerator(gradient_accumulation_steps=cfg.accum)


class Trainer:
    def __init__(self):
        self.net = torch.nn.Linear(8, 1)

    def _prepare(self, cfg):
        return new_accelerator(cfg), torch.float16

    def train(self, cfg):
        accelerator, _ = self._prepare(cfg)
        opt = torch.optim.AdamW(self.net.parameters())
        data = torch.utils.data.DataLoader(cfg.data)
        net, opt, data = accelerator.prepare(self.net, opt, data)
        self._epochs(cfg, accelerator, net, opt, data)

    def _epochs(self, cfg, accelerator, net, opt, data):
        self.net.train()
        for epoch in range(cfg.epochs):
            net.train()
            for x in data:
                with accelerator.accumulate(net):{reset}
                    accelerator.backward(net(x).pow(2).mean())
                    opt.step()
                    opt.zero_grad()
{main}"""

_MAIN = """

if __name__ == "__main__":
    Trainer().train(read_config())
"""


def _source(reset: bool, main: bool) -> str:
    return _TRAINER.replace("{reset}", "\n                    opt.zero_grad()" if reset else "") \
        .replace("{main}", _MAIN if main else "")


def _decided(source: str) -> list[tuple[str, str, bool]]:
    results = simulate(ModuleFunctions(cst.parse_module(source)), "train.py", judged_only=True)
    return [(r.entry.kind, r.entry.name, r.decided) for r in results]


def test_the_scripts_call_of_its_own_class_runs_the_loop() -> None:
    assert _decided(_source(reset=False, main=True)) == [("module", "the script", True)]
    assert lint(_source(reset=False, main=True)) == []


def test_a_train_method_the_module_calls_only_as_a_models_mode_switch_is_a_driver() -> None:
    assert _decided(_source(reset=False, main=False)) == [("driver", "Trainer.train", True)]
    assert lint(_source(reset=False, main=False)) == []


def test_the_driven_loop_reports_a_reset_before_the_backward() -> None:
    for main in (True, False):
        assert lint(_source(reset=True, main=main)) == [("ACC501", 30)], main


#: a process function handed to ignite's engine, gated on the engine's iteration count; ``{gate}``
_IGNITE = """
import torch
from ignite.engine import Engine

net = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(net.parameters(), lr=0.1)


def process(engine, batch):
    (net(batch).pow(2).mean() / ACCUM).backward()
    if {gate}:
        opt.step()
        opt.zero_grad()


runner = Engine(process)
runner.run(LOADER, max_epochs=2)
"""


def test_an_ignite_process_function_reads_the_engines_iteration_count() -> None:
    good = _IGNITE.replace("{gate}", "engine.state.iteration % ACCUM == 0")
    (result,) = simulate(ModuleFunctions(cst.parse_module(good)), "train.py")
    assert result.decided, result.reasons()
    assert result.entry.description == \
        "`process`, called once per microbatch by pytorch-ignite's engine, with its iteration count"
    assert lint(good) == []
    # 1 on the first microbatch, so `- 1` moves the update to each group's first microbatch
    assert lint(_IGNITE.replace("{gate}", "(engine.state.iteration - 1) % ACCUM == 0")) == [("ACC006", 11)]
