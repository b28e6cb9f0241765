"""Objects the run builds in another module of the project: an accumulation loop whose
Accelerator a base class's ``__init__`` builds (the base imported through a package's
re-export), or that a script builds and passes to a trainer's constructor, is decided by what
the project shows, not left "built where the run cannot see"."""

from __future__ import annotations

import textwrap
from pathlib import Path

from accumlint.run import runner
from accumlint.settings.config import Settings
from tests.support import DEFAULT_RULES, loop_reasons, tree

# a base trainer whose module performs no training event: it only builds and prepares
_BASE = """
    import accelerate


    class SpeechTrainer:
        def __init__(self, args, cfg):
            self.cfg = cfg
            self._make_accelerator()
            self.model = self._build_model()
            self.optimizer = self._build_optimizer()
            self.model, self.optimizer, self.loader = self.accelerator.prepare(
                self.model, self.optimizer, args.loader)

        def _make_accelerator(self):
            self.accelerator = accelerate.Accelerator(gradient_accumulation_steps=self.cfg.accum)
"""

# the subclass with the loop, in another package; {init}: how it runs the base's constructor
_SUBCLASS = """
    import torch
    from voice.base import SpeechTrainer


    class VoiceTrainer(SpeechTrainer):
    {init}
        def _build_model(self):
            return torch.nn.Linear(4, 4)

        def _build_optimizer(self):
            return torch.optim.AdamW(self.model.parameters())

        def _train_epoch(self):
            for batch in self.loader:
                with self.accelerator.accumulate(self.model):
    {body}
"""

_GOOD_BODY = """
                    loss = self.model(batch).mean()
                    self.accelerator.backward(loss)
                    self.optimizer.step()
                    self.optimizer.zero_grad()
"""

# the reset moved before the backward: it wipes the group's earlier microbatches
_BAD_BODY = """
                    self.optimizer.zero_grad()
                    loss = self.model(batch).mean()
                    self.accelerator.backward(loss)
                    self.optimizer.step()
"""

_INITS = {
    "inherited": "",
    "explicit": "    def __init__(self, args, cfg):\n        SpeechTrainer.__init__(self, args, cfg)\n",
    "super": "    def __init__(self, args, cfg):\n        super().__init__(args, cfg)\n",
}


def _run(root: Path, files: dict[str, str]) -> runner.RunResult:
    paths = tree(root, files)
    return runner.check_files(paths, Settings(project_root=root), frozenset(rule.code for rule in DEFAULT_RULES),
                              jobs=1)


def _reexported_base(init: str, body: str) -> dict[str, str]:
    indent = lambda text, n: textwrap.indent(textwrap.dedent(text).strip("\n"), " " * n)  # noqa: E731
    return {
        "voice/__init__.py": "",
        "voice/base/__init__.py": "from .core import SpeechTrainer\n",
        "voice/base/core.py": _BASE,
        "voice/models/__init__.py": "",
        "voice/models/trainer.py": textwrap.dedent(_SUBCLASS).replace("{init}", indent(init, 4) if init else "")
        .replace("{body}", indent(body, 16)),
    }


def test_a_base_built_accelerator_through_a_reexport_decides_the_loop(tmp_path: Path) -> None:
    for name, init in _INITS.items():
        run = _run(tmp_path / name, _reexported_base(init, _GOOD_BODY))
        assert run.errors == []
        assert loop_reasons(run.loops) == [()], name  # decided: A is the base's `cfg.accum`
        assert run.findings == [], name


def test_a_seeded_reset_in_the_reexported_base_shape_is_reported(tmp_path: Path) -> None:
    run = _run(tmp_path, _reexported_base(_INITS["explicit"], _BAD_BODY))
    assert [(Path(f.path).name, f.code, f.line) for f in run.findings] == [("trainer.py", "ACC501", 18)]


# a trainer that receives its accelerator; the script in another module builds it
_RUNNER = """
    class Runner:
        def __init__(self, model, loader, optimizer, accelerator):
            self.model, self.loader, self.optimizer = model, loader, optimizer
            self.accelerator = accelerator

        def train(self):
            for batch in self.loader:
                with self.accelerator.accumulate(self.model):
                    loss = self.model(batch).mean(){scale}
                    self.accelerator.backward(loss)
                    self.optimizer.step()
                    self.optimizer.zero_grad()
"""

_SCRIPT = """
    import torch
    from accelerate import Accelerator

    from solver.runner import Runner


    def main(config):
        accelerator = Accelerator(gradient_accumulation_steps=config["accum"])
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.AdamW(model.parameters())
        loader = torch.utils.data.DataLoader(config["data"])
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        Runner(model, loader, optimizer, accelerator).train()


    if __name__ == "__main__":
        main(load())
"""


