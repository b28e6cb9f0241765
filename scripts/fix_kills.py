"""Kill ``accumlint check --fix`` with SIGKILL at random moments and check that no file is torn.

Usage: python scripts/fix_kills.py [--runs 100] [--files 40]

A tree of copies of a file with a safe fix is fixed once without interruption (the expected
result); then, ``--runs`` times, a fresh copy of the tree is fixed and the process killed after
a random delay. After each kill every file must hold either its original bytes or its fixed
bytes, never anything else; leftover ``.accumlint-tmp`` files (a kill between the temporary
file's creation and the rename) are counted. Prints one line per outcome and a summary.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: ACC001 with a safe fix: the reset moves under the update gate
SOURCE = b"""for i, batch in enumerate(loader):
    optimizer.zero_grad()
    loss = model(batch) / 4
    loss.backward()
    if (i + 1) % 4 == 0:
        optimizer.step()
"""
COMMAND = [sys.executable, "-m", "accumlint", "check", "--no-cache", "--fix", "--quiet", "--exit-zero", "."]


def make_tree(folder: Path, files: int) -> None:
    folder.mkdir()
    for index in range(files):
        # different sizes: the kill lands in different files' writes
        (folder / f"train_{index:03}.py").write_bytes(b"# padding\n" * (index * 50) + SOURCE)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--files", type=int, default=40)
    args = parser.parse_args()
    random.seed(19)
    with tempfile.TemporaryDirectory() as top:
        reference = Path(top) / "reference"
        make_tree(reference, args.files)
        originals = {p.name: p.read_bytes() for p in reference.iterdir()}
        started = time.monotonic()
        subprocess.run(COMMAND, cwd=reference, check=True, capture_output=True)
        full = time.monotonic() - started
        fixed = {p.name: p.read_bytes() for p in reference.iterdir()}
        assert all(fixed[name] != originals[name] for name in originals), "the reference run fixed nothing"
        torn = orphans = untouched = partial = complete = 0
        for run in range(args.runs):
            tree = Path(top) / f"run{run}"
            make_tree(tree, args.files)
            process = subprocess.Popen(COMMAND, cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(random.uniform(0.2, full))
            process.send_signal(signal.SIGKILL)
            process.wait()
            states = []
            for path in sorted(tree.iterdir()):
                if path.name.endswith(".accumlint-tmp"):
                    orphans += 1
                    continue
                data = path.read_bytes()
                if data == fixed[path.name]:
                    states.append("fixed")
                elif data == originals[path.name]:
                    states.append("original")
                else:
                    states.append("TORN")
                    print(f"run {run}: {path.name} is torn ({len(data)} bytes)")
            torn += states.count("TORN")
            done = states.count("fixed")
            if done == 0:
                untouched += 1
            elif done == len(states):
                complete += 1
            else:
                partial += 1
            shutil.rmtree(tree)
        print(f"uninterrupted --fix of {args.files} files: {full:.2f} s")
        print(f"{args.runs} kills: {untouched} before any write, {partial} between two files' writes, "
              f"{complete} after the last; {torn} torn files, {orphans} orphan temporary files")
        sys.exit(1 if torn else 0)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    main()
