"""What a fixable finding costs a report: ``accumlint check`` CPU time per output format.

    python benchmarks/fix_latency.py [--lines 3000] [--repeat 3] [--parse-timeout S] [--checkout PATH]

Writes :func:`training_script.build`'s script (about ``lines`` lines, ~15 findings, most of
them fixable) to a temporary directory and times ``accumlint check --no-cache`` on it with the
``github`` output (which shows no fixes) and with ``text``, ``concise``, ``json`` and
``--show-fixes`` (which do), alternating the formats each round after one untimed warm-up.
Prints the median CPU seconds (the process and its workers: ``RUSAGE_CHILDREN``), each format's
ratio to ``github`` (the median of the per-round ratios) and the codes each reported: an
``ACC000`` among them means the check ran past ``parse-timeout`` (the default is kept).
``--parse-timeout 0``: no time limit (a run past the default's shows ``ACC000`` and its
limit's cost). ``--checkout``: the accumlint checkout to run (default: this one), to compare with another
commit (``git worktree add /tmp/before <commit>``). Not a test: nothing here asserts.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from training_script import EXPECTED, build  # noqa: E402 - the generator beside this script

REPO = Path(__file__).resolve().parents[1]
#: label -> the options of ``accumlint check``
FORMATS = {
    "github": ["--output-format", "github"],
    "text": ["--output-format", "text"],
    "concise": ["--output-format", "concise"],
    "json": ["--output-format", "json"],
    "text --show-fixes": ["--output-format", "text", "--show-fixes"],
}
_CODE = re.compile(r"\bACC\d{3}\b")


def run(checkout: Path, path: Path, options: list[str],
        extra: Sequence[str] = ()) -> tuple[float, collections.Counter[str]]:
    """CPU seconds of one ``accumlint check`` of ``path`` (with its workers) and the codes it
    printed (a code named in a finding's own text counts too: read the counts as a sketch)."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    # run beside the file: `python -m` puts the working directory first on the path, ahead of PYTHONPATH
    done = subprocess.run([sys.executable, "-m", "accumlint", "check", "--no-cache", *extra, *options, path.name],
                          env=env, cwd=path.parent, capture_output=True, text=True, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    seconds = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if options[-1] == "github":
        codes = collections.Counter(re.findall(r"title=(ACC\d{3})", done.stdout))
    else:
        codes = collections.Counter(re.findall(r"(?m)^\S+:\d+:\d+: (ACC\d{3})", done.stdout))
        codes += collections.Counter(re.findall(r'"code": "(ACC\d{3})"', done.stdout))
    return seconds, codes


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=3000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--checkout", type=Path, default=REPO)
    parser.add_argument("--formats", default=",".join(FORMATS), help="comma-separated labels of FORMATS")
    parser.add_argument("--parse-timeout", help="passed on (0: none, to see the whole cost of a check past it)")
    args = parser.parse_args(argv)
    labels = args.formats.split(",")
    extra = [] if args.parse_timeout is None else ["--parse-timeout", args.parse_timeout]
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "train.py"
        path.write_text(build(args.lines))
        lines = path.read_text().count("\n")
        print(f"{path.name}: {lines} lines, written with {len(EXPECTED)} findings "
              f"({', '.join(f'{c} x{n}' for c, n in sorted(collections.Counter(EXPECTED).items()))})")
        run(args.checkout, path, FORMATS["github"], extra)  # warm-up: bytecode, page cache
        times: dict[str, list[float]] = {label: [] for label in labels}
        codes: dict[str, collections.Counter[str]] = {}
        for round_ in range(args.repeat):
            for label in labels if round_ % 2 == 0 else reversed(labels):
                seconds, codes[label] = run(args.checkout, path, FORMATS[label], extra)
                times[label].append(seconds)
    base = times.get("github")
    print(f"{'output':<20} {'CPU s (median)':>14} {'x github':>9}  codes reported")
    for label in labels:
        ratio = (f"{statistics.median(t / b for t, b in zip(times[label], base, strict=True)):.2f}"
                 if base else "-")
        found = ", ".join(f"{c} x{n}" for c, n in sorted(codes[label].items())) or "none"
        print(f"{label:<20} {statistics.median(times[label]):>14.2f} {ratio:>9}  {found}")


if __name__ == "__main__":
    main()
