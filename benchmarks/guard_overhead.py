"""Overhead of the runtime guard on CPU (a benchmark, not a test), in three sections.

``groups``: two token models (~2 M and ~20 M parameters), A = 4, 2 groups per arm, interleaved
repetitions (plain, probed, plain, probed, ...) in one process on one thread; prints the median time
per group of each arm, the ratio of the medians and the ratio of the fastest repetitions (less
sensitive to other jobs on a shared machine), plus the fingerprint size (numbers per tensor, not per
parameter). Targets (issue 4): default <= 1.10x at 2 M, <= 1.05x at 20 M; replay <= 2.5x
(``normalization="replay"``: +1 forward/backward per microbatch during the probed groups).

``first``: the first microbatch (forward + backward) of a loop that imports transformers and steps
one of its schedules (``guard_overhead_loop.py --transformers``, 2 M model or ``--first-model 20M``), each
repetition a fresh
process, plain vs under ``python -m runtime_guard run`` (the guard finds the model at that forward
and attaches there), in wall time and in the process's CPU time. Target (issue 35): <= 1.2x.

``script``: the whole script's CPU time (user + system of the child process: interpreter start,
imports, the loop) for the ~20 M model, plain vs under ``python -m runtime_guard run`` (which probes
2 of its groups). Target (issue 35): <= 1.15x.

Usage: PYTHONPATH=. python benchmarks/guard_overhead.py [--sections groups,first,script] [--reps 7]
       [--threads 1] [--script-microbatches 40] [--first-model 2M]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).parent))
from guard_overhead_loop import CONFIGS, A, TokenMLP  # noqa: E402 - the loop beside this script

import runtime_guard  # noqa: E402
from runtime_guard.fingerprint import SAMPLES, grad_state  # noqa: E402

GROUPS = 2
LOOP = Path(__file__).with_name("guard_overhead_loop.py")
ROOT = Path(__file__).resolve().parent.parent


def run(model: nn.Module, data: list[tuple[torch.Tensor, torch.Tensor]], mode: str) -> float:
    """Seconds for GROUPS groups of A microbatches (probe attach/detach included).

    ``mode``: "plain" (no probe), "default" (``normalization="infer"``) or "replay"."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    vocab = model.head.out_features
    start = time.perf_counter()
    ctx = None
    if mode != "plain":
        normalization = "replay" if mode == "replay" else "infer"
        ctx = runtime_guard.probe(model, opt, accumulation_steps=A, groups=GROUPS, normalization=normalization)
        ctx.attach()
    for i, (ids, labels) in enumerate(data):
        loss = nn.functional.cross_entropy(model(ids, labels=labels).reshape(-1, vocab), labels.reshape(-1)) / A
        loss.backward()
        if (i + 1) % A == 0:
            opt.step()
            opt.zero_grad(set_to_none=True)
    if ctx is not None:
        ctx.detach()
    return time.perf_counter() - start


def groups_section(ns: argparse.Namespace) -> None:
    """Time per probed group vs per plain group, in one process (see the module docstring)."""
    print(f"[groups] torch {torch.__version__}, {ns.threads} thread(s), m={ns.microbatch}, T={ns.tokens}, A={A}, "
          f"{GROUPS} groups per arm, {ns.reps} interleaved repetitions (medians)")
    for name, cfg in CONFIGS.items():
        torch.manual_seed(0)
        model = TokenMLP(**cfg)
        params = sum(p.numel() for p in model.parameters())
        tensors = sum(1 for _ in model.parameters())
        g = torch.Generator().manual_seed(0)
        data = [(torch.randint(0, cfg["vocab"], (ns.microbatch, ns.tokens), generator=g),
                 torch.randint(0, cfg["vocab"], (ns.microbatch, ns.tokens), generator=g)) for _ in range(GROUPS * A)]
        run(model, data, "plain")  # warm-up: allocator, lazy optimizer state
        modes = ["plain", "default", "replay"]
        times: dict[str, list[float]] = {mode: [] for mode in modes}
        for rep in range(ns.reps):
            for mode in (modes if rep % 2 == 0 else modes[::-1]):
                times[mode].append(run(model, data, mode))
        median = {mode: statistics.median(times[mode]) / GROUPS for mode in modes}
        fastest = {mode: min(times[mode]) / GROUPS for mode in modes}
        for p in model.parameters():
            p.grad = torch.ones_like(p)
        state = grad_state(list(model.parameters()), measure=True)
        model.zero_grad(set_to_none=True)
        print(f"{name}: {params / 1e6:.2f} M parameters in {tensors} tensors")
        print(f"  plain   {median['plain'] * 1e3:9.1f} ms / group")
        targets = {"default": "1.10" if name == "2M" else "1.05", "replay": "2.5"}
        for mode in ("default", "replay"):
            print(f"  {mode:7s} {median[mode] * 1e3:9.1f} ms / group   ratio {median[mode] / median['plain']:.3f}x "
                  f"(fastest {fastest[mode] / fastest['plain']:.3f}x; target {targets[mode]}x)")
        numbers = sum(len(s) for s in state.samples if s) + len(state.checksums or ()) + len(state.refs)
        print(f"  fingerprint: {numbers} numbers per state ({SAMPLES} sampled bit patterns, a checksum and a weak "
              f"ref per tensor; O(tensors) = {tensors}, parameters {params:,})")



