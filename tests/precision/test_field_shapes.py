"""Shapes of the field trial's unrecognised loops (issue 14), as families: a boolean gate
written as a conditional expression, an optimizer whose preparation the model cannot decide
reset before the backward inside ``accumulate()``, and the timm-style loss scaler whose class
the checked code does not show. Own variants (other names, nesting, layouts), the silent twins
and the shapes that must stay undecided."""

# The tests kept here need more than one snippet's findings: project trees (several files), twins
# made from templates. A plain "this one-file snippet reports exactly these (code, line) findings"
# test belongs in the rule's rules/<CODE>-<name>/cases.toml (tests/catalogue/test_rule_folders.py runs them
# all).

from __future__ import annotations

from pathlib import Path

from tests.support import findings, one

# --- a gate flag written `True if cond else False` ---------------------------------------------


INLINE_REVERSED = """
def train(net, opt, loader, micro_steps):
    for k, batch in enumerate(loader):
        loss = net(batch) / micro_steps
        loss.backward()
        {reset}
        keep = {flag}
        if keep:
            opt.step()
            opt.zero_grad()
"""


def test_a_reversed_conditional_expression_flag_is_the_negated_test(tmp_path: Path) -> None:
    source = INLINE_REVERSED.format(reset="opt.zero_grad()", flag="False if (k + 1) % micro_steps else True")
    assert one(tmp_path, source) == [("ACC001", 6)]


def test_the_silent_twin_of_a_conditional_expression_flag(tmp_path: Path) -> None:
    source = INLINE_REVERSED.format(reset="pass", flag="False if (k + 1) % micro_steps else True")
    assert one(tmp_path, source) == []


def test_a_conditional_expression_with_a_non_literal_arm_decides_nothing(tmp_path: Path) -> None:
    # `warm if ... else True`: on the other microbatches the flag is whatever `warm` is
    source = INLINE_REVERSED.format(reset="opt.zero_grad()", flag="warm if (k + 1) % micro_steps else True")
    assert one(tmp_path, source) == []


# --- a reset before the backward inside accumulate(), preparation undecided -------------------
LOOP_CARRIED = """
from accelerate import Accelerator


def main(cfg, unet, make_opt, loader):
    accelerator = Accelerator(gradient_accumulation_steps={steps})
    optimizer = make_opt(unet)
    if cfg.zero:
        unet, optimizer = accelerator.prepare(unet, optimizer)
    else:
        optimizer, loader = accelerator.prepare(optimizer, loader)
    if cfg.grouped:
        optimizers = [make_opt(unet) for _ in range(3)]
        for optimizer in optimizers:
            optimizer.zero_grad()
    for epoch in range(cfg.epochs):
        for batch in loader:
            with accelerator.accumulate(unet):
                {before}
                loss = unet(batch).mean()
                accelerator.backward(loss)
                if not cfg.grouped:
                    optimizer.step()
                    {after}
"""


def test_a_reset_before_the_backward_wipes_the_group_whether_or_not_prepared(tmp_path: Path) -> None:
    # `optimizer` is prepared in both arms, then maybe rebound by a loop over other optimizers:
    # gated by Accelerate or not, the reset before the backward wipes what the group accumulated
    source = LOOP_CARRIED.format(steps="cfg.accum", before="optimizer.zero_grad()", after="pass")
    assert one(tmp_path, source) == [("ACC501", 19)]


def test_the_silent_twin_resets_after_the_update(tmp_path: Path) -> None:
    source = LOOP_CARRIED.format(steps="cfg.accum", before="pass", after="optimizer.zero_grad()")
    assert one(tmp_path, source) == []


def test_an_undecided_preparation_without_accumulation_stays_silent(tmp_path: Path) -> None:
    source = LOOP_CARRIED.format(steps="1", before="optimizer.zero_grad()", after="pass")
    assert one(tmp_path, source) == []


# --- a timm-style loss scaler whose class is not in the checked code --------------------------


SCALER_PARAMETER = """
def one_epoch(net, loader, optimizer, {callee}, accum_iter):
    for it, batch in enumerate(loader):
        loss = net(batch) / accum_iter
        {callee}(loss, optimizer{gate})
        {reset}
"""