def test_an_accelerator_passed_to_the_constructor_is_decided_by_the_script(tmp_path: Path) -> None:
    files = {"solver/__init__.py": "", "solver/runner.py": _RUNNER.replace("{scale}", ""), "main.py": _SCRIPT}
    run = _run(tmp_path / "good", files)
    assert loop_reasons(run.loops) == [()]  # the runner's loop is counted with the script that runs it
    assert run.findings == []
    alone = _run(tmp_path / "alone", {"solver/__init__.py": "", "solver/runner.py": files["solver/runner.py"]})
    assert loop_reasons(alone.loops) == [("`accelerator.accumulate()` counts the microbatches of an object built "
                                          "where the run cannot see: its A is unknown",)]


# a base pipeline whose setup method (run by the caller before the loop method) writes the start
_PIPELINE = """
    import torch


    class BasePipeline:
        def __init__(self, args):
            self.args = args

        def initialize(self):
            self.net = torch.nn.Linear(4, 4)
            self.opt = torch.optim.AdamW(self.net.parameters())
            self.accum = self.args.accum
            self.data = iter(self.args.loader)
            self.first = 0
"""

# the loop numbers its microbatches from the start the setup wrote; {gate}: the update's condition
_TUNER = """
    from pipeline.base import BasePipeline


    class Tuner(BasePipeline):
        def train(self):
            for step in range(self.first + 1, self.args.total + 1):
                batch = next(self.data)
                (self.net(batch).mean() / self.accum).backward()
                if {gate}:
                    self.opt.step()
                    self.opt.zero_grad()
"""

_RESUME = """
        def resume(self, checkpoint):
            self.first = checkpoint["step"]
"""


def _pipeline(gate: str, extra: str = "") -> dict[str, str]:
    return {"pipeline/__init__.py": "", "pipeline/base.py": _PIPELINE,
            "pipeline/tuner.py": _TUNER.replace("{gate}", gate) + extra}


def test_a_start_that_a_sibling_method_writes_decides_the_gate(tmp_path: Path) -> None:
    run = _run(tmp_path, _pipeline("step % self.accum == 0"))
    assert loop_reasons(run.loops) == [()]  # decided: `self.first` is the 0 the base's `initialize` writes
    assert run.findings == []


def test_a_seeded_misaligned_gate_after_a_sibling_written_start_is_reported(tmp_path: Path) -> None:
    run = _run(tmp_path, _pipeline("(step + 1) % self.accum == 0"))
    assert [(Path(f.path).name, f.code, f.line) for f in run.findings] == [("tuner.py", "ACC006", 10)]


def test_a_start_that_a_resume_may_write_stays_open(tmp_path: Path) -> None:
    # a resumed offset is not the setup's 0: the condition's phase stays open, silent
    run = _run(tmp_path, _pipeline("(step + 1) % self.accum == 0", _RESUME))
    assert run.findings == []
    assert loop_reasons(run.loops) == [("the condition `(step + 1) % self.accum == 0` depends on `self.first + 1`, "
                                        "which a caller the project does not show computes",)]


# a metric class of the project (its module performs no training event) with its own `accumulate()`
_METRIC = """
    class SpanScore:
        def __init__(self):
            self.hits = 0

        def update(self, hits):
            self.hits += hits

        def accumulate(self):
            return self.hits
"""

_SCORED = """
    import torch
    from metrics import SpanScore


    def evaluate(model, score, loader):
        for batch in loader:
            score.update(model(batch).argmax())
        return score.accumulate()


    def train(model, loader, accum):
        optimizer = torch.optim.AdamW(model.parameters())
        score = SpanScore()
        for step, batch in enumerate(loader):
            (model(batch).mean() / accum).backward()
            if {gate}:
                optimizer.step()
                optimizer.zero_grad()
            if step % 100 == 0:
                evaluate(model, score, loader)
"""


def test_a_project_objects_own_accumulate_is_no_framework_count(tmp_path: Path) -> None:
    good_train = _SCORED.replace("{gate}", "(step + 1) % accum == 0")
    good = _run(tmp_path / "good", {"metrics.py": _METRIC, "train.py": good_train})
    assert loop_reasons(good.loops) == [()]
    assert good.findings == []
    bad = _run(tmp_path / "bad", {"metrics.py": _METRIC, "train.py": _SCORED.replace("{gate}", "step % accum == 0")})
    assert [(Path(f.path).name, f.code, f.line) for f in bad.findings] == [("train.py", "ACC006", 17)]
    # a class that leaves `accumulate()` to a library base stays a count the run cannot see
    inherited = _METRIC.replace("class SpanScore:", "class SpanScore(Tracker):").replace(
        "        def accumulate(self):\n            return self.hits\n", "")
    library = _run(tmp_path / "library", {"metrics.py": "from trackers import Tracker\n" + textwrap.dedent(inherited),
                                          "train.py": good_train})
    assert loop_reasons(library.loops) == [("`score.accumulate()` counts the microbatches of an object built where "
                                            "the run cannot see: its A is unknown",)]


