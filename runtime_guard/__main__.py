"""``python -m runtime_guard``: ``show`` a saved card, ``run`` a script under the probe, ``demo``.

Exit status of ``run``: 0 when the probed groups gave no finding (also with findings under
``--exit-zero``, and under ``torchrun``, see below), 1 when they gave findings, 2 when nothing
was probed or the command could not run (no such script, torch not installed, a report that
cannot be written); a script that exits with a non-zero status or raises keeps its own status
or traceback, and its report is still printed and written (from a ``finally``). Under ``torchrun``
(``TORCHELASTIC_RUN_ID`` set) a non-zero status makes the elastic agent stop the other ranks and
print a ``ChildFailedError``, so findings end the rank with 0 there (the report says so;
``--exit-code`` keeps 1); the report is printed by rank 0 and each other rank prints one line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


def _under_torchrun() -> bool:
    return "TORCHELASTIC_RUN_ID" in os.environ


def _rank() -> int:
    return int(os.environ.get("RANK", "0") or 0)


def _rank_path(path: Path, rank: int) -> Path:
    """``card.json`` for rank 0, ``card.rank1.json`` for rank 1, ..."""
    return path if rank == 0 else path.with_name(f"{path.stem}.rank{rank}{path.suffix}")


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m runtime_guard")
    sub = parser.add_subparsers(dest="command", required=True)
    show = sub.add_parser("show", help="pretty-print a saved report/card JSON")
    show.add_argument("card", type=Path)
    show.add_argument("--html", type=Path, help="also write a self-contained HTML page here")
    run = sub.add_parser("run", help="run a training script under the probe (zero code changes)",
                         usage="python -m runtime_guard run [-A N] [--groups G] [--at-epoch-end] [--submodule PATH] "
                               "[--json OUT] "
                               "[--exit-zero | --exit-code] (SCRIPT | -m MODULE) [ARGS ...]",
                         epilog="exit status: 0 no findings (or --exit-zero, or findings under torchrun unless "
                                "--exit-code), 1 findings, 2 nothing probed / no such script / no torch")
    run.add_argument("script", type=Path, nargs="?", help="the training script (or -m MODULE)")
    run.add_argument("-m", "--module", help="run this module as `python -m MODULE` does; every argument after "
                                            "MODULE is the module's")
    run.add_argument("--accumulation-steps", "-A", type=int, default=None)
    run.add_argument("--groups", type=int, default=2)
    run.add_argument("--at-epoch-end", action="store_true",
                     help="probe the end of the first epoch of the DataLoader the loop iterates (ACC005; needs -A)")
    run.add_argument("--submodule", metavar="PATH",
                     help="probe this submodule of the model found (a dotted attribute path, e.g. `net` for "
                          "model.net): for a model whose forward returns its own loss, the inner network's logits "
                          "show the loss weights (ACC101-ACC103)")
    run.add_argument("--json", type=Path, help="write the report (findings + card) here (rank R > 0: NAME.rankR.json)")
    status = run.add_mutually_exclusive_group()
    status.add_argument("--exit-zero", action="store_true", help="exit 0 even when there are findings")
    status.add_argument("--exit-code", action="store_true", help="exit 1 on findings under torchrun too")
    run.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script (options of `run` go "
                                                            "before SCRIPT)")
    demo = sub.add_parser("demo", help="the linter and the guard on the bundled example")
    demo.add_argument("paths", nargs="*", default=["examples"])
    demo.add_argument("--groups", type=int, default=2)
    argv = list(sys.argv[1:] if argv is None else argv)
    argv, module_args = _split_module(argv)
    ns = parser.parse_args(argv)
    if ns.command == "run":
        if ns.module is not None:
            ns.args = module_args
        elif ns.script is None:
            parser.error("run: give SCRIPT or -m MODULE")

    if ns.command == "show":
        from runtime_guard.render import render_report

        try:
            data = json.loads(ns.card.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            print(f"error: cannot read the card {ns.card}: {error}", file=sys.stderr)
            return EXIT_ERROR
        report = data if "card" in data else {"findings": [], "card": data}
        print(render_report(report))
        if ns.html:
            from accumlint.files.writing import write_file
            from runtime_guard.html import render_html

            try:
                write_file(ns.html, render_html(report).encode("utf-8"))
            except OSError as error:
                print(f"error: cannot write {ns.html}: {error.strerror or error}", file=sys.stderr)
                return EXIT_ERROR
            print(f"wrote {ns.html}")
        return EXIT_CLEAN
    from runtime_guard import HAS_TORCH, INSTALL_HINT

    if not HAS_TORCH:
        print(f"error: {INSTALL_HINT}", file=sys.stderr)
        return EXIT_ERROR
    if ns.command == "run":
        return _run(ns)
    from runtime_guard.demo import run_demo

    return run_demo(ns.paths, ns.groups)


#: ``run`` options that take a value (the token after them is no SCRIPT).
_VALUED = frozenset({"-A", "--accumulation-steps", "--groups", "--json", "--submodule"})


def _split_module(argv: list[str]) -> tuple[list[str], list[str]]:
    """``run ... -m MODULE ARGS``: everything after MODULE belongs to the module, as with ``python -m``
    (argparse would read its ``--options`` as run's). Returns run's own arguments and the module's."""
    if not argv or argv[0] != "run":
        return argv, []
    previous = ""
    for i, token in enumerate(argv[1:], 1):
        if token in ("-m", "--module"):
            return argv[:i + 2], argv[i + 2:]
        if token.startswith("--module="):
            return argv[:i + 1], argv[i + 1:]
        if not token.startswith("-") and previous not in _VALUED:
            break  # SCRIPT: the rest is the script's
        previous = token
    return argv, []


def _run(ns: argparse.Namespace) -> int:
    from runtime_guard.discover import ScriptProbe, module_origin, run_module, run_script

    options = {"accumulation_steps": ns.accumulation_steps, "groups": ns.groups,
               "at": "epoch_end" if ns.at_epoch_end else "start"}
    if ns.module is not None:
        if module_origin(ns.module) is None:
            print(f"error: no module named {ns.module!r}", file=sys.stderr)
            return EXIT_ERROR
    elif not ns.script.is_file():
        print(f"error: no such script: {ns.script}", file=sys.stderr)
        return EXIT_ERROR
    probe = ScriptProbe(submodule=ns.submodule, **options)
    finished = False
    try:
        if ns.module is not None:
            run_module(ns.module, ns.args, script_probe=probe)
        else:
            run_script(ns.script, ns.args, script_probe=probe)
        finished = True
    finally:
        # also when the script raised or exited non-zero: that trace is the one the user needs; the
        # script's exception then propagates unchanged (its traceback and exit status)
        status = _report_run(ns, probe, finished)
    return status


def _report_run(ns: argparse.Namespace, probe: Any, finished: bool) -> int:
    """Print the report and write ``--json``; returns ``run``'s exit status. After a script that raised
    (``finished`` False) it never raises itself: a failure is printed and the script's exception goes on."""
    try:
        return _write_report(ns, probe, finished)
    except Exception as error:  # noqa: BLE001 - the script's own exception must not be replaced
        if finished:
            raise
        print(f"runtime guard: no report: {type(error).__name__}: {error}", file=sys.stderr)
        return EXIT_ERROR


def _write_report(ns: argparse.Namespace, probe: Any, finished: bool) -> int:
    report = probe.report()
    if report is None:
        print(f"runtime guard: nothing probed: {probe.reason}", file=sys.stderr)
        return EXIT_ERROR
    torchrun, rank = _under_torchrun(), _rank()
    if not finished:
        print("runtime guard: the script raised or exited with an error; the report of what was probed "
              "until then follows", file=sys.stderr)
    if rank == 0:
        print(report)
    else:
        print(f"runtime guard (rank {rank}): {len(report.findings)} finding(s) {sorted(report.codes)}")
    if ns.json:
        try:
            report.to_json(_rank_path(ns.json, rank))
        except OSError as error:
            print(f"error: cannot write the report to {ns.json}: {error.strerror or error}", file=sys.stderr)
            return EXIT_ERROR
    if not report.findings or ns.exit_zero:
        return EXIT_CLEAN
    if torchrun and not ns.exit_code:
        if rank == 0:
            print("runtime guard: exit status 0 under torchrun despite the findings above (a non-zero status "
                  "would make torchrun stop the other ranks); --exit-code keeps 1", file=sys.stderr)
        return EXIT_CLEAN
    return EXIT_FINDINGS


def _main_with_a_closed_pipe() -> int:
    """:func:`main`, for ``python -m runtime_guard ... | head``: a reader that stops reading ends
    the output quietly (exit status 1, no traceback), as the Python documentation's "Note on
    SIGPIPE" recommends; output after that point goes to the null device. Under ``run`` the
    error is the training script's and is raised unchanged."""
    try:
        status = main()
        sys.stdout.flush()
        return status
    except BrokenPipeError:
        if sys.argv[1:2] == ["run"]:
            raise  # the user's script's own exception, unchanged
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1  # the documentation's status for it


if __name__ == "__main__":
    sys.exit(_main_with_a_closed_pipe())