def test_a_scaler_parameter_with_an_update_grad_gate_and_a_reset_every_microbatch(tmp_path: Path) -> None:
    source = SCALER_PARAMETER.format(callee="loss_scaler", gate=", update_grad=(it + 1) % accum_iter == 0",
                                     reset="optimizer.zero_grad()")
    assert one(tmp_path, source) == [("ACC001", 6)]


def test_the_silent_twin_of_a_scaler_parameter_resets_under_the_gate(tmp_path: Path) -> None:
    source = SCALER_PARAMETER.format(callee="loss_scaler", gate=", update_grad=(it + 1) % accum_iter == 0",
                                     reset="if (it + 1) % accum_iter == 0: optimizer.zero_grad()")
    assert one(tmp_path, source) == []


def test_a_scaler_call_without_its_gate_keyword_is_any_callable(tmp_path: Path) -> None:
    source = SCALER_PARAMETER.format(callee="loss_scaler", gate="", reset="optimizer.zero_grad()")
    assert one(tmp_path, source) == []


def test_a_callable_not_named_like_a_scaler_is_not_read_as_one(tmp_path: Path) -> None:
    source = SCALER_PARAMETER.format(callee="run_backward", gate=", update_grad=(it + 1) % accum_iter == 0",
                                     reset="optimizer.zero_grad()")
    assert one(tmp_path, source) == []


def test_a_scaler_class_of_the_project_is_read_not_the_convention(tmp_path: Path) -> None:
    # the project's own `__call__` never updates: the convention must not add an update to it
    files = {
        "scaling.py": """
        class LossScaler:
            def __call__(self, loss, optimizer, update_grad=True):
                loss.backward()
        """,
        "train.py": """
        from scaling import LossScaler

        def one_epoch(net, loader, optimizer, accum_iter):
            loss_scaler = LossScaler()
            for it, batch in enumerate(loader):
                loss = net(batch) / accum_iter
                loss_scaler(loss, optimizer, update_grad=(it + 1) % accum_iter == 0)
                optimizer.zero_grad()
        """,
    }
    assert findings(tmp_path, files) == []


# --- the micro-loop's own test of its last microbatch -------------------------------------------
MICRO_LOOP_ARMS = """
def fit(net, opt, batches, steps, rounds):
    for _ in range(rounds):
        for k in range(steps):
            x = next(batches)
            if {test}:
                with net.no_sync():
                    loss = net(x) / steps
                    loss.backward()
                {reset}
            else:
                loss = net(x) / steps
                loss.backward()
        opt.step()
        opt.zero_grad()
"""


def test_a_reset_in_the_micro_loops_not_last_arm_wipes_the_group(tmp_path: Path) -> None:
    source = MICRO_LOOP_ARMS.format(test="k < steps - 1", reset="opt.zero_grad()")
    assert one(tmp_path, source) == [("ACC001", 10)]


def test_the_not_last_test_written_the_other_way_round(tmp_path: Path) -> None:
    source = MICRO_LOOP_ARMS.format(test="steps - 1 > k", reset="opt.zero_grad()")
    assert one(tmp_path, source) == [("ACC001", 10)]


def test_the_silent_twin_of_the_micro_loop_arms(tmp_path: Path) -> None:
    source = MICRO_LOOP_ARMS.format(test="k < steps - 1", reset="pass")
    assert one(tmp_path, source) == []


def test_a_reset_in_the_last_microbatchs_arm_zeroes_the_group_before_its_update(tmp_path: Path) -> None:
    # the arm runs once per group, after the group's last backward and before the update: the
    # patterns have no cadence for "the last microbatch", the simulated runs show it (ACC003)
    source = MICRO_LOOP_ARMS.format(test="k + 1 == steps", reset="opt.zero_grad()")
    # and the arm that runs the group's last microbatch under no_sync() never syncs it (ACC402)
    assert one(tmp_path, source) == [("ACC003", 10), ("ACC402", 7)]  # (at its `with`)


def test_a_test_that_is_not_the_last_microbatchs_still_wipes_the_microbatches_before(tmp_path: Path) -> None:
    # `k < steps - 2` spares the last two microbatches, but with A >= 3 the reset on the second one
    # wipes the first one's gradient (A = 2 hid it: the arm never ran; check judges A = 4)
    source = MICRO_LOOP_ARMS.format(test="k < steps - 2", reset="opt.zero_grad()")
    assert one(tmp_path, source) == [("ACC001", 10)]


