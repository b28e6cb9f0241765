"""Speed benchmark: accumlint against ruff and against a bare LibCST parse, in one run.

    python benchmarks/bench.py [--repeat 5] [--shared ../shared] [--skip-scaling] [--sections 123456789p]
                               [--peer-tree PATH] [--peer-bound 600] [--peers-bin DIR]

Fetches the speed trees with ``shared/corpus/fetch.py --speed`` (torch, transformers,
diffusers, nemo, fairseq), then times, as separate processes started the way a user
starts them, with alternating repetitions (A B, B A, ...) after one untimed warm-up each,
and prints medians and ratios (the median of the per-round ratios) against the targets of
the speed issue:

* accumlint (cold cache) vs ``ruff check --isolated --no-cache`` (ruff's default rules)
  on the transformers tree and on the whole speed set;
* accumlint vs a bare ``libcst.parse_module`` over the corpus loop files (the ``path``
  column of ``shared/corpus/manifest.tsv``; every one of them is parsed), as run by default
  (all cores) and with ``--jobs 1`` (one process, like the bare parse: CPU for CPU);
* cold vs warm cache, ``--jobs 1`` vs all cores (on the transformers tree and the speed set);
* peak memory on the whole speed set: the sampled PSS sum over the process tree on Linux
  (proportional set size: a page that forked workers share with the main process counts
  once, split between them; the memory the run holds, and what the target is judged on),
  with the RSS sum (which counts each shared page once per process) and the largest
  process's peak RSS beside it;
* 1x, 2x, 4x hard-linked copies of the transformers tree (cost should grow linearly);
* the language server (section 8, ``benchmarks/lsp_latency.py``): a scripted editor opens a
  3,000-line training file and a small one, makes 20 edits, asks for code actions; p50/p95
  latency per request kind, and how long the small file waits while the large one is analysed;
* pre-commit (section 9): one changed file of a large project (the installed ``accelerate`` package, copied
  into a project of its own), checked alone as a hook checks it, with the project index warm
  (the cache of the previous run) and cold (no cache), and the whole package cold: wall and
  CPU against the targets of the latency issue (sections 8 and 9 need no speed trees);
* peers (section p): accumlint (cold cache) against the linters that share its substrate, Fixit
  (``fixit lint``, its default rules) and TorchFix (``torchfix``, its default rules), and
  against ruff (its default rules), on one tree (``--peer-tree``; default: the transformers tree,
  or without the speed trees the installed ``accelerate`` package); each peer runs once under a
  time bound (``--peer-bound`` seconds): one that does not finish is reported as "> bound", one
  that is not installed (beside this Python, in ``--peers-bin``, or on ``PATH``) as "not
  installed". TorchFix 0.7 pins LibCST < 1.6 and Fixit 2.2 click < 8.2, older than accumlint's own
  environment has: give them one of their own (``python -m venv peers && peers/bin/pip install
  fixit torchfix``) and name its ``bin`` folder with ``--peers-bin`` (they are no dependency of
  accumlint's, not even an extra: installed beside it they would downgrade its LibCST).

Only public tools: the ``accumlint`` and ``ruff`` commands, ``python -c`` for LibCST,
``time.perf_counter`` for wall time and ``os.wait4`` for peak RSS. The commands run
with Python's bytecode cache enabled (``PYTHONDONTWRITEBYTECODE`` removed), as on a
user's machine. Not a test: the figures depend on the machine, so nothing here asserts.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
#: the environment of every timed command: bytecode caching on, as a user has it, and this
#: checkout's accumlint first on the path (an installed accumlint may be another checkout)
ENV = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
ENV["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
BARE_PARSE = "import sys, libcst\nfor path in sys.argv[1:]:\n    libcst.parse_module(open(path, 'rb').read())\n"


def tool(name: str, folder: Path | None = None) -> list[str]:
    """The command of a tool installed in ``folder`` or beside this Python (else on PATH)."""
    command = find_tool(name, folder)
    if command is None:
        sys.exit(f"bench: `{name}` not found; install the dev extra: pip install -e '.[dev]'")
    return command


def find_tool(name: str, folder: Path | None = None) -> list[str] | None:
    """:func:`tool`'s command, or None where it is not installed."""
    for candidate in (folder / name if folder is not None else None, BIN / name):
        if candidate is not None and candidate.exists():
            return [str(candidate)]
    found = shutil.which(name)
    return None if found is None else [found]


