"""A simulated run's finding on a training loop of one project module, reached from a script of
another (``model = TextModel(...); model.train_model(rows)``), is reported once, in the module that
loops, where the code to change is, when both files are checked in one run and that module's own
check finds it (its simulations run the loop with what the script passes too). Checked alone (a
pre-commit hook given the script only), the script still reports it at its call. A helper of
another module that a script's own loop calls per microbatch is no loop of its own: the finding
stays with the script's loop."""

from __future__ import annotations

from pathlib import Path

from accumlint.run import runner
from accumlint.settings.config import Settings
from tests.support import EVERY_CODE, tree

#: a library model class whose `train` loops; its settings a dataclass the caller may override
_TRAINER = """
    from dataclasses import dataclass

    import torch


    @dataclass
    class RunArgs:
        gradient_accumulation_steps: int = 1
        num_train_epochs: int = 1


    class TextModel:
        def __init__(self, name, args=None):
            self.args = RunArgs()
            if args is not None:
                for key, value in args.items():
                    setattr(self.args, key, value)
            self.model = torch.nn.Linear(4, 1)

        def train_model(self, rows):
            return self.train(torch.utils.data.DataLoader(rows, batch_size=2))

        def train(self, loader):
            optimizer = torch.optim.AdamW(self.model.parameters())
            for _ in range(self.args.num_train_epochs):
                for step, batch in enumerate(loader):
                    loss = self.model(batch).mean() / self.args.gradient_accumulation_steps
                    loss.backward()
                    if (step + 1) % self.args.gradient_accumulation_steps == 0:
                        optimizer.step()
                        optimizer.zero_grad()
"""

#: the script asks for three epochs (the settings' default is one: a tail then never joins a next epoch)
_SCRIPT = """
    from lab.trainer import TextModel

    model = TextModel("small", args={"num_train_epochs": 3})
    model.train_model(list(range(10)))
"""

_HELPER = """
    def backward_step(loss, optimizer):
        optimizer.zero_grad()
        loss.backward()
"""

_HELPED = """
    import torch

    from lab.helpers import backward_step

    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = torch.utils.data.DataLoader(list(range(10)), batch_size=2)
    for epoch in range(3):
        for i, batch in enumerate(loader):
            backward_step(model(batch).mean() / 4, optimizer)
            if (i + 1) % 4 == 0:
                optimizer.step()
"""


def _findings(root: Path, files: dict[str, str], checked: list[str] | None = None) -> list[tuple[str, str]]:
    paths = tree(root, {"lab/__init__.py": "", **files})
    chosen = [p for p in paths if checked is None or Path(p).relative_to(root).as_posix() in checked]
    result = runner.check_files(chosen, Settings(project_root=root), EVERY_CODE, jobs=1)
    assert result.errors == []
    return sorted((Path(f.path).relative_to(root).as_posix(), f.code) for f in result.findings)


def test_a_loop_of_another_checked_module_is_reported_there_only(tmp_path: Path) -> None:
    files = {"lab/trainer.py": _TRAINER, "run.py": _SCRIPT}
    # the tail after the last full group joins the next epoch's first update (ACC005)
    assert _findings(tmp_path / "both", files) == [("lab/trainer.py", "ACC005")]
    assert _findings(tmp_path / "alone", files, ["run.py"]) == [("run.py", "ACC005")]


def test_a_helper_called_from_the_scripts_own_loop_keeps_the_finding_in_the_script(tmp_path: Path) -> None:
    # the reset in the helper runs on every microbatch of the script's loop: ACC001 is the loop's
    found = _findings(tmp_path, {"lab/helpers.py": _HELPER, "train.py": _HELPED})
    assert ("train.py", "ACC001") in found
