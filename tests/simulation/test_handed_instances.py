"""An instance of a project class handed to a function of another module (issue 30: an object
known only from how it is used, built in another file and passed in).

The timm-style layout of many vision repositories: ``util/misc.py`` defines a loss scaler whose
``__call__`` backpropagates and, when its ``update_grad`` argument says so, updates; ``main.py``
builds one and hands it, once per epoch, to ``engine.run_epoch``, whose loop calls it once per
microbatch. Nothing in ``engine.py`` shows what the parameter is, and nothing in ``misc.py``
shows who calls it. Before, the script's epoch loop was no training loop at all (its calls
reached no backward), the scaler's ``__call__`` was an undecided implicit body ("a caller the
project does not show"), and where the script did count, its epoch loop was taken for a loop of
micro-steps. Now the walkers that find entries, gates and draws follow the instance through the
call's argument binding, and the run calls the instance's ``__call__``: one accumulation loop,
decided, whatever module each piece sits in.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from accumlint.commands.explain import explain_source
from accumlint.run import runner
from accumlint.run.cache import ResultCache
from accumlint.settings.config import Settings
from tests.support import EVERY_CODE, loop_reasons, tree

SCALER = """
import torch


class GradStepper:
    def __init__(self):
        self._scaler = torch.cuda.amp.GradScaler()

    def __call__(self, loss, optimizer, parameters=None, update_grad=True):
        self._scaler.scale(loss).backward()
        if update_grad:
            self._scaler.unscale_(optimizer)
            self._scaler.step(optimizer)
            self._scaler.update()
"""

ENGINE = """
def run_epoch(model, loader, optimizer, epoch, stepper, args):
    accum = args.accum_iter
    optimizer.zero_grad()
    for i, (x, y) in enumerate(loader):
        {reset}loss = model(x, y) / accum
        stepper(loss, optimizer, parameters=model.parameters(), update_grad=(i + 1) % accum == 0)
        if (i + 1) % accum == 0:
            optimizer.zero_grad()
"""

MAIN = """
def main(args):
    model = torch.nn.Linear(4, 2)
    loader = torch.utils.data.DataLoader(list(range(8)), batch_size=2)
    optimizer = torch.optim.AdamW(model.parameters())
    stepper = GradStepper()
    for epoch in range(args.epochs):
        run_epoch(model, loader, optimizer, epoch, stepper, args)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--accum_iter", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=3)
    main(parser.parse_args())
"""

HEADER = "import argparse\n\nimport torch\n"


def _layout(name: str, reset: str = "") -> dict[str, str]:
    """The same program in one of four layouts (which module holds the scaler, the epoch function
    and the script); ``reset``: a statement put first in the microbatch loop."""
    engine = ENGINE.format(reset=reset)
    if name == "one_module":
        return {"main.py": HEADER + SCALER.replace("import torch\n", "") + engine + MAIN}
    if name == "scaler_apart":
        return {"util/misc.py": SCALER, "main.py": HEADER + "from util.misc import GradStepper\n" + engine + MAIN}
    if name == "engine_apart":
        return {"engine.py": engine,
                "main.py": HEADER + "from engine import run_epoch\n" + SCALER.replace("import torch\n", "") + MAIN}
    return {"util/misc.py": SCALER, "engine.py": engine,
            "main.py": HEADER + "from engine import run_epoch\nfrom util.misc import GradStepper\n" + MAIN}


LAYOUTS = ["one_module", "scaler_apart", "engine_apart", "three_modules"]


def _run(root: Path, files: dict[str, str]) -> runner.Run:
    run = runner.check_files(tree(root, files), Settings(project_root=root), EVERY_CODE, jobs=1)
    assert run.errors == []
    return run


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_loop_is_one_decided_accumulation_loop_in_every_layout(tmp_path: Path, layout: str) -> None:
    run = _run(tmp_path, _layout(layout))
    assert loop_reasons(run.loops) == [()]  # one accumulation loop, decided (no reason left open)
    assert [f.code for f in run.findings] == []


@pytest.mark.parametrize("layout", LAYOUTS)
def test_each_epoch_draws_its_microbatches(tmp_path: Path, layout: str) -> None:
    # the epoch loop is no loop of micro-steps: with A = 2 and four microbatches per epoch, the
    # optimizer updates after the second and the fourth microbatch of each of the two epochs
    files = _layout(layout)
    tree(tmp_path, files)
    main = tmp_path / "main.py"
    (result,) = [r for r in explain_source(str(main), main.read_bytes(), None, str(tmp_path)) if r.traces]
    assert result.decided
    updates = {tuple(t.updates_at()) for t in result.traces
               if t.configuration.accumulation == 2 and t.configuration.microbatches == 4}
    assert updates == {((0, 1), (0, 3), (1, 1), (1, 3))}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_reset_in_the_microbatch_loop_is_found_where_it_loops(tmp_path: Path, layout: str) -> None:
    # reported once, at the reset in the epoch function's loop (the script's call does not repeat
    # it), also where that module alone cannot show what the scaler does
    run = _run(tmp_path, _layout(layout, reset="optimizer.zero_grad()\n        "))
    holder = "engine.py" if "engine.py" in _layout(layout) else "main.py"
    (finding,) = run.findings
    assert (Path(finding.path).name, finding.code) == (holder, "ACC001")
    lines = (tmp_path / holder).read_text().splitlines()
    assert lines[finding.line - 1].strip() == "optimizer.zero_grad()"
    assert "for i, (x, y)" in lines[finding.line - 2]
    assert loop_reasons(run.loops) == [()]


def test_an_instance_that_never_backpropagates_makes_no_loop(tmp_path: Path) -> None:
    # the control: a handed logger whose `__call__` only records is no way to a backward; the
    # epoch function then holds no training loop and nothing is counted
    files = _layout("three_modules")
    files["util/misc.py"] = files["util/misc.py"].replace("self._scaler.scale(loss).backward()", "print(loss)")
    run = _run(tmp_path, files)
    assert loop_reasons(run.loops) == []


def test_a_change_to_the_caller_that_hands_the_instance_rechecks_the_loop(tmp_path: Path) -> None:
    # the epoch function's verdict depends on its caller: with a cache, a script that stops handing
    # the scaler (a stand-in object of no project class) must not leave the old finding in place
    files = _layout("three_modules", reset="optimizer.zero_grad()\n        ")
    paths = tree(tmp_path, files)
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'p'\n", encoding="utf-8")

    def found() -> list[tuple[str, str]]:
        store = ResultCache.load(tmp_path / "cache", "0" * 32, b"s" * 32)
        run = runner.check_files(paths, Settings(project_root=tmp_path), EVERY_CODE, jobs=1, cache=store)
        return [(Path(f.path).name, f.code) for f in run.findings]

    main = tmp_path / "main.py"
    handing = main.read_text()
    main.write_text(handing.replace("stepper = GradStepper()", "stepper = object()"), encoding="utf-8")
    assert found() == []
    main.write_text(handing, encoding="utf-8")
    assert found() == [("engine.py", "ACC001")]
    main.write_text(handing.replace("stepper = GradStepper()", "stepper = object()"), encoding="utf-8")
    assert found() == []