ACCUMLINT = tool("accumlint")
RUFF = tool("ruff")


def fetch_speed_trees(shared: Path) -> tuple[Path, list[Path]]:
    """Run fetch.py --speed; return the corpus folder and the speed trees in it."""
    fetch = shared / "corpus" / "fetch.py"
    if not fetch.exists():
        sys.exit(f"bench: {fetch} not found (give --shared or set ACCUMLINT_SHARED)")
    done = subprocess.run([sys.executable, str(fetch), "--speed"], check=True, capture_output=True, text=True)
    dest = Path(done.stdout.strip().splitlines()[-1])
    spec = importlib.util.spec_from_file_location("corpus_fetch", fetch)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return dest, [dest / f"{name}-{version}-{kind}" for name, version, kind in module.SPEED]


def loop_files(shared: Path, dest: Path) -> list[str]:
    """The distinct corpus loop files of the manifest, under the unpacked packages."""
    with (shared / "corpus" / "manifest.tsv").open(newline="") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    paths = {dest / f"{r['package']}-{r['version']}-{r['archive_kind']}" / r["path"] for r in rows}
    return sorted(str(p) for p in paths if p.exists())


@dataclass(frozen=True)
class Sample:
    """One timed run: wall seconds, and CPU seconds (user + system) of the whole process tree."""

    wall: float
    cpu: float


def execute(command: Sequence[str], cwd: Path | None = None) -> tuple[Sample, float]:
    """Run ``command`` (in ``cwd``, if given); its :class:`Sample` and the peak RSS (MB) of its
    largest process."""
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV, cwd=cwd)
    _, status, usage = os.wait4(process.pid, 0)  # the usage includes the reaped worker processes
    wall = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    peak = usage.ru_maxrss / (2**20 if sys.platform == "darwin" else 1024)
    return Sample(wall, usage.ru_utime + usage.ru_stime), peak


def bounded(command: Sequence[str], bound: float, cwd: Path | None = None) -> Sample | None:
    """Run ``command`` once (in ``cwd``) in a session of its own; its :class:`Sample`, or None
    where it ran past ``bound`` seconds (then its whole process group is killed)."""
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV, cwd=cwd,
                               start_new_session=True)
    try:
        while time.perf_counter() - start <= bound:
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                process.returncode = os.waitstatus_to_exitcode(status)
                return Sample(time.perf_counter() - start, usage.ru_utime + usage.ru_stime)
            time.sleep(0.05)
        return None
    finally:
        if process.returncode is None:  # past the bound, or the benchmark interrupted: its workers too
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def timed(command: Sequence[str], setup: Callable[[], None] | None = None, cwd: Path | None = None,
          ) -> Callable[[], Sample]:
    """A runner of ``command`` in ``cwd`` (``setup`` runs first, untimed)."""

    def run() -> Sample:
        if setup is not None:
            setup()
        return execute(command, cwd)[0]

    return run


def alternate(runs: dict[str, Callable[[], Sample]], repeat: int) -> dict[str, list[Sample]]:
    """Each run's samples: one untimed warm-up each, then ``repeat`` rounds that alternate the
    order (A B, B A, ...) so drift in the machine's load hits both alike. Prints the medians."""
    for run in runs.values():
        run()
    samples: dict[str, list[Sample]] = {name: [] for name in runs}
    names = list(runs)
    for round_ in range(repeat):
        for name in names if round_ % 2 == 0 else reversed(names):
            samples[name].append(runs[name]())
    for name, values in samples.items():
        walls = [v.wall for v in values]
        print(
            f"    {name:<28} wall {statistics.median(walls):7.3f} s (min {min(walls):.3f}, max {max(walls):.3f})"
            f"   cpu {statistics.median(v.cpu for v in values):7.3f} s"
        )
    return samples


