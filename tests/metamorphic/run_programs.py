"""Runs training programs one after another in this one interpreter (torch imported once) and
prints, as JSON, what each computed: its stdout (the loss curve the examples print) and a
digest of every parameter after every optimizer step (torch's global post-step hook), so two
programs that train the same have equal digests bit for bit.

Input (stdin): a JSON list of ``{"name": ..., "folder": ..., "main": ...}``. Each program runs
as ``__main__`` from its folder (first on ``sys.path``, the working directory) under
``torch.manual_seed(0)`` and one thread; its own modules are forgotten after it. A main file in
a package (its folder holds ``__init__.py``) runs as that package's module, as ``python -m
pkg.main`` would run it, so that its relative imports resolve."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import runpy
import sys
import traceback

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

STEPS: list[str] = []


def _after_step(optimizer: torch.optim.Optimizer, args: object, kwargs: object) -> None:
    digest = hashlib.sha256()
    for group in optimizer.param_groups:
        for parameter in group["params"]:
            digest.update(parameter.detach().cpu().contiguous().numpy().tobytes())
    STEPS.append(digest.hexdigest())


def run(folder: str, main: str) -> dict[str, object]:
    """Run one program; its stdout, the number of optimizer steps and their digest, or the error."""
    STEPS.clear()
    before = set(sys.modules)
    path, cwd, argv = list(sys.path), os.getcwd(), list(sys.argv)
    out = io.StringIO()
    error = ""
    try:
        os.chdir(folder)
        sys.path.insert(0, folder)
        sys.argv = [os.path.join(folder, main)]
        torch.manual_seed(0)
        with contextlib.redirect_stdout(out):
            if os.path.exists(os.path.join(folder, os.path.dirname(main), "__init__.py")):
                dotted = main.removesuffix(".py").replace("/", ".")
                runpy.run_module(dotted, run_name="__main__", alter_sys=True)
            else:
                runpy.run_path(os.path.join(folder, main), run_name="__main__")
    except SystemExit as exit_:
        if exit_.code not in (0, None):
            error = f"exit {exit_.code}"
    except Exception:  # noqa: BLE001 - the program's own failure is the result
        error = traceback.format_exc(limit=-3)
    finally:
        os.chdir(cwd)
        sys.path[:], sys.argv = path, argv
        for name in set(sys.modules) - before:
            if (getattr(sys.modules[name], "__file__", None) or "").startswith(folder):
                del sys.modules[name]
    return {
        "stdout": out.getvalue(),
        "steps": len(STEPS),
        "digest": hashlib.sha256("".join(STEPS).encode()).hexdigest(),
        "error": error,
    }


def main() -> None:
    torch.set_num_threads(1)
    register_optimizer_step_post_hook(_after_step)
    programs = json.load(sys.stdin)
    print(json.dumps({p["name"]: run(p["folder"], p["main"]) for p in programs}))


if __name__ == "__main__":
    main()
