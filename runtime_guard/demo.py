"""The main job on the bundled example: the linter and the runtime guard on the same files.

``python -m runtime_guard demo [PATH ...]`` (default ``examples/``) checks each training
script with the linter, then runs it for a few groups under the script probe on CPU and
prints the guard's findings and card, and a table of the codes both engines found.
"""

from __future__ import annotations

import contextlib
import io
import re
import warnings
from pathlib import Path

from accumlint.checks import ALL_RULES
from accumlint.pipeline.engine import check_source, rules_for
from runtime_guard.discover import run_script

_A = re.compile(r"^ACCUMULATION_STEPS\s*=\s*(\d+)", re.M)


def _scripts(paths: list[str]) -> list[Path]:
    out: list[Path] = []
    for raw in paths:
        path = Path(raw)
        out.extend(sorted(path.glob("*.py")) if path.is_dir() else [path])
    return out


def run_demo(paths: list[str], groups: int = 2) -> int:
    """Print both engines' results for ``paths``; return 1 when either found something."""
    selected = rules_for(rule.code for rule in ALL_RULES)
    rows = []
    for script in _scripts(paths):
        source = script.read_bytes()
        static = sorted({f.code for f in check_source(str(script), source, selected).findings})
        match = _A.search(source.decode("utf-8", "replace"))
        options = {"accumulation_steps": int(match.group(1))} if match else {}
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            probe = run_script(script, groups=groups, **options)
        report = probe.report()
        print(f"== {script} (run under the probe for {groups} groups on CPU)")
        if report is None:
            print(f"   not probed: {probe.reason}")
            rows.append((script.name, static, None))
            continue
        print(report)
        print()
        rows.append((script.name, static, sorted(report.codes)))
    print("both engines:")
    width = max((len(name) for name, _, _ in rows), default=4)
    print(f"  {'file'.ljust(width)}  {'linter':<28}  guard")
    for name, static, runtime in rows:
        guard = "not probed" if runtime is None else (", ".join(runtime) or "none")
        print(f"  {name.ljust(width)}  {(', '.join(static) or 'none'):<28}  {guard}")
    return 1 if any(static or runtime for _, static, runtime in rows) else 0