def verdict(label: str, a: list[Sample], b: list[Sample], target: float | None) -> str:
    """Print and return the wall-time ratio a/b, judged against ``target``, and the CPU-time
    ratio: each the median of the per-round ratios (a round's two runs are neighbours in time,
    so a change in the machine's speed between rounds cancels out)."""
    ratio = statistics.median(x.wall / y.wall for x, y in zip(a, b, strict=True))
    cpu = statistics.median(x.cpu / y.cpu for x, y in zip(a, b, strict=True))
    line = f"  => {label:<44} wall {ratio:5.2f}   cpu {cpu:5.2f}"
    if target is not None:
        line += f"   target wall <= {target:<4} {'MET' if ratio <= target else 'MISSED'}"
    print(line)
    return line


def _tree_memory(root: int) -> tuple[int, int]:
    """RSS and PSS (kB) summed over ``root`` and its descendants (Linux /proc). The RSS sum
    counts the pages forked workers share with the main process once per process; PSS
    splits them among the processes, so its sum is the memory the run really holds."""
    parents: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as handle:
                parents[int(entry.name)] = int(handle.read().rsplit(b")", 1)[1].split()[1])
        except OSError:
            continue
    tree, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent and pid not in tree]
        tree.update(children)
        frontier.extend(children)
    rss = pss = 0
    for pid in tree:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as handle:
                for line in handle:
                    if line.startswith("Rss:"):
                        rss += int(line.split()[1])
                    elif line.startswith("Pss:"):
                        pss += int(line.split()[1])
        except OSError:
            continue
    return rss, pss


def peak_memory(command: Sequence[str]) -> tuple[float, tuple[float, float] | None]:
    """The largest single process's peak RSS, and the peaks of the RSS and PSS sums sampled
    over the process tree (None where /proc is missing), in MB."""
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    sampled = (0, 0) if os.path.isdir("/proc") else None
    while True:
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            process.returncode = os.waitstatus_to_exitcode(status)
            break
        if sampled is not None:
            rss, pss = _tree_memory(process.pid)
            sampled = (max(sampled[0], rss), max(sampled[1], pss))
        time.sleep(0.05)
    largest = usage.ru_maxrss / (2**20 if sys.platform == "darwin" else 1024)
    return largest, None if sampled is None else (sampled[0] / 1024, sampled[1] / 1024)


def judged(label: str, samples: list[Sample], target: float, on: str = "wall") -> str:
    """Print and return the median ``on`` time (``wall`` or ``cpu``, seconds) of ``samples``
    against an absolute ``target``."""
    value = statistics.median(getattr(sample, on) for sample in samples)
    line = f"  => {label:<44} {on} {value:6.3f} s   target <= {target} s {'MET' if value <= target else 'MISSED'}"
    print(line)
    return line


class _Edits:
    """Called, rewrites the file at ``path`` with a new last line (a file a commit changed)."""

    def __init__(self, path: Path) -> None:
        self.path, self.original, self.count = path, path.read_bytes(), 0

    def __call__(self) -> None:
        self.count += 1
        self.path.write_bytes(self.original + f"# pre-commit edit {self.count}\n".encode())

    def restore(self) -> None:
        self.path.write_bytes(self.original)


#: the package a pre-commit run checks one file of, and the files it changes (issue 33's targets)
PRE_COMMIT_PACKAGE = "accelerate"
PRE_COMMIT_FILES = ("tracking.py", "accelerator.py")


def latency_sections(sections: str, scratch: Path, repeat: int) -> list[str]:
    """Sections 8 (the language server) and 9 (pre-commit): what users wait for, no speed trees."""
    lines: list[str] = []
    if "8" in sections:
        print("8. language server: a scripted editor on a 3,000-line training file and a small one")
        lines.extend(lsp_latency())
    if "9" in sections:
        lines.extend(pre_commit(scratch, repeat))
    return lines


