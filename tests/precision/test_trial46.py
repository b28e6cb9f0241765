"""Reduced shapes from field trial 46: LLM fine-tuning, contrastive image-text, video diffusion,
speech and robotics training loops, rewritten as small synthetic snippets (no fetched code).

- a loss function that adds a weighted penalty to its own local ``total`` (``total += w * pen``)
  and is called per microbatch by a boundary loop that replays the group's cached microbatches:
  the helper's local is bound afresh on every call, it is no container of the caller's kept
  across microbatches (ACC201 reported it; fixed: deferred containers compare namespaces);
- a scheduler built by a project factory (out of view) that is handed the loader's microbatch
  count, then handed back by a wrapper and stepped every microbatch: what is in view sizes the
  schedule in microbatches, so stepping it per microbatch is on plan (ACC304 reported it; fixed);
- a microbatch loop ``for i in range(len(loader))`` drawing ``next(it)`` from ``it =
  iter(loader)`` made afresh every epoch: the second epoch's pass was taken for an evaluation
  loader, its draws were no microbatches, and the groups looked irregular (ACC006 reported it;
  fixed: a new pass over the same data after the last one drew the whole epoch is the next epoch);
- an update gate whose branch steps a list of optimizers in a loop was taken for a training
  phase of its own (a loop over data with a backward): the loop was undecided (fixed: only a
  loop whose body backpropagates makes a phase);
- ``for i in range(1, total + 1)`` with ``total`` unknown was run from 0: ``i % A == 0`` looked
  like an update after the first microbatch (ACC006 on a correct loop; fixed: a literal start
  and step are kept).
"""

from __future__ import annotations

from pathlib import Path

from tests.precision.test_trial44_b import loop_statistics
from tests.simulation.test_phase_gates import ACCUMULATING_PHASE
from tests.support import findings, one

# --- ACC201: a helper's local running sum is no container kept across microbatches -------------

PENALTY_LOSS = """
import torch


def paired_loss(net, x, y, crit, weight):
    total = crit(net(x), y)
    if weight:
        total += net.penalty() * weight
    return total


def fit(net, opt, loader, crit, every, weight):
    cached = []
    for i, (x, y) in enumerate(loader):
        opt.zero_grad()
        if every == 1:
            total = paired_loss(net, x, y, crit, weight)
            total.backward()
            opt.step()
            continue
        with torch.no_grad():
            net(x)
        cached.append((x, y))
        if (i + 1) % every > 0:
            continue
        for j in range(every):
            x, y = cached[j]
            total = paired_loss(net, x, y, crit, weight)
            total.backward()
        opt.step()
        cached = []
"""


def test_a_loss_helpers_own_running_sum_is_not_kept_across_microbatches(tmp_path: Path) -> None:
    # every replayed microbatch is backpropagated as it comes; the `+=` only adds the penalty to
    # this call's fresh `total`
    assert [code for code, _ in one(tmp_path, PENALTY_LOSS) if code == "ACC201"] == []


def test_a_helper_appending_to_the_callers_list_is_still_a_deferred_group(tmp_path: Path) -> None:
    # the helper's parameter is the caller's list: every microbatch's graph lives until the
    # boundary's single backward
    source = """
    def keep(store, loss):
        store.append(loss)


    def fit(net, opt, loader, crit, every):
        store = []
        for i, (x, y) in enumerate(loader):
            keep(store, crit(net(x), y))
            if (i + 1) % every == 0:
                opt.zero_grad()
                (sum(store) / every).backward()
                opt.step()
                store = []
    """
    assert ("ACC201", 3) in one(tmp_path, source)


# --- ACC304: a scheduler built by a project factory from the loader's length --------------------

FACTORY = """
from torch.optim.lr_scheduler import CosineAnnealingLR


def make_schedule(opt, per_epoch, epochs):
    return CosineAnnealingLR(opt, T_max=per_epoch * epochs)
"""

FACTORY_TRAIN = """
from schedules import make_schedule


def train(net, opt, loader, runtime, epochs, every):
    per_epoch = {per_epoch}
    sched = make_schedule(opt, per_epoch, epochs)
    net, opt, sched = runtime.wrap(net, opt, scheduler=sched)
    for epoch in range(epochs):
        for i, batch in enumerate(loader):
            loss = net(batch) / every
            loss.backward()
            if (i + 1) % every == 0:
                opt.step()
                opt.zero_grad()
            sched.step()
"""


def test_a_factory_schedule_sized_from_the_loaders_length_may_step_per_microbatch(tmp_path: Path) -> None:
    files = {"schedules.py": FACTORY, "train.py": FACTORY_TRAIN.format(per_epoch="len(loader)")}
    assert [code for path, code, _ in findings(tmp_path, files) if path == "train.py" and code == "ACC304"] == []


def test_a_factory_schedule_sized_in_updates_stepped_per_microbatch_is_found(tmp_path: Path) -> None:
    # the factory is handed a count of optimizer updates: stepping it every microbatch runs it A
    # times faster
    files = {"schedules.py": FACTORY, "train.py": FACTORY_TRAIN.format(per_epoch="len(loader) // every")}
    assert ("train.py", "ACC304", 16) in findings(tmp_path, files)


# --- ACC006: range(len(loader)) over a pass made afresh every epoch -----------------------------

