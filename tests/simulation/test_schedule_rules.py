"""ACC305 scheduler-horizon-unit-mismatch, ACC306 scheduler-stepped-twice and ACC902
ambiguous-step-unit on small snippets (written for these tests): the faulty shapes, the
correct shapes next to them, and the undecidable shapes where the rules stay silent."""

# The tests kept here need more than one snippet's findings: the model's horizons, counters and
# Lightning schedulers, the default rule set, warm-up twins made from one template. A plain "this
# one-file snippet reports exactly these (code, line) findings" test belongs in the rule's
# rules/<CODE>-<name>/cases.toml (tests/catalogue/test_rule_folders.py runs them all).

from __future__ import annotations

import pytest

from accumlint.checks.schedule import AmbiguousStepUnit
from accumlint.checks.schedule.owned_schedulers import lightning_configured_schedulers
from accumlint.checks.schedule.schedules import (
    HorizonUnit,
    iterated_loader,
    microbatch_counters,
    schedule_horizons,
)
from accumlint.settings.config import default_codes
from tests.catalogue.test_rule_folders import case_code
from tests.support import lint, model_of

CODES = ("ACC305", "ACC306", "ACC902")


def mine(source: str) -> list[tuple[str, int]]:
    """The findings of this file's rules (ACC902 is off by default: selected explicitly)."""
    return lint(source, select=",".join(CODES))


# --- ACC305 -----------------------------------------------------------------------------------


def test_horizon_units_read_from_the_arithmetic() -> None:
    model = model_of("""
    import math, torch
    steps_per_epoch = len(loader)
    updates = math.ceil(steps_per_epoch / accumulation_steps) * epochs
    s = get_polynomial_decay_schedule_with_warmup(opt, steps_per_epoch * epochs, updates)
    t = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max_steps * accumulation_steps)
    for i, b in enumerate(loader):
        (model(b) / accumulation_steps).backward()
        if (i + 1) % accumulation_steps == 0:
            opt.step(); s.step(); t.step(); opt.zero_grad()
    """)
    (group,) = model.loops
    assert iterated_loader(group) == "loader"
    origins = {e.role.origin for e in group.events if e.kind.name == "SCHEDULER_STEP"}
    found = sorted((h.parameter, h.unit) for origin in origins for h in schedule_horizons(model, origin, "loader"))
    assert found == [
        ("T_max", HorizonUnit.UPDATES_TIMES_A),
        ("num_training_steps", HorizonUnit.UPDATES),
        ("num_warmup_steps", HorizonUnit.MICROBATCHES),
    ]
    # without the loop's loader nothing is read as microbatches
    assert all(h.unit is not HorizonUnit.MICROBATCHES
               for origin in origins for h in schedule_horizons(model, origin, "val_loader"))


# --- ACC306 -----------------------------------------------------------------------------------


def test_lightning_configured_schedulers_names_what_lightning_steps() -> None:
    source = case_code("Lightning automatic optimization: a dict-configured scheduler stepped in a batch hook")
    model = model_of(source)
    (class_def,) = model.roles.classes.values()
    assert lightning_configured_schedulers(model, class_def) == {"self.scheduler", "self.lr_schedulers()"}
    owned = model_of(case_code("Lightning automatic: lr_scheduler_step overridden, or no scheduler returned"))
    assert [lightning_configured_schedulers(owned, c) for c in owned.roles.classes.values()] == [None, None]


# --- ACC902 -----------------------------------------------------------------------------------


def test_microbatch_counters_of_a_loop() -> None:
    model = model_of(case_code("global_step incremented every microbatch: TensorBoard and wandb x-axes"))
    (group,) = model.loops
    assert sorted(microbatch_counters(group)) == ["global_step"]
    gated = model_of(case_code("update counter incremented at the boundary"))
    (group,) = gated.loops
    assert sorted(microbatch_counters(group)) == ["step"]  # the enumerate index; global_step counts updates


def test_ambiguous_step_unit_is_off_by_default() -> None:
    assert AmbiguousStepUnit.default_enabled is False
    assert "ACC902" not in default_codes()


# --- a warmup written by hand: a counter of updates over a horizon in microbatches --------------
_HAND_WARMUP = """
    import torch

    micro_batch_size = 8
    accum = 64 // micro_batch_size
    warmup = {warmup}

    def fit(model, optimizer, loader, peak):
        done = 0
        for n, batch in enumerate(loader):
            if done < warmup:
                {write}
            (model(batch) / accum).backward()
            if (n + 1) % accum == 0:
                optimizer.step()
                optimizer.zero_grad()
                done += 1
"""
_INLINE = 'optimizer.param_groups[0]["lr"] = peak * done / warmup'
_BY_NAME = 'rate = peak * done / warmup\n                optimizer.param_groups[0]["lr"] = rate'


@pytest.mark.parametrize("write", [_INLINE, _BY_NAME], ids=["inline", "by-name"])
def test_update_counter_over_a_microbatch_warmup_is_flagged(write: str) -> None:
    source = _HAND_WARMUP.format(warmup="3 * (100_000 // micro_batch_size)", write=write)
    assert mine(source) == [("ACC305", 11)]


@pytest.mark.parametrize("warmup", ["3 * (100_000 // micro_batch_size) // accum", "500",
                                    "100_000 // (micro_batch_size * accum)", "samples // world"])
def test_warmup_counted_in_updates_or_undecided_stays_silent(warmup: str) -> None:
    assert mine(_HAND_WARMUP.format(warmup=warmup, write=_INLINE)) == []


def test_microbatch_counter_over_a_microbatch_warmup_stays_silent() -> None:
    source = _HAND_WARMUP.format(warmup="3 * (100_000 // micro_batch_size)", write=_INLINE.replace("done", "n")
                                 ).replace("if done < warmup", "if n < warmup")
    assert mine(source) == []