GATED_ELSE = """
def train(net, opt, d_opt, loader, accum):
    for i, batch in enumerate(loader):
        loss = net(batch) / accum
        loss.backward()
        if (i + 1) % accum == 0:
            opt.step()
            opt.zero_grad()
        else:
            {other}
"""


def test_a_reset_on_the_microbatches_the_gate_does_not_let_through(tmp_path: Path) -> None:
    assert one(tmp_path, GATED_ELSE.format(other="opt.zero_grad()")) == [("ACC001", 10)]


def test_another_optimizer_updated_off_the_boundary_is_not_judged(tmp_path: Path) -> None:
    assert one(tmp_path, GATED_ELSE.format(other="d_opt.step(); d_opt.zero_grad()")) == []


# --- a helper with a fresh optimizer, called twice per pass on the same model -----------------
TWICE = """
import torch


def nudge(net, x):
    loss = net(x).sum()
    loss.backward()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    opt.step()


def check(cases, x):
    for net, other in cases:
        nudge({first}, x)
        nudge({second}, x)
"""


def test_a_helper_called_twice_without_a_reset_steps_the_first_calls_gradients(tmp_path: Path) -> None:
    assert one(tmp_path, TWICE.format(first="net", second="net")) == [("ACC002", 9)]


def test_a_helper_called_on_two_models_builds_fresh_optimizers_for_each(tmp_path: Path) -> None:
    assert one(tmp_path, TWICE.format(first="net", second="other")) == []


# --- ACC304: a run counted in microbatches, the scheduler built out of view ---------------------
BUDGET = """
import torch


def train(net, opt, sched, loader, cfg, seen=0):
    {build}
    for batch in loader:
        loss = net(batch) / cfg.accum
        loss.backward()
        seen += 1
        if seen % cfg.accum == 0:
            opt.step()
            opt.zero_grad()
        sched.step()
        {stop}
    return seen
"""


def test_a_run_that_stops_on_a_microbatch_budget_leaves_an_unseen_schedule_alone(tmp_path: Path) -> None:
    source = BUDGET.format(build="pass", stop="if seen == cfg.max_step:\n            break")
    assert one(tmp_path, source) == []


def test_without_the_budget_stop_the_per_microbatch_scheduler_is_reported(tmp_path: Path) -> None:
    assert one(tmp_path, BUDGET.format(build="pass", stop="pass")) == [("ACC304", 14)]


def test_a_schedule_built_in_view_is_judged_whatever_the_budget(tmp_path: Path) -> None:
    build = "sched = torch.optim.lr_scheduler.StepLR(opt, step_size=cfg.decay_every)"
    source = BUDGET.format(build=build, stop="if seen == cfg.max_step:\n            break")
    assert one(tmp_path, source) == [("ACC304", 14)]


# --- the prefilter keeps a world size read from the environment ---------------------------------
def test_an_environment_subscript_is_a_use_of_environ_and_a_mention_is_not() -> None:
    from accumlint.source.prefilter import MarkerSearch

    search = MarkerSearch([b"environ"])
    assert search.used(b'world = int(os.environ ["WORLD_SIZE"])\n') == {b"environ"}
    assert search.used(b"env = os.environ\nprint(env)\n") == set()
    assert search.used(b'# os.environ["WORLD_SIZE"]\nx = 1\n') == set()


DP_FROM_ENV = """
import os


def plan(cfg):
    world = int(os.environ["WORLD_SIZE"])
    dp = world // (cfg.tp_size * cfg.pp_size)
    global_batch = cfg.micro_batch * cfg.accum_steps * {replicas}
    return global_batch, dp
"""


def test_the_whole_world_read_from_the_environment_counts_tensor_parallel_ranks(tmp_path: Path) -> None:
    assert one(tmp_path, DP_FROM_ENV.format(replicas="world")) == [("ACC404", 8)]


def test_the_silent_twin_counts_the_data_parallel_replicas(tmp_path: Path) -> None:
    assert one(tmp_path, DP_FROM_ENV.format(replicas="dp")) == []


