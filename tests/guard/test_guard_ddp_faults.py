"""The runtime guard under distributed faults and its bitwise safety under DDP (2 gloo processes, CPU).

A rank that raises before its update, a rank that leaves out an update, a rank whose process dies
mid-group and ranks that disagree on A: the guard says so on the card and never waits longer than
its collective timeout (3 s here); the whole run is bounded by a subprocess timeout, so a hang
fails the test instead of blocking CI. Also: weights, momentum buffers and RNG state bitwise equal
with and without the probe on both ranks (with a plain-vs-plain control and a run that must
differ), and nothing left on the DDP wrapper, its module, the optimizer or the globals.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import run_ranks

pytest.importorskip("torch")

WORKER = Path(__file__).with_name("guard_ddp_fault_worker.py")
TIMEOUT_S = 3  # the guard's collective timeout in the workers
RUN_LIMIT_S = 45  # all workers together; a hang anywhere fails here


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list[dict]:
    return run_ranks(WORKER, tmp_path_factory.mktemp("ddp_faults") / "out", 2, limit_s=RUN_LIMIT_S,
                     env={"RUNTIME_GUARD_COLLECTIVE_TIMEOUT": str(TIMEOUT_S)})


def test_bitwise_equal_with_and_without_guard(ranks: list[dict]) -> None:
    for rank in ranks:
        runs = rank["bitwise"]
        assert runs["plain"] == runs["plain_again"]  # control: the harness is deterministic
        assert runs["plain"]["weights"] != runs["other_lr"]["weights"]  # control: the comparison can fail
        assert runs["plain"] == runs["guarded"] == runs["guarded_again"]  # weights, momentum buffers, RNG state
        assert all(runs[f"{name}_no_trace"] for name in ("plain", "plain_again", "guarded", "guarded_again",
                                                          "other_lr"))
        for name in ("guarded", "guarded_again"):  # the second probe reuses the guard's group
            assert runs[f"{name}_compared"] == [True, True, None], runs[f"{name}_notes"]
    assert ranks[0]["bitwise"]["guarded"]["weights"] == ranks[1]["bitwise"]["guarded"]["weights"]


def test_ranks_disagreeing_on_a_are_reported_without_waiting(ranks: list[dict]) -> None:
    for rank in ranks:
        run = rank["disagree"]
        assert run["error"] is None and run["no_trace"]
        assert any("ranks disagree" in n and "rank 0: A=2" in n and "rank 1: A=4" in n for n in run["notes"])
        assert run["seconds"] < TIMEOUT_S  # known at attach: no gather is attempted afterwards
        assert set(run["replicas_equal"]) == {None}  # nothing compared, so no ACC402 from misaligned updates
        assert "ACC402" not in run["codes"]


def test_rank_raising_before_its_update(ranks: list[dict]) -> None:
    failed, other = ranks[0]["raise_before_step"], ranks[1]["raise_before_step"]
    assert failed["error"].startswith("KeyError") and failed["no_trace"]
    assert "the probe detached on an exception" in failed["notes"]
    assert other["error"] is None and other["no_trace"]
    assert any("did not answer" in n for n in other["notes"])
    assert other["seconds"] < TIMEOUT_S + 5


def test_rank_leaving_out_an_update_times_out_on_both_ranks(ranks: list[dict]) -> None:
    for rank in ranks:
        run = rank["skip_update"]
        assert run["error"] is None and run["no_trace"]
        assert any("did not answer" in n for n in run["notes"]), run["notes"]
        assert run["seconds"] < 2 * TIMEOUT_S + 5  # at most one timeout per rank
        assert "ACC402" not in run["codes"]


def test_rank_crashing_mid_group(ranks: list[dict]) -> None:
    assert ranks[0]["crash_mid_group"] == {"exited": True}
    run = ranks[1]["crash_mid_group"]
    assert run["error"] is not None  # DDP's own all-reduce fails: the program's error, not the guard's
    assert "the probe detached on an exception" in run["notes"]
    assert run["no_trace"]
    assert run["seconds"] < TIMEOUT_S + 5
