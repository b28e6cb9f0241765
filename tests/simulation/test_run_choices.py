"""Which runs of a configuration ``check`` makes, and which bodies count as loops of their own.

A training script meets many run-level choices (``--amp``, ``--channels-last``, ``--ema``, …); ``check``
makes three runs per configuration. The choices whose branches shape the events (build the scaler the
loop calls, perform an event) are taken the other way first; those that only move the data come after.
An implicit microbatch body (a helper with a backward and a conditional update) that an entry of the
project calls is that entry's business, not a loop driven by an unknown caller, even where no run of
the entry reached the call.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import libcst as cst
import pytest

from accumlint.model.module_functions import ModuleFunctions
from accumlint.model.simulation import accumulation_loops, simulate
from accumlint.spec.vocabulary import EventKind
from tests.cli_helpers import cli
from tests.support import tree

#: a gradient scaler whose update runs only where the caller says the group is complete
SCALED_STEP = """
import torch


class ScaledStep:
    def __init__(self):
        self.scaler = torch.cuda.amp.GradScaler()

    def __call__(self, loss, optimizer, apply=True):
        self.scaler.scale(loss).backward()
        if apply:
            self.scaler.step(optimizer)
            self.scaler.update()
"""

#: a script with many switches: ``--half`` builds the scaler the loop calls (met first); three others
#: build objects that nothing calls, the rest only move the data (met later: they used to be flipped first)
SCRIPT = """
import argparse

import torch
{import_line}

parser = argparse.ArgumentParser()
for name in ("half", "pin", "nhwc", "cutmix", "swa", "lookahead", "teacher", "verbose", "script"):
    parser.add_argument(f"--{{name}}", action="store_true")
parser.add_argument("--accumulate", type=int, default=1)
opts = parser.parse_args()
model = torch.nn.Linear(4, 2)
optimizer = torch.optim.AdamW(model.parameters())
data = torch.utils.data.DataLoader(torch.randn(32, 4), batch_size=2, drop_last=True)
stepper = ScaledStep() if opts.half else None
if opts.script:
    model = torch.jit.script(model)
swa = torch.optim.swa_utils.AveragedModel(model) if opts.swa else None
ahead = Lookahead(optimizer) if opts.lookahead else None
teacher = Teacher(model) if opts.teacher else None
for epoch in range(2):
    for k, x in enumerate(data):
        x = x.pin_memory() if opts.pin else x
        x = x.to(memory_format=torch.channels_last) if opts.nhwc else x
        x = x.roll(1, 0) if opts.cutmix else x
        loss = model(x).square().mean() / opts.accumulate
        if opts.verbose:
            print(loss.item())
        boundary = (k + 1) % opts.accumulate == 0
        if stepper is not None:
            stepper(loss, optimizer, apply=boundary)
        else:
            loss.backward()
            if boundary:
                optimizer.step()
        if boundary:
            optimizer.zero_grad()
"""


def statistics(root: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    """``check --statistics``'s count of accumulation loops over the tree at ``root``."""
    monkeypatch.chdir(root)
    result = cli("check", "--no-cache", "--select", "ALL", "--statistics", "--output-format", "json", ".")
    return json.loads(result.stdout)["accumulation_loops"]


def test_a_switch_that_builds_what_the_loop_calls_is_among_the_runs_check_makes() -> None:
    # the same file holds the scaler, so the loop reaches it wherever `--half` is taken
    source = textwrap.dedent(SCALED_STEP) + textwrap.dedent(SCRIPT.format(import_line=""))
    module = ModuleFunctions(cst.parse_module(source))
    result = next(r for r in simulate(module, "fit.py", judged_only=True) if r.entry.kind == "module")
    halves = [trace for trace in result.traces if ("opts.half", True) in trace.choices]
    assert result.decided
    assert halves, [trace.choices for trace in result.traces]
    assert all(any(e.kind is EventKind.SCALE for e in trace.events) for trace in halves)


def test_a_body_the_project_calls_is_counted_with_its_caller(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tree(tmp_path, {"grad_scaling.py": SCALED_STEP,
                    "fit.py": SCRIPT.format(import_line="from grad_scaling import ScaledStep")})
    assert statistics(tmp_path, monkeypatch) == {"decided": 1, "undecided": 0, "reasons": []}


def test_a_body_no_code_of_the_project_calls_stays_undecided(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tree(tmp_path, {"grad_scaling.py": SCALED_STEP})
    counted = statistics(tmp_path, monkeypatch)
    assert (counted["decided"], counted["undecided"]) == (0, 1)
    assert "a caller the project does not show computes" in json.dumps(counted["reasons"])


def test_a_body_its_own_module_calls_on_a_path_no_run_took_is_no_loop_of_its_own() -> None:
    # the loop calls the scaler only where the plain backward raises: no run raises
    source = textwrap.dedent(SCALED_STEP) + textwrap.dedent("""
        def train(model, optimizer, data, accumulate):
            stepper = ScaledStep()
            for k, x in enumerate(data):
                loss = model(x).mean() / accumulate
                boundary = (k + 1) % accumulate == 0
                try:
                    loss.backward()
                except RuntimeError:
                    stepper(loss, optimizer, apply=boundary)
                    continue
                if boundary:
                    optimizer.step()
                    optimizer.zero_grad()
        """)
    results = simulate(ModuleFunctions(cst.parse_module(source)), "fit.py", judged_only=True)
    body = next(r for r in results if r.entry.kind == "body")
    assert body.driven_by == "the entry 'train'"
    assert accumulation_loops(results) == [()]