# --- a reset followed into wrappers is reported once, at the call the user wrote --------------
WRAPPED_TRAIN = """
    from .optim.accumulating import AccumulatingOptimizer

    def fit(model, make_inner, buffers, loader, accum):
        opt = AccumulatingOptimizer(make_inner(model), buffers)
        for i, batch in enumerate(loader):
            (model(batch) / accum).backward()
            {early}
            if (i + 1) % accum == 0:
                opt.step()
                {late}
"""


def _wrapped(early: str, late: str) -> dict[str, str]:
    files = {
        "pyproject.toml": "[project]\nname = 'p'\n",
        "pkg/__init__.py": "",
        "pkg/optim/__init__.py": "",
        "pkg/optim/base.py": """
            class Buffers:
                def __init__(self, inner):
                    self.inner = inner

                def zero_grad(self):
                    self.inner.zero_grad()
        """,
        "pkg/optim/accumulating.py": """
            from .base import Buffers

            class AccumulatingOptimizer(Buffers):
                def __init__(self, inner, buffers):
                    super().__init__(inner)
                    self.buffers = buffers

                def zero_grad(self):
                    self.buffers.zero_grad()
                    super().zero_grad()

                def step(self):
                    self.inner.step()
        """,
        "pkg/train.py": WRAPPED_TRAIN.format(early=early, late=late),
    }
    return files


def test_a_reset_through_two_levels_of_wrappers_in_a_package_is_one_finding(tmp_path: Path) -> None:
    assert findings(tmp_path, _wrapped("opt.zero_grad()", "pass")) == [("pkg/train.py", "ACC001", 8)]


def test_the_silent_twin_resets_the_wrapper_after_its_update(tmp_path: Path) -> None:
    assert findings(tmp_path, _wrapped("pass", "opt.zero_grad()")) == []


# --- a warm-up threshold on a counter that grows every microbatch -------------------------------
THRESHOLD = """
def train(net, opt, ema, loader, cfg):
    seen = 0
    for i, batch in enumerate(loader):
        loss = net(batch) / cfg.accum
        loss.backward()
        if (i + 1) % cfg.accum == 0:
            opt.step()
            opt.zero_grad()
        seen += 1
        if {test}:
            ema.update(net)
            {extra}
"""


def test_a_hook_past_a_warmup_threshold_runs_every_microbatch(tmp_path: Path) -> None:
    assert one(tmp_path, THRESHOLD.format(test="seen >= cfg.ema_start", extra="pass")) == [("ACC007", 12)]


def test_a_threshold_on_the_loop_index_written_the_other_way_round(tmp_path: Path) -> None:
    assert one(tmp_path, THRESHOLD.format(test="cfg.ema_start < i", extra="pass")) == [("ACC007", 12)]


def test_a_hook_before_a_threshold_is_left_undecided(tmp_path: Path) -> None:
    # true for a while, then never: how long is not visible
    assert one(tmp_path, THRESHOLD.format(test="seen < cfg.ema_start", extra="pass")) == []


def test_a_threshold_that_ends_the_run_is_passed_once(tmp_path: Path) -> None:
    assert one(tmp_path, THRESHOLD.format(test="seen >= cfg.ema_start", extra="break")) == []


def test_a_counter_that_is_also_reset_is_no_threshold(tmp_path: Path) -> None:
    source = THRESHOLD.format(test="seen >= cfg.ema_start", extra="seen = 0")
    assert one(tmp_path, source) == []


MODULE_SCHEDULE = """
import torch


def run_epoch(net, opt, sched, loader, cfg):
    for i, batch in enumerate(loader):
        (net(batch) / cfg.accum).backward()
        if (i + 1) % cfg.accum == 0:
            opt.step()
            opt.zero_grad()
        sched.step()


def make(net, loader, cfg):
    opt = torch.optim.AdamW(net.parameters())
    cfg.horizon = {horizon}
    return opt, torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=cfg.lr, total_steps=cfg.horizon)
"""


def test_a_scheduler_handed_in_where_the_module_sizes_schedules_in_microbatches(tmp_path: Path) -> None:
    source = MODULE_SCHEDULE.format(horizon="cfg.epochs * len(loader)")
    assert one(tmp_path, source) == []


def test_a_scheduler_handed_in_where_the_module_sizes_schedules_in_updates(tmp_path: Path) -> None:
    source = MODULE_SCHEDULE.format(horizon="cfg.epochs * len(loader) // cfg.accum")
    assert one(tmp_path, source) == [("ACC304", 11)]
