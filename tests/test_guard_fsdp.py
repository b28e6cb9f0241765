"""The runtime guard on an FSDP2 (``fully_shard``) module, CPU, one gloo process: backward ends
are seen even while sync is off (no post-accumulate hook fires then), D comes from the mesh,
fingerprints read the local shards, and weights are bitwise equal with and without the guard."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

WORKER = Path(__file__).with_name("guard_fsdp_worker.py")


@pytest.fixture(scope="module")
def result(tmp_path_factory) -> dict:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    out = tmp_path_factory.mktemp("fsdp") / "out.json"
    done = subprocess.run([sys.executable, str(WORKER), str(out)], env=dict(os.environ, MASTER_PORT=str(port)),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())


def test_correct_loop_with_sync_off_inside_groups(result: dict) -> None:
    correct = result["correct"]
    assert correct["codes"] == []
    assert correct["traces"] == ["F B F B S Z", "F B F B S Z", "F B"]
    assert (correct["D"], correct["D_source"]) == (1, "FSDP2 mesh (shard x replicate)")


def test_reset_every_microbatch(result: dict) -> None:
    assert result["zero_each"]["codes"] == ["ACC001"]


def test_bitwise_equal_with_and_without_guard(result: dict) -> None:
    assert result["plain"]["weights"] == result["plain_again"]["weights"]
    assert result["plain"]["weights"] == result["correct"]["weights"]