def package_project(project: Path) -> Path | None:
    """A copy of the installed :data:`PRE_COMMIT_PACKAGE` in ``project``, a project of its own (a
    ``pyproject.toml`` marks its root; linters skip an environment's ``site-packages``), with
    times an hour old, as a checkout long made; None where the package is not installed."""
    spec = importlib.util.find_spec(PRE_COMMIT_PACKAGE)
    if spec is None or spec.origin is None:
        return None
    if not project.exists():
        shutil.copytree(Path(spec.origin).parent, project / PRE_COMMIT_PACKAGE,
                        ignore=shutil.ignore_patterns("__pycache__"))
        (project / "pyproject.toml").write_text("[project]\nname = 'pre-commit-bench'\n", encoding="utf-8")
        hour_ago = time.time() - 3600
        for folder, _, names in os.walk(project):
            for name in names:
                os.utime(os.path.join(folder, name), (hour_ago, hour_ago))
    return project


def pre_commit(scratch: Path, repeat: int) -> list[str]:
    """Section 9: one changed file of a large project, checked alone, the project index warm and
    cold; then the whole package cold, copied into a project of its own (:func:`package_project`)."""
    project = package_project(scratch / "pre-commit")
    if project is None:
        print(f"9. pre-commit: skipped ({PRE_COMMIT_PACKAGE} is not installed)")
        return []
    cache_dir = scratch / "pre-commit-cache"
    check = [*ACCUMLINT, "check", "--exit-zero", "--quiet", "--output-format", "concise", "--cache-dir", str(cache_dir)]
    files = len(list((project / PRE_COMMIT_PACKAGE).rglob("*.py")))
    print(f"9. pre-commit: one changed file of {PRE_COMMIT_PACKAGE} ({files} files), index warm and cold")
    lines: list[str] = []
    for name in PRE_COMMIT_FILES:
        relative = f"{PRE_COMMIT_PACKAGE}/{name}"
        edit = _Edits(project / relative)

        def cold(edit: _Edits = edit) -> None:
            shutil.rmtree(cache_dir, ignore_errors=True)
            edit()

        execute([*check, relative], project)  # the index of the previous commit
        samples = alternate({f"{name} index warm": timed([*check, relative], edit, project),
                             f"{name} index cold": timed([*check, relative], cold, project)}, repeat)
        lines.append(judged(f"pre-commit {name}, index warm", samples[f"{name} index warm"], 0.5))
        lines.append(judged(f"pre-commit {name}, index cold", samples[f"{name} index cold"], 1.0))
        edit.restore()
    whole = alternate({f"{PRE_COMMIT_PACKAGE} package cold": timed(
        [*check, PRE_COMMIT_PACKAGE], lambda: shutil.rmtree(cache_dir, ignore_errors=True), project)}, repeat)
    lines.append(judged(f"{PRE_COMMIT_PACKAGE} package cold", whole[f"{PRE_COMMIT_PACKAGE} package cold"], 3.5, "cpu"))
    return lines


#: the peers (label, command, its arguments before the tree), each with its default rules; ruff
#: isolated from any configuration, as sections 1 and 4 run it
PEERS = (
    ("Fixit", "fixit", ("lint",)),
    ("TorchFix", "torchfix", ()),
    ("ruff", "ruff", ("check", "--isolated", "--no-cache", "--exit-zero", "--quiet")),
)
#: the issue's target for the peers that share LibCST: accumlint at least this many times faster
PEER_TARGET = 10.0
#: a peer that finishes within this many seconds runs ``repeat`` times (its median is judged)
QUICK_PEER_S = 10.0


