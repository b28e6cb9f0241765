"""A gradient reset at the start of every epoch runs once per epoch, not every microbatch: it is
no ACC001 (rules-spec: a reset "on a path that runs every microbatch"). It drops the previous
epoch's tail: a deliberate drop where the group's count restarts with the epoch, ACC005 where the
count survives it and the next epoch's first group comes out short (the spec's YOLOv5-style note),
and the gate's own fault (ACC006) where the gate leaves that tail (field trial 53)."""

from __future__ import annotations

from tests.support import lint

#: the epoch's reset before its loop; ``{gate}`` the update's condition on the 0-based ``k``
_PER_EPOCH = """
def run_epoch(net, opt, batches, accum):
    opt.zero_grad()
    for k, (inp, tgt) in enumerate(batches):
        ((net(inp) - tgt).pow(2).mean() / accum).backward()
        if {gate}:
            opt.step()
            opt.zero_grad()


def main(cfg, net, opt, batches):
    for _ in range(cfg.epochs):
        run_epoch(net, opt, batches, cfg.accum)
"""

#: the count kept across epochs, the reset at each epoch's start
_ACROSS = """
def train(cfg, net, opt, batches):
    per_epoch = len(batches)
    last = -1
    for epoch in range(cfg.epochs):
        opt.zero_grad()
        for k, (inp, tgt) in enumerate(batches):
            seen = k + per_epoch * epoch
            ((net(inp) - tgt).pow(2).mean() / cfg.accum).backward()
            if seen - last >= cfg.accum:
                opt.step()
                opt.zero_grad()
                last = seen
"""


def test_a_reset_at_each_epochs_start_with_a_per_epoch_count_drops_the_tail_deliberately() -> None:
    assert lint(_PER_EPOCH.replace("{gate}", "(k + 1) % accum == 0")) == []


def test_a_gate_that_leaves_a_tail_before_the_epochs_reset_is_the_gates_fault_not_a_reset_inside() -> None:
    assert lint(_PER_EPOCH.replace("{gate}", "k % accum == 0 and k != 0")) == [("ACC006", 6)]


def test_a_count_that_survives_the_epochs_reset_leaves_a_short_first_group() -> None:
    assert lint(_ACROSS) == [("ACC005", 10)]


def test_a_reset_every_microbatch_is_still_reported_inside_the_group() -> None:
    loop = "    for k, (inp, tgt) in enumerate(batches):\n"
    every = _PER_EPOCH.replace("{gate}", "(k + 1) % accum == 0").replace(loop, loop + "        opt.zero_grad()\n")
    assert lint(every) == [("ACC001", 5)]
