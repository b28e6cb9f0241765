"""Kill ``accumlint check --fix`` (or ``--add-noqa``) at random moments: no file may be torn.

SIGKILL at random moments; no file is torn and no temporary file outlives the next run.

Usage: python scripts/fix_kills.py [--runs 100] [--files 40] [--mode fix|noqa]

A tree of copies of a file with a safe fix is rewritten once without interruption (the expected
result); then, ``--runs`` times, a fresh copy of the tree is rewritten and the process killed
after a random delay. After each kill every file must hold either its original bytes or its
rewritten bytes, never anything else; leftover ``.accumlint-tmp`` files (a kill between the
temporary file's creation and the rename) are counted, then the same command runs again to its
end and must leave none. Prints a line per torn file, a summary, and exits 1 if any file was
torn or any temporary file outlived the next run.
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
COMMANDS = {
    mode: [sys.executable, "-m", "accumlint", "check", "--no-cache", option, "--quiet", "--exit-zero", "."]
    for mode, option in (("fix", "--fix"), ("noqa", "--add-noqa"))
}


def make_tree(folder: Path, files: int) -> None:
    folder.mkdir()
    for index in range(files):
        # different sizes: the kill lands in different files' writes
        (folder / f"train_{index:03}.py").write_bytes(b"# padding\n" * (index * 50) + SOURCE)


def write_window(command: list[str], tree: Path) -> tuple[float, float]:
    """Run ``command`` on ``tree`` to its end; the seconds from its start to its first and its
    last file replaced (a new inode), so that the kills land while it writes."""
    inodes = {path: path.stat().st_ino for path in tree.iterdir()}
    started = time.monotonic()
    process = subprocess.Popen(command, cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    first = last = None
    while True:
        running = process.poll() is None
        replaced = sum(path.stat().st_ino != inode for path, inode in inodes.items())
        now = time.monotonic() - started
        if replaced and first is None:
            first = now
        if replaced == len(inodes) and last is None:
            last = now
        if not running:
            break
        time.sleep(0.002)
    assert process.returncode == 0 and first is not None, "the reference run rewrote nothing"
    return first, last if last is not None else now


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--files", type=int, default=40)
    parser.add_argument("--mode", choices=sorted(COMMANDS), default="fix", help="--fix or --add-noqa")
    args = parser.parse_args()
    command = COMMANDS[args.mode]
    random.seed(19)
    with tempfile.TemporaryDirectory() as top:
        reference = Path(top) / "reference"
        make_tree(reference, args.files)
        originals = {p.name: p.read_bytes() for p in reference.iterdir()}
        first, last = write_window(command, reference)
        rewritten = {p.name: p.read_bytes() for p in reference.iterdir()}
        assert all(rewritten[name] != originals[name] for name in originals), "the reference run missed a file"
        torn = orphans = left = untouched = partial = complete = 0
        for run in range(args.runs):
            tree = Path(top) / f"run{run}"
            make_tree(tree, args.files)
            process = subprocess.Popen(command, cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(random.uniform(0.8 * first, 1.1 * last))  # around the writes (the load varies)
            process.send_signal(signal.SIGKILL)
            process.wait()
            states = []
            for path in sorted(tree.iterdir()):
                if path.name.endswith(".accumlint-tmp"):
                    orphans += 1
                    continue
                data = path.read_bytes()
                if data == rewritten[path.name]:
                    states.append("rewritten")
                elif data == originals[path.name]:
                    states.append("original")
                else:
                    states.append("TORN")
                    print(f"run {run}: {path.name} is torn ({len(data)} bytes)")
            torn += states.count("TORN")
            done = states.count("rewritten")
            if done == 0:
                untouched += 1
            elif done == len(states):
                complete += 1
            else:
                partial += 1
            subprocess.run(command, cwd=tree, check=True, capture_output=True)  # the next run
            left += sum(path.name.endswith(".accumlint-tmp") for path in tree.iterdir())
            shutil.rmtree(tree)
        print(f"uninterrupted {command[-4]} of {args.files} files: writes from {first:.2f} s to {last:.2f} s")
        print(f"{args.runs} kills: {untouched} before any write, {partial} between two files' writes, "
              f"{complete} after the last; {torn} torn files, {orphans} orphan temporary files, "
              f"{left} after the next run")
        sys.exit(1 if torn or left else 0)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    main()