def peers(tree: Path, bound: float, repeat: int, folder: Path | None, scratch: Path) -> list[str]:
    """Section p: accumlint (cold cache, all cores) on ``tree`` against each of :data:`PEERS`
    found in ``folder``, beside this Python or on PATH, each run under ``bound`` seconds; the
    ratios peer / accumlint (wall, and CPU of the whole process tree)."""
    cache_dir = scratch / "peers-cache"
    check = [*ACCUMLINT, "check", "--exit-zero", "--quiet", "--output-format", "concise", "--cache-dir", str(cache_dir)]
    print(f"p. peers on {tree} ({python_files(tree)} files), default rules, each bound to {bound:g} s")

    def clear() -> None:
        shutil.rmtree(cache_dir, ignore_errors=True)

    own = alternate({"accumlint cold": timed([*check, str(tree)], clear)}, repeat)["accumlint cold"]
    wall, cpu = statistics.median(s.wall for s in own), statistics.median(s.cpu for s in own)
    lines = []
    for label, name, arguments in PEERS:
        command = find_tool(name, folder if name != "ruff" else None)
        if command is None:
            line = f"  => peer {label:<9} not installed"
        else:
            samples = _peer_samples([*command, *arguments, str(tree)], bound, repeat)
            if not samples:
                line = (f"  => peer {label:<9} > {bound:g} s (did not finish): accumlint / peer "
                        f"wall < {wall / bound:.3f}")
            else:
                peer_wall = statistics.median(s.wall for s in samples)
                peer_cpu = statistics.median(s.cpu for s in samples)
                line = (f"  => peer {label:<9} wall {peer_wall:8.2f} s  cpu {peer_cpu:8.2f} s   peer / accumlint: "
                        f"wall {peer_wall / wall:6.2f}  cpu {peer_cpu / cpu:6.2f}")
            if name != "ruff" and command is not None:
                faster = bound / wall if not samples else peer_wall / wall
                line += f"   target >= {PEER_TARGET:g}x {'MET' if faster >= PEER_TARGET else 'MISSED'}"
        print(line)
        lines.append(line)
    return lines


def _peer_samples(command: Sequence[str], bound: float, repeat: int) -> list[Sample]:
    """One bounded run of ``command`` (none where it does not finish), ``repeat`` where it is quick."""
    first = bounded(command, bound)
    if first is None:
        return []
    samples = [first]
    while first.wall < QUICK_PEER_S and len(samples) < repeat:
        again = bounded(command, bound)
        if again is None:
            break
        samples.append(again)
    return samples


def default_peer_tree(scratch: Path) -> Path | None:
    """The package section 9 checks, copied (:func:`package_project`; None: not installed)."""
    project = package_project(scratch / "pre-commit")
    return None if project is None else project / PRE_COMMIT_PACKAGE


def copies(tree: Path, count: int, into: Path) -> Path:
    """``count`` hard-linked copies of ``tree`` (plain copies where links fail) under ``into``."""
    target = into / f"x{count}"
    for index in range(count):
        shutil.copytree(tree, target / f"copy{index}", copy_function=_link_or_copy)
    return target


def _link_or_copy(source: str, destination: str) -> None:
    try:
        os.link(source, destination)
    except OSError:
        shutil.copy2(source, destination)


def python_files(*trees: Path) -> int:
    return sum(1 for tree in trees for _ in tree.rglob("*.py"))