COUNTED_PASS = """
def train(net, opt, loader, epochs, every):
    for epoch in range(epochs):
        opt.zero_grad()
        it = iter(loader)
        for i in range({count}):
            loss = net(next(it)) / every
            loss.backward()
            if (i + 1) % every == 0:
                opt.step()
                opt.zero_grad()
"""


def test_a_pass_counted_out_by_the_loaders_length_ends_its_epoch(tmp_path: Path) -> None:
    # each epoch's own pass draws its N microbatches; a tail is dropped by the reset per epoch
    assert [code for code, _ in one(tmp_path, COUNTED_PASS.format(count="len(loader)"))
            if code in ("ACC005", "ACC006")] == []


def test_a_pass_counted_out_by_a_bound_length_ends_its_epoch(tmp_path: Path) -> None:
    source = COUNTED_PASS.replace("    for epoch", "    n = len(loader)\n    for epoch").format(count="n")
    assert [code for code, _ in one(tmp_path, source) if code in ("ACC005", "ACC006")] == []


def test_a_tail_leaking_from_a_counted_pass_into_the_next_epoch_is_found(tmp_path: Path) -> None:
    # no reset per epoch and no tail test: the last len(loader) % A microbatches join the next
    # epoch's first group
    source = """
    def train(net, opt, loader, epochs, every):
        for epoch in range(epochs):
            it = iter(loader)
            for i in range(len(loader)):
                loss = net(next(it)) / every
                loss.backward()
                if (i + 1) % every == 0:
                    opt.step()
                    opt.zero_grad()
    """
    assert [code for code, _ in one(tmp_path, source)] == ["ACC005"]


def test_a_sample_batch_drawn_after_the_counted_pass_is_no_microbatch(tmp_path: Path) -> None:
    # the peek at the end of the epoch makes another pass elsewhere: the next epoch's pass is
    # still the one the loop's own `iter(loader)` makes
    source = """
    import torch


    def train(net, opt, loader, epochs, every, show):
        for epoch in range(epochs):
            opt.zero_grad()
            it = iter(loader)
            for i in range(len(loader)):
                loss = net(next(it)) / every
                loss.backward()
                if (i + 1) % every == 0:
                    opt.step()
                    opt.zero_grad()
            with torch.no_grad():
                show(net(next(iter(loader))))
    """
    assert one(tmp_path, source) == []


# --- a gate stepping several optimizers in a loop; a range counted from 1 -------------------------

MULTI_OPTIMIZER = """
def fit(net, optimizers, batches, total, every):
    for i in range(1, total + 1):
        loss = net(next(batches)) / every
        if {test}:
            loss.backward()
            for opt in optimizers:
                opt.step()
            net.zero_grad(set_to_none=True)
        else:
            with net.no_sync():
                loss.backward()
"""


def test_a_loop_over_optimizers_in_the_gate_is_the_update_not_a_phase(tmp_path: Path) -> None:
    source = MULTI_OPTIMIZER.format(test="i % every == 0")
    assert loop_statistics(tmp_path, {"train.py": source}) == ["Accumulation loops: 1 decided, 0 undecided"]


def test_a_range_counted_from_one_updates_after_every_a_th_microbatch(tmp_path: Path) -> None:
    # i runs 1, 2, ...: `i % A == 0` fires on the A-th microbatch of every group
    assert one(tmp_path, MULTI_OPTIMIZER.format(test="i % every == 0")) == []


def test_a_range_counted_from_one_with_a_shifted_test_is_found(tmp_path: Path) -> None:
    # `(i + 1) % A == 0` from i = 1 closes the first group after A - 1 microbatches
    assert [code for code, _ in one(tmp_path, MULTI_OPTIMIZER.format(test="(i + 1) % every == 0"))] == ["ACC006"]


def test_a_periodic_learning_phase_is_no_accumulation_loop(tmp_path: Path) -> None:
    # a loop over replayed batches with its own backward and update is a training phase: the runs show
    # the first one, which updates after every batch (decided: no accumulation loop at all)
    source = """
    def run(env, agent, opt, steps, learn_every, memory):
        for t in range(steps):
            memory.add(env.step(agent.act()))
            if t % learn_every == 0:
                for batch in memory.batches():
                    loss = agent.loss(batch)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
    """
    assert loop_statistics(tmp_path, {"train.py": source}) == []


def test_a_periodic_learning_phase_that_accumulates_is_a_decided_accumulation_loop(tmp_path: Path) -> None:
    # the twin: the phase gathers `accum` batches per update; its groups are judged (none is wrong)
    source = ACCUMULATING_PHASE.format(test="(i + 1) % accum == 0")
    assert loop_statistics(tmp_path, {"train.py": source}) == ["Accumulation loops: 1 decided, 0 undecided"]
    assert one(tmp_path, source) == []


def test_a_dict_of_schedulers_stepped_under_the_gate_is_read_by_its_name(tmp_path: Path) -> None:
    # `schedulers_table[k]`: the plural names a scheduler as `optimizers_table[k]` names an optimizer
    source = """
    def fit(net, optimizers_table, schedulers_table, batches, total, every):
        for i in range(1, total + 1):
            loss = net(next(batches)) / every
            loss.backward()
            if i % every == 0:
                for k in optimizers_table:
                    optimizers_table[k].step()
                for k in schedulers_table:
                    schedulers_table[k].step()
                net.zero_grad(set_to_none=True)
    """
    assert loop_statistics(tmp_path, {"train.py": source}) == ["Accumulation loops: 1 decided, 0 undecided"]
    assert one(tmp_path, source) == []