# a factory in a module with no training event builds the accelerator; a trainer's setup method
# returns it in a tuple; `train` (which no code of the module calls: `model.train()` is the
# model's) hands it to the method with the loop
_FACTORY = """
    from accelerate import Accelerator


    def make_accelerator(cfg):
        if cfg.log_root is None:
            logs = None
        else:
            logs = cfg.log_root + "/run"
        return Accelerator(gradient_accumulation_steps=cfg.accum, project_dir=logs)
"""

_DRIVEN = """
    import torch

    from painter.training.factory import (
        make_accelerator,  # the only place A is read
    )


    class PaintTrainer:
        def train(self, cfg):
            accelerator, dtype = self._setup(cfg)
            model = torch.nn.Linear(4, 4)
            optimizer = torch.optim.AdamW(model.parameters())
            loader = torch.utils.data.DataLoader(cfg.data)
            model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
            self._loop(cfg, accelerator, model, optimizer, loader)

        def _setup(self, cfg):
            return make_accelerator(cfg), torch.bfloat16

        def _loop(self, cfg, accelerator, model, optimizer, loader):
            model.train()
            for epoch in range(cfg.epochs):
                for batch in loader:
                    with accelerator.accumulate(model):
    {body}
"""


def _factory_tree(body: str) -> dict[str, str]:
    return {"painter/__init__.py": "", "painter/training/__init__.py": "",
            "painter/training/factory.py": _FACTORY,
            "painter/training/trainer.py": textwrap.dedent(_DRIVEN).replace(
                "{body}", textwrap.indent(textwrap.dedent(_GOOD_BODY if body == "good" else _BAD_BODY).strip("\n")
                                          .replace("self.", ""), " " * 20))}


def test_an_accelerator_a_factory_module_builds_decides_the_loop_its_caller_runs(tmp_path: Path) -> None:
    run = _run(tmp_path / "good", _factory_tree("good"))
    assert run.errors == []
    assert loop_reasons(run.loops) == [()]  # decided by `train`: A is the factory's `cfg.accum`
    assert run.findings == []
    bad = _run(tmp_path / "bad", _factory_tree("bad"))
    assert [(Path(f.path).name, f.code, f.line) for f in bad.findings] == [("trainer.py", "ACC501", 26)]


# a stepper class in a sibling module, whose instance the script calls once per microbatch
_STEPPER = """
    import torch


    class Stepper:
        def __init__(self):
            self.scaler = torch.cuda.amp.GradScaler()

        def __call__(self, loss, opt, apply):
            self.scaler.scale(loss).backward()
            if apply:
                self.scaler.step(opt)
                self.scaler.update()
                opt.zero_grad()
"""

_STEPPED = """
    import torch

    from stepping import Stepper


    def one_epoch(net, opt, stepper, batches, accum):
        for k, x in enumerate(batches):
            stepper(net(x).pow(2).mean() / accum, opt, apply={gate})


    def main(cfg):
        net = torch.nn.Linear(8, 1)
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        stepper = Stepper()
        for _ in range(cfg.epochs):
            one_epoch(net, opt, stepper, cfg.batches, cfg.accum)
"""


def test_an_instance_of_a_class_from_a_sibling_module_runs_its_call_per_microbatch(tmp_path: Path) -> None:
    def placed(gate: str) -> tuple[list[tuple[str, ...]], list[tuple[str, str, int]]]:
        run = _run(tmp_path / gate, {"stepping.py": _STEPPER, "train.py": _STEPPED.replace("{gate}", gate)})
        return loop_reasons(run.loops), sorted((Path(f.path).name, f.code, f.line) for f in run.findings)

    # decided: the stepper's `__call__` runs the backward and the gated update; nothing resets the
    # gradients at the epoch's end, so its tail joins the next epoch's first update (at the backward
    # in the stepper, and at the call that reaches it)
    assert placed("(k + 1) % accum == 0") == ([()], [("stepping.py", "ACC005", 11), ("train.py", "ACC005", 9)])
    assert placed("k % accum == 0") == ([()], [("stepping.py", "ACC005", 11), ("stepping.py", "ACC006", 11),
                                               ("train.py", "ACC005", 9), ("train.py", "ACC006", 9)])

