"""The runtime guard under DDP with 2 gloo processes on CPU: sync placement (ACC401/ACC402),
duplicate examples across replicas (ACC403, also under rank-seeded input noise), D and the
effective batch on the card (ACC404), all-reduce rounds, and weights bitwise equal with and
without the guard on both ranks; and with one process (D = 1, no ACC402)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import run_ranks

pytest.importorskip("torch")

WORKER = Path(__file__).with_name("guard_ddp_worker.py")


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list[dict]:
    return run_ranks(WORKER, tmp_path_factory.mktemp("ddp") / "out", 2)


@pytest.mark.parametrize(("placement", "codes", "rounds"), [
    ("none", set(), [4, 4, 1]),
    ("no_sync_both", set(), [1, 1, 0]),
    ("backward_only", {"ACC401"}, [4, 4, 1]),
    ("all_inside", {"ACC402"}, [0, 0, 0]),
    ("flag_nanogpt", set(), [1, 1, 0]),
    ("random_sampler", {"ACC403"}, [4, 4, 1]),
    # the same samples on both ranks, made different by rank-seeded noise before the model: the loader's
    # rows are compared, not the model's input
    ("same_samples_rank_noise", {"ACC403"}, [4, 4, 1]),
    ("distinct_samples_rank_noise", set(), [4, 4, 1]),
    # the same loaded batch on both ranks, each taking its own slice: distinct examples (the model's rows count)
    ("sliced_by_rank", set(), [4, 4, 1]),
    # a forward without grad on a batch every rank loads (evaluation, rollout) before each microbatch
    ("no_grad_forward_each", set(), [4, 4, 1]),
    # no microbatch synced by DDP, but the loop all-reduces the gradients by hand before the update: the
    # replicas' gradient checksums agree at the update, so the update is synchronized (no ACC402)
    ("all_inside_manual_all_reduce", set(), [0, 0, 0]),
    # the loaded batch passed whole to the model (field trial: Lightning's build-your-own-trainer under Fabric
    # DDP, whose training_step(batch) runs through DDP's forward): its rows are the tensors inside it
    ("whole_batch_same_samples", {"ACC403"}, [4, 4, 1]),
    ("whole_batch_distinct", set(), [4, 4, 1]),
])
def test_placements(ranks: list[dict], placement: str, codes: set[str], rounds: list[int]) -> None:
    for rank in ranks:
        result = rank[placement]
        assert set(result["codes"]) == codes, result["findings"]
        assert result["rounds"] == rounds
        assert (result["D"], result["effective_batch"]) == (2, 4 * 4 * 2)


def test_replicas_diverge_only_when_never_synced(ranks: list[dict]) -> None:
    assert ranks[0]["all_inside"]["weights"] != ranks[1]["all_inside"]["weights"]
    assert ranks[0]["all_inside_manual_all_reduce"]["weights"] == ranks[1]["all_inside_manual_all_reduce"]["weights"]
    assert ranks[0]["no_sync_both"]["weights"] == ranks[1]["no_sync_both"]["weights"]


def test_comm_hook_counts_rounds(ranks: list[dict]) -> None:
    for rank in ranks:
        assert rank["counted"]["rounds"] == [1, 1, 0]
        assert rank["counted"]["codes"] == []


def test_bitwise_equal_with_and_without_guard(ranks: list[dict]) -> None:
    for rank in ranks:
        assert rank["plain"]["weights"] == rank["plain_again"]["weights"]  # control
        assert rank["plain"]["weights"] == rank["no_sync_both"]["weights"]
        assert rank["plain"]["weights"] == rank["counted"]["weights"]  # the comm hook forwards only


def test_one_replica_never_syncing_is_not_acc402(tmp_path: Path) -> None:
    """D = 1 (a DDP wrapper over a one-process gloo group): every placement is the same update, so no
    microbatch synced (``all_inside``) is no finding, nor a ``no_sync`` around the backward only
    (``backward_only``: its all-reduce over one process moves nothing), and the card says why ACC401 and
    ACC402 are not observable."""
    (rank,) = run_ranks(WORKER, tmp_path / "out", 1)
    for placement in ("none", "no_sync_both", "backward_only", "all_inside", "flag_nanogpt", "random_sampler"):
        result = rank[placement]
        assert result["codes"] == [], result["findings"]
        assert (result["D"], result["effective_batch"]) == (1, 4 * 4)
    assert rank["all_inside"]["checks"]["ACC402"].startswith("not observable: D = 1")
    assert rank["backward_only"]["checks"]["ACC401"].startswith("not observable: D = 1")