def run_loop(args: list[str], probed: bool, folder: Path) -> tuple[dict[str, float], float]:
    """One fresh process of ``guard_overhead_loop.py args`` (under ``python -m runtime_guard run -A 4`` when
    ``probed``): the loop's JSON line and the child's CPU seconds (user + system).

    Raises:
        subprocess.CalledProcessError: the child failed (its stderr is in the exception).
        RuntimeError: the probed run wrote no report.
    """
    card = folder / "card.json"
    card.unlink(missing_ok=True)
    guard = ["-m", "runtime_guard", "run", "-A", str(A), "--exit-zero", "--json", str(card)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, *(guard if probed else []), str(LOOP), *args], capture_output=True,
                          text=True, check=True, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if probed and not card.is_file():
        raise RuntimeError(f"the probed run wrote no report:\n{done.stdout[-2000:]}")
    line = next(x for x in done.stdout.splitlines() if x.startswith('{"first_microbatch"'))
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return json.loads(line), cpu


def _interleaved(args: list[str], reps: int) -> dict[bool, list[tuple[dict[str, float], float]]]:
    """``reps`` runs of each arm, alternating which goes first; keyed by ``probed``."""
    runs: dict[bool, list[tuple[dict[str, float], float]]] = {False: [], True: []}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(reps):
            for probed in ((False, True) if rep % 2 == 0 else (True, False)):
                runs[probed].append(run_loop(args, probed, Path(tmp)))
    return runs


def _ratio_line(label: str, plain: list[float], probed: list[float], unit: str, scale: float, target: str) -> str:
    mp, mq = statistics.median(plain), statistics.median(probed)
    return (f"  {label}: plain {mp * scale:.1f} {unit}, probed {mq * scale:.1f} {unit}; ratio {mq / mp:.3f}x "
            f"(fastest {min(probed) / min(plain):.3f}x; target {target})")


def first_section(ns: argparse.Namespace) -> None:
    """The first microbatch of a loop that imports transformers, plain vs zero-code probed."""
    args = ["--model", ns.first_model, "--transformers", "--microbatches", str(GROUPS * A), "--threads",
            str(ns.threads)]
    print(f"[first] {' '.join(args)}: {ns.reps} fresh processes per arm, interleaved")
    runs = _interleaved(args, ns.reps)
    for key, label in (("first_microbatch", "first microbatch (wall)"),
                       ("first_microbatch_cpu", "first microbatch (CPU)")):
        print(_ratio_line(label, [r[key] for r, _ in runs[False]], [r[key] for r, _ in runs[True]], "ms", 1e3, "1.2x"))


def script_section(ns: argparse.Namespace) -> None:
    """The whole script's CPU time for the ~20 M model, plain vs zero-code probed."""
    args = ["--model", "20M", "--microbatches", str(ns.script_microbatches), "--threads", str(ns.threads)]
    print(f"[script] {' '.join(args)} ({ns.script_microbatches // A} groups, {GROUPS} probed): {ns.reps} fresh "
          "processes per arm, interleaved")
    runs = _interleaved(args, ns.reps)
    print(_ratio_line("whole-script CPU", [cpu for _, cpu in runs[False]], [cpu for _, cpu in runs[True]], "s", 1,
                      "1.15x"))
    print(_ratio_line("loop wall time", [r["loop"] for r, _ in runs[False]], [r["loop"] for r, _ in runs[True]],
                      "s", 1, "none"))


SECTIONS = {"groups": groups_section, "first": first_section, "script": script_section}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sections", default=",".join(SECTIONS), help="comma-separated: " + ", ".join(SECTIONS))
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--microbatch", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--script-microbatches", type=int, default=40, help="the script section's loop length")
    parser.add_argument("--first-model", choices=sorted(CONFIGS), default="2M", help="the first section's model")
    ns = parser.parse_args()
    torch.set_num_threads(ns.threads)
    for name in ns.sections.split(","):
        start = time.perf_counter()
        SECTIONS[name](ns)
        print(f"  ({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