def lsp_latency() -> list[str]:
    """Run ``benchmarks/lsp_latency.py`` (its own process, this checkout's server); print its
    report and return its summary lines."""
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "lsp_latency.py")], env=ENV,
                          capture_output=True, text=True, check=False)
    print(done.stdout, end="")
    if done.returncode != 0:
        line = f"  => LSP: the scripted session failed ({done.stderr.strip().splitlines()[-1:]})"
        print(line)
        return [line]
    return [line for line in done.stdout.splitlines() if line.startswith("  =>")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_shared = os.environ.get("ACCUMLINT_SHARED", str(REPO.parent / "shared"))
    parser.add_argument("--shared", type=Path, default=Path(default_shared), help="the shared/ folder")
    parser.add_argument("--repeat", type=int, default=5, help="timed rounds per comparison (default 5)")
    parser.add_argument("--skip-scaling", action="store_true", help="leave out the 1x/2x/4x copies")
    parser.add_argument("--sections", default="123456789p", help="which comparisons to run (default all)")
    parser.add_argument("--peer-tree", type=Path, help="the tree of section p (default: the transformers tree)")
    parser.add_argument("--peer-bound", type=float, default=600.0, help="seconds a peer may take (default 600)")
    parser.add_argument("--peers-bin", type=Path, help="the bin folder of the peers' own environment")
    args = parser.parse_args()

    if not set(args.sections) & set("1234567"):  # the language server, pre-commit and peers need no speed trees
        scratch = Path(tempfile.mkdtemp(prefix="accumlint-bench-"))
        try:
            own_version = subprocess.run([*ACCUMLINT, "--version"], capture_output=True, text=True, env=ENV).stdout
            print(f"machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}; {own_version.strip()} from "
                  f"{REPO}; {args.repeat} rounds; load average at start: {os.getloadavg()[0]:.1f}\n")
            lines = latency_sections(args.sections, scratch, args.repeat)
            tree = args.peer_tree or default_peer_tree(scratch)
            if "p" in args.sections and tree is None:
                print(f"p. peers: skipped (no --peer-tree, and {PRE_COMMIT_PACKAGE} is not installed)")
            elif "p" in args.sections:
                lines.extend(peers(tree, args.peer_bound, args.repeat, args.peers_bin, scratch))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return summary(lines)
    dest, trees = fetch_speed_trees(args.shared)
    transformers = next(t for t in trees if t.name.startswith("transformers-"))
    paths = [str(tree) for tree in trees]
    loops = loop_files(args.shared, dest)
    ruff_version = subprocess.run([*RUFF, "--version"], capture_output=True, text=True).stdout.strip()
    own_version = subprocess.run([*ACCUMLINT, "--version"], capture_output=True, text=True, env=ENV).stdout.strip()
    print(f"machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}; {own_version} from {REPO}; {ruff_version}")
    print(
        f"transformers tree: {python_files(transformers)} files; speed set: {python_files(*trees)} files "
        f"in {len(trees)} trees; corpus loop files: {len(loops)}; {args.repeat} rounds each; "
        f"load average at start: {os.getloadavg()[0]:.1f}\n"
    )

    scratch = Path(tempfile.mkdtemp(prefix="accumlint-bench-", dir=dest))
    cache_dir = scratch / "cache"
    check = [*ACCUMLINT, "check", "--exit-zero", "--quiet", "--output-format", "concise", "--cache-dir", str(cache_dir)]
    cold = [*check, "--no-cache"]
    ruff = [*RUFF, "check", "--isolated", "--no-cache", "--exit-zero", "--quiet"]

    def clear_cache() -> None:
        shutil.rmtree(cache_dir, ignore_errors=True)

    lines: list[str] = []
    try:
        if "1" in args.sections:
            print("1. transformers tree, cold: accumlint (empty cache, all cores) vs ruff (default rules)")
            t = alternate(
                {
                    "accumlint cold": timed([*check, str(transformers)], clear_cache),
                    "ruff": timed([*ruff, str(transformers)]),
                },
                args.repeat,
            )
            lines.append(verdict("transformers cold: accumlint / ruff", t["accumlint cold"], t["ruff"], 1.0))

        if "2" in args.sections:
            print("2. transformers tree, warm cache")
            execute([*check, str(transformers)])  # fill the cache
            w = alternate(
                {"accumlint warm": timed([*check, str(transformers)]), "ruff": timed([*ruff, str(transformers)])},
                args.repeat,
            )
            lines.append(verdict("transformers warm: accumlint / ruff", w["accumlint warm"], w["ruff"], 0.3))
            if "1" in args.sections:
                lines.append(verdict("transformers: warm / cold", w["accumlint warm"], t["accumlint cold"], None))

        if "3" in args.sections:
            print("3. cold: all cores vs --jobs 1 (transformers tree, then the whole speed set)")
            j = alternate(
                {
                    "accumlint all cores": timed([*cold, str(transformers)]),
                    "accumlint --jobs 1": timed([*cold, "--jobs", "1", str(transformers)]),
                },
                args.repeat,
            )
            lines.append(verdict("transformers all cores / --jobs 1", j["accumlint all cores"],
                                 j["accumlint --jobs 1"], 1.0))
            js = alternate(
                {
                    "speed set all cores": timed([*cold, *paths]),
                    "speed set --jobs 1": timed([*cold, "--jobs", "1", *paths]),
                },
                args.repeat,
            )
            lines.append(verdict("speed set all cores / --jobs 1", js["speed set all cores"],
                                 js["speed set --jobs 1"], 1.0))

        if "4" in args.sections:
            print("4. whole speed set: accumlint (empty cache, then warm) vs ruff")
            s = alternate(
                {"accumlint cold": timed([*check, *paths], clear_cache), "ruff": timed([*ruff, *paths])}, args.repeat
            )
            lines.append(verdict("speed set cold: accumlint / ruff", s["accumlint cold"], s["ruff"], 1.0))
            execute([*check, *paths])
            sw = alternate({"accumlint warm": timed([*check, *paths]), "ruff": timed([*ruff, *paths])}, args.repeat)
            lines.append(verdict("speed set warm: accumlint / ruff", sw["accumlint warm"], sw["ruff"], 0.3))

        if "5" in args.sections:
            print(f"5. corpus loop files ({len(loops)}, every one parsed): accumlint vs bare libcst.parse_module")
            c = alternate(
                {
                    "accumlint --jobs 1": timed([*cold, "--jobs", "1", *loops]),
                    "accumlint all cores": timed([*cold, *loops]),
                    "bare libcst parse": timed([sys.executable, "-c", BARE_PARSE, *loops]),
                },
                args.repeat,
            )
            for name in ("accumlint --jobs 1", "accumlint all cores"):
                lines.append(verdict(f"loop files: {name} / bare parse", c[name], c["bare libcst parse"], 1.5))

        if "6" in args.sections:
            print("6. peak memory, whole speed set, cold (MB; target <= 300, judged on the process tree's PSS)")
            for label, extra in (("all cores", []), ("--jobs 1", ["--jobs", "1"])):
                largest, tree = peak_memory([*cold, *extra, *paths])
                if tree is None:  # no /proc: the largest process is all there is to judge
                    line = f"  => peak memory {label:<10} largest process {largest:5.0f} MB"
                    judged = largest
                else:
                    line = (f"  => peak memory {label:<10} process tree PSS {tree[1]:4.0f} MB "
                            f"(RSS sum {tree[0]:.0f} MB, largest process {largest:.0f} MB)")
                    judged = tree[1]
                line += "   MET" if judged <= 300 else "   MISSED"
                print(line)
                lines.append(line)

        if "7" in args.sections and not args.skip_scaling:
            print("7. scaling: 1x, 2x, 4x copies of the transformers tree (cold, all cores)")
            runs = {f"{n}x": timed([*cold, str(copies(transformers, n, scratch))]) for n in (1, 2, 4)}
            k = alternate(runs, max(3, args.repeat // 2))
            # linear within 10 %: a cost that grows faster than the files (a pass over all
            # pairs, a cache that thrashes) shows here first
            lines.append(verdict("2x / 1x (linear: 2)", k["2x"], k["1x"], 2.2))
            lines.append(verdict("4x / 1x (linear: 4)", k["4x"], k["1x"], 4.4))

        lines.extend(latency_sections(args.sections, scratch, args.repeat))
        if "p" in args.sections:
            lines.extend(peers(args.peer_tree or transformers, args.peer_bound, args.repeat, args.peers_bin, scratch))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return summary(lines)


def summary(lines: list[str]) -> int:
    """Print the verdicts of the run (the exit status: 0, the figures are not judged here)."""
    print(f"\nsummary (load average at the end: {os.getloadavg()[0]:.1f})")
    for line in lines:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
