"""``python -m runtime_guard``: ``show`` a saved card, ``run`` a script under the probe, ``demo``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status (1 when findings were reported)."""
    parser = argparse.ArgumentParser(prog="python -m runtime_guard")
    sub = parser.add_subparsers(dest="command", required=True)
    show = sub.add_parser("show", help="pretty-print a saved report/card JSON")
    show.add_argument("card", type=Path)
    show.add_argument("--html", type=Path, help="also write a self-contained HTML page here")
    run = sub.add_parser("run", help="run a training script under the probe (zero code changes)",
                         usage="python -m runtime_guard run [-A N] [--groups G] [--at-epoch-end] [--json OUT] "
                               "SCRIPT [ARGS ...]")
    run.add_argument("script", type=Path)
    run.add_argument("--accumulation-steps", "-A", type=int, default=None)
    run.add_argument("--groups", type=int, default=2)
    run.add_argument("--at-epoch-end", action="store_true",
                     help="probe the end of the first epoch of the DataLoader the loop iterates (ACC005; needs -A)")
    run.add_argument("--json", type=Path, help="write the report (findings + card) here")
    run.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script (options of `run` go "
                                                            "before SCRIPT)")
    demo = sub.add_parser("demo", help="the linter and the guard on the bundled example")
    demo.add_argument("paths", nargs="*", default=["examples"])
    demo.add_argument("--groups", type=int, default=2)
    ns = parser.parse_args(argv)

    if ns.command == "show":
        from runtime_guard.render import render_report

        data = json.loads(ns.card.read_text(encoding="utf-8"))
        report = data if "card" in data else {"findings": [], "card": data}
        print(render_report(report))
        if ns.html:
            from runtime_guard.html import render_html

            ns.html.write_text(render_html(report), encoding="utf-8")
            print(f"wrote {ns.html}")
        return 0
    if ns.command == "run":
        from runtime_guard.discover import run_script

        probe = run_script(ns.script, ns.args, accumulation_steps=ns.accumulation_steps, groups=ns.groups,
                           at="epoch_end" if ns.at_epoch_end else "start")
        report = probe.report()
        if report is None:
            print(f"runtime guard: nothing probed: {probe.reason}", file=sys.stderr)
            return 2
        print(report)
        if ns.json:
            report.to_json(ns.json)
        return 1 if report.findings else 0
    from runtime_guard.demo import run_demo

    return run_demo(ns.paths, ns.groups)


if __name__ == "__main__":
    sys.exit(main())
