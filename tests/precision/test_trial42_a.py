"""Reduced shapes from field trial 42 (helper A): loops of LLM fine-tuning, DPO and speech
training code, rewritten as small synthetic snippets (no fetched code).

- a GAN-shaped loop whose two optimizers update on one gate, each after its own backward
  (ACC006 read the second update as a group of one microbatch);
- a loop that writes its microbatch index into a dict entry and gates the update on that entry,
  called once per epoch: the tail leaks into the next epoch (ACC005; the entry the loop stores
  into the mapping it was given is read back from it);
- per-microbatch loss components with their graph summed into a log dict by a helper (missed:
  ACC201 sees only the inline spelling).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import one

TWO_OPTIMIZERS_ONE_GATE = """
def train(gen, disc, opt_g, opt_d, loader, accum):
    for i, batch in enumerate(loader):
        loss_d = disc(batch) / accum
        loss_d.backward()
        if (i + 1) % accum == 0:
            opt_d.step()
            opt_d.zero_grad()
        {between}
        loss_g = gen(batch) / accum
        loss_g.backward()
        if (i + 1) % accum == 0:
            opt_g.step()
            opt_g.zero_grad()
"""


def test_two_optimizers_on_one_gate_make_groups_of_a(tmp_path: Path) -> None:
    # both updates run after the last microbatch of every group of A: the gate is regular
    assert one(tmp_path, TWO_OPTIMIZERS_ONE_GATE.format(between="pass")) == []


def test_a_reset_of_the_generator_every_microbatch_is_still_found(tmp_path: Path) -> None:
    # the twin: resetting the generator's optimizer on every microbatch wipes its group
    source = TWO_OPTIMIZERS_ONE_GATE.format(between="opt_g.zero_grad()")
    assert one(tmp_path, source) == [("ACC001", 9)]


def test_a_tail_carried_into_the_next_epoch_through_a_dict_entry(tmp_path: Path) -> None:
    # nothing resets at the epoch's start: the r microbatches after the last update join the
    # next epoch's first group, which then holds A + r microbatches divided by A (the index the loop
    # stores into the mapping it was given is read back from it)
    source = """
    def train(model, opt, loader, info):
        for epoch in range(info["max_epoch"]):
            for batch_idx, batch in enumerate(loader):
                info["batch_idx"] = batch_idx
                loss = model(batch) / info["accum_grad"]
                loss.backward()
                if (info["batch_idx"] + 1) % info["accum_grad"] == 0:
                    opt.step()
                    opt.zero_grad()
    """
    assert one(tmp_path, source) == [("ACC005", 8)]


def test_the_same_tail_with_the_index_read_directly_is_found(tmp_path: Path) -> None:
    source = """
    def train(model, opt, loader, info):
        for epoch in range(info["max_epoch"]):
            for batch_idx, batch in enumerate(loader):
                loss = model(batch) / info["accum_grad"]
                loss.backward()
                if (batch_idx + 1) % info["accum_grad"] == 0:
                    opt.step()
                    opt.zero_grad()
    """
    assert one(tmp_path, source) == [("ACC005", 7)]


@pytest.mark.xfail(strict=True, reason="ACC201 does not follow a loss component into a helper that sums a dict "
                                       "of values into a log kept across the microbatches")
def test_a_loss_component_summed_into_a_log_by_a_helper_keeps_its_graph(tmp_path: Path) -> None:
    source = """
    def add_logs(log, new):
        for key, value in new.items():
            log[key] = log.get(key, 0.0) + value


    def train_step(model, opt, batches, accum):
        logs = {}
        for _ in range(accum):
            loss, (gen_loss, critic_loss) = model(next(batches))
            (loss / accum).backward()
            add_logs(logs, {"loss": loss.item() / accum, "gen": gen_loss / accum})
        opt.step()
        opt.zero_grad()
        return logs
    """
    assert [code for code, _ in one(tmp_path, source)] == ["ACC201"]
