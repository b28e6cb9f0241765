"""The runtime guard on an FSDP2 (``fully_shard``) module, CPU, 2 gloo processes: backward ends
are seen even while sync is off (no post-accumulate hook fires then), D comes from the mesh,
fingerprints read each rank's local shards, scalars (input hashes, loss weights and tokens) are
combined across ranks, and weights are bitwise equal with and without the guard."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import run_ranks

pytest.importorskip("torch")

WORKER = Path(__file__).with_name("guard_fsdp_worker.py")


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list[dict]:
    return run_ranks(WORKER, tmp_path_factory.mktemp("fsdp") / "out", 2)


def test_correct_loop_with_sync_off_inside_groups(ranks: list[dict]) -> None:
    for rank in ranks:
        correct = rank["correct"]
        assert correct["codes"] == []
        assert correct["traces"] == ["F B F B S Z", "F B F B S Z", "F B"]
        assert (correct["D"], correct["D_source"], correct["effective_batch"]) == (
            2, "FSDP2 mesh (shard x replicate)", 4 * 2 * 2)
        assert correct["checks"]["ACC403"] == "checked"


def test_scalars_combined_across_ranks(ranks: list[dict]) -> None:
    for rank in ranks:
        correct = rank["correct"]
        assert correct["normalization"] == "token-weighted mean over the group"
        assert correct["weight_sums"] == pytest.approx([1.0, 1.0], rel=1e-6)  # mean over ranks of local sums
        assert correct["tokens"] == {"local": [8, 8], "global": [16, 16]}


def test_reset_every_microbatch(ranks: list[dict]) -> None:
    for rank in ranks:
        assert rank["zero_each"]["codes"] == ["ACC001"]


def test_same_examples_on_both_ranks_is_acc403(ranks: list[dict]) -> None:
    for rank in ranks:
        assert rank["same_data"]["codes"] == ["ACC403"]


def test_replay_declines_and_the_free_inference_stays(ranks: list[dict]) -> None:
    for rank in ranks:
        replay = rank["replay"]
        assert replay["codes"] == []
        assert replay["normalization"] == ("token-weighted mean over the group; replay not compared: the replay "
                                           "does not run FSDP2 (sharded parameters) modules")


def test_bitwise_equal_with_and_without_guard(ranks: list[dict]) -> None:
    for rank in ranks:
        assert rank["plain"]["weights"] == rank["plain_again"]["weights"]
        assert rank["plain"]["weights"] == rank["correct"]["weights"]
        assert rank["plain"]["weights"] == rank["replay"]["weights"]
    assert ranks[0]["plain"]["weights"] == ranks[1]["plain"]["weights"]
