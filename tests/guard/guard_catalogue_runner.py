"""Runs catalogue examples under the runtime guard's script probe, one after another in one process
(one torch import), and writes one JSON line per event on its stdout: ``{"start": path}`` before an
example, ``{"path": path, "result": {"codes": [...], "checks": {...}} | {"error": ...}}`` after it.
The examples' own output, Python's and the C level's, goes to /dev/null.

Usage: python guard_catalogue_runner.py EXAMPLE.py ...
Each example runs as __main__ with A from its ACCUMULATION_STEPS, and with the probe at the
epoch end (``at="epoch_end"``) in the folders of codes that need it (``RUNTIME_CHECKS``); between examples the
environment, cwd and Accelerate's singleton state are reset, and the runner checks that no
global module hook was left behind.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import sys
import traceback
import warnings
from typing import TextIO

import torch

from runtime_guard.checks import RUNTIME_CHECKS
from runtime_guard.discover import run_script


def _reset_accelerate() -> None:
    if "accelerate" in sys.modules:
        from accelerate.state import AcceleratorState, GradientState

        AcceleratorState._reset_state(reset_partial_state=True)
        GradientState._reset_state()


def _emit(out: TextIO, event: dict[str, object]) -> None:
    out.write(json.dumps(event) + "\n")
    out.flush()


def main(paths: list[str]) -> None:
    torch.set_num_threads(1)
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")  # the events; fd 1 itself goes to /dev/null
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)
    for path in paths:
        _emit(out, {"start": path})
        text = open(path, encoding="utf-8").read()
        match = re.search(r"^ACCUMULATION_STEPS\s*=\s*(\d+)", text, re.M)
        options: dict[str, object] = {"accumulation_steps": int(match.group(1))} if match else {}
        code = re.search(r"(ACC\d{3})-[^/\\]*[/\\][^/\\]+$", path)
        if code and code.group(1) in RUNTIME_CHECKS and RUNTIME_CHECKS[code.group(1)].needs == "epoch-end":
            options["at"] = "epoch_end"
        try:
            with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                probe = run_script(path, **options)
            report = probe.report()
            leftover = len(torch.nn.modules.module._global_forward_pre_hooks)
            result = (
                {"codes": sorted(report.codes), "checks": report.card["checks"], "leftover_hooks": leftover}
                if report is not None else {"error": f"nothing probed: {probe.reason}"}
            )
        except BaseException:  # noqa: BLE001 - report per example, keep going
            result = {"error": traceback.format_exc(limit=3)}
        finally:
            _reset_accelerate()
        _emit(out, {"path": path, "result": result})


if __name__ == "__main__":
    main(sys.argv[1:])
