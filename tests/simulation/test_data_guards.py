"""Conditions on a microbatch's data inside a helper the loop calls: a guard clause that returns
early from the helper (and a caller that raises on what it returned) leaves the helper, not the
loop's iteration, so it decides no event and the loop stays decided (field trial 52: an auxiliary
loss whose image check returns ``None`` on a rare shape, the caller raising on it). A ``continue``
in the loop after only the microbatch's forward skips the microbatch (the exceptional path); one
after its backward still leaves the loop undecided."""

from __future__ import annotations

import libcst as cst

from accumlint.model.module_functions import ModuleFunctions
from accumlint.model.simulation import simulate
from tests.support import lint

#: an auxiliary term whose pairing helper gives up on a rare shape; ``{reset}`` is written before
#: the backward in the bad twin
_GUARDED = """
def pair_up(pred, target):
    if pred.ndim != 3 or target.ndim != 3:
        return None
    return pred.flatten(1), target.flatten(1)


def with_extra_term(cfg, loss, pred, target):
    if cfg.extra_weight <= 0:
        return loss
    pair = pair_up(pred, target)
    if pair is None:
        raise ValueError("no pair for the extra term")
    left, right = pair
    return loss + cfg.extra_weight * (left - right).abs().mean()


def fit(cfg, net, batches, opt):
    for index, (x, y) in enumerate(batches):
        pred = net(x)
        loss = with_extra_term(cfg, (pred - y).pow(2).mean(), pred, y){reset}
        (loss / cfg.accum).backward()
        if (index + 1) % cfg.accum == 0:
            opt.step()
            opt.zero_grad()
"""

#: the same check written in the loop, skipping the microbatch after its forward
_SKIPPED = """
def fit(cfg, net, batches, opt):
    for index, (x, y) in enumerate(batches):
        pred = net(x)
        if pred.ndim != 3:
            continue
        (pred.mean() / cfg.accum).backward()
        if (index + 1) % cfg.accum == 0:
            opt.step()
            opt.zero_grad()
"""


def _reasons(source: str) -> list[str]:
    (result,) = simulate(ModuleFunctions(cst.parse_module(source)), "train.py")
    return result.reasons() if not result.decided else []


def test_a_guard_clause_in_a_helper_leaves_the_loop_decided() -> None:
    assert _reasons(_GUARDED.replace("{reset}", "")) == []
    assert lint(_GUARDED.replace("{reset}", "")) == []


def test_the_guarded_loop_still_reports_a_reset_before_the_backward() -> None:
    bad = _GUARDED.replace("{reset}", "\n        opt.zero_grad()")
    assert lint(bad) == [("ACC001", 22)]


def test_a_continue_after_only_the_microbatchs_forward_skips_the_microbatch() -> None:
    # nothing but the forward ran in the iteration: the `continue` skips the microbatch (the
    # exceptional path), as one before any event does
    assert _reasons(_SKIPPED) == []


def test_a_continue_after_the_microbatchs_backward_still_leaves_the_loop_undecided() -> None:
    # the backward ran, the update gate is skipped: which events the group holds is the data's choice
    after = _SKIPPED.replace("        if pred.ndim != 3:\n            continue\n", "").replace(
        "        (pred.mean() / cfg.accum).backward()\n",
        "        (pred.mean() / cfg.accum).backward()\n        if pred.ndim != 3:\n            continue\n")
    assert "backward()\n        if pred.ndim" in after
    assert _reasons(after) == ["the condition `pred.ndim != 3` on the microbatch's data decides an event"]


#: a check between the forward and the backward whose failing side raises: ``{check}``
_RAISING = """
def fit(cfg, net, batches, opt):
    for index, x in enumerate(batches):
        loss = net(x).pow(2).mean()
{check}
        (loss / cfg.accum).backward()
        if (index + 1) % cfg.accum == 0:
            opt.step()
            opt.zero_grad()
"""

_CHECKS = {
    "raise in the body": "        if not loss.requires_grad:\n            raise RuntimeError('no graph')",
    "raise in the else": "        if loss.requires_grad:\n            pass\n"
                         "        else:\n            raise RuntimeError('no graph')",
}


def test_a_check_on_the_microbatchs_data_that_raises_chooses_no_event() -> None:
    for name, check in _CHECKS.items():
        assert _reasons(_RAISING.replace("{check}", check)) == [], name
        off_by_one = _RAISING.replace("{check}", check).replace("index + 1", "index")  # updates at the first
        assert lint(off_by_one) == [("ACC006", 7 + check.count("\n"))], name
