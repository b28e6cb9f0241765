"""One bug, one finding: a loop is analysed in its own function and again in every caller that
inlines that function. From a caller the same bug must not come out a second time, neither at
the caller's call (lifted past a function that drives another module's microbatch step) nor at
the same place worded with the helper's names."""

from __future__ import annotations

import os
from pathlib import Path

from accumlint.run import runner
from accumlint.settings.config import Settings
from tests.support import EVERY_CODE, tree

MICRO_RUNNER = """
class MicroRunner:
    def __init__(self, model, optimizer):
        self.model = model
        self.optimizer = optimizer

    def run(self, pieces):
        for piece in pieces:
            loss = self.model(piece) / len(pieces)
            loss.backward()
            {reset}

    def commit(self):
        self.optimizer.step()
"""

DRIVER = """
from lib.accum import MicroRunner


def epoch(model, optimizer, loader):
    runner = MicroRunner(model, optimizer)
    for batch in loader:
        runner.run(batch.chunk(4))
        runner.commit()


def train(model, optimizer, loader, epochs):
    for _ in range(epochs):
        epoch(model, optimizer, loader)
"""


def _run(root: Path, reset: str) -> list[tuple[str, str, int, str, tuple[tuple[str, int, int], ...]]]:
    files = {"lib/__init__.py": "", "lib/accum.py": MICRO_RUNNER.format(reset=reset), "train.py": DRIVER}
    paths = tree(root, files)
    cwd = os.getcwd()
    os.chdir(root)  # related locations are relative to the working folder
    try:
        run = runner.check_files(paths, Settings(project_root=root), EVERY_CODE, jobs=1)
    finally:
        os.chdir(cwd)
    assert run.errors == []
    return [(os.path.relpath(f.path, root), f.code, f.line, f.message, f.related) for f in run.findings]


def test_a_driver_of_another_modules_micro_loop_is_no_wrapper(tmp_path: Path) -> None:
    # epoch() performs no backward of its own, but the runner it calls does: the finding stays at
    # the call of the runner in epoch()'s loop, not at the call of epoch() in the epochs loop
    found = _run(tmp_path, "self.optimizer.zero_grad()")
    assert [(path, code, line) for path, code, line, _, _ in found] == [("train.py", "ACC001", 8)]
    _, _, _, message, related = found[0]
    assert message.startswith("`runner.optimizer` is reset on every microbatch")  # epoch()'s own names
    assert related == (("lib/accum.py", 11, 13),)


def test_the_fixed_micro_loop_is_silent_from_every_caller(tmp_path: Path) -> None:
    assert _run(tmp_path, "pass") == []


SAME_MODULE = """
class Trainer:
    def __init__(self, model, optimizer):
        self.model = model
        self.optimizer = optimizer

    def micro(self, batch):
        loss = self.model(batch) / 4
        loss.backward()
        self.optimizer.zero_grad()

    def update(self):
        self.optimizer.step()


def fit(model, optimizer, loader):
    trainer = Trainer(model, optimizer)
    for index, batch in enumerate(loader):
        trainer.micro(batch)
        if (index + 1) % 4 == 0:
            trainer.update()


def main(model, optimizer, loader):
    fit(model, optimizer, loader)


if __name__ == "__main__":
    main(None, None, [])
"""


def test_a_loop_reached_from_two_callers_of_one_module_reports_once(tmp_path: Path) -> None:
    paths = tree(tmp_path, {"train.py": SAME_MODULE})
    run = runner.check_files(paths, Settings(project_root=tmp_path), EVERY_CODE, jobs=1)
    assert [(f.code, f.line) for f in run.findings] == [("ACC001", 10)]
    assert run.findings[0].message.startswith("`trainer.optimizer` is reset")
