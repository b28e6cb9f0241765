"""The model facts behind ACC007, ACC008, ACC307, ACC406, ACC903, ACC904 and the ACC501/ACC006
extensions: event kinds, cadences through helpers, models reached by a backward, counter
units, FSDP2 switches, double accumulate() entries (snippets written for these tests)."""

from __future__ import annotations

import libcst as cst
import pytest

from accumlint.checks.framework_usage.accumulate import double_entries
from accumlint.checks.shared.counts import counter_units, resume_mismatches, throughputs_of_one_microbatch
from accumlint.checks.shared.leaks import models_reached, trained_models
from accumlint.checks.sync.fsdp2 import ddp_switches_on_fsdp2
from accumlint.checks.updates.update_counters import update_counter_gates
from accumlint.model import EventKind
from accumlint.model.grad_ops import op_cadence
from tests.support import model_of


def kinds(source: str, kind: EventKind) -> list[tuple[str, str]]:
    """(method, cadence) of every event of ``kind`` in the file's groups."""
    model = model_of(source)
    return [(e.method, op_cadence(model, g, e).name) for g in model.loops for e in g.of_kind(kind)]


@pytest.mark.parametrize(("line", "method"), [
    ("p.grad.div_(n)", "div_"),
    ("p.grad.data.mul_(0.5)", "mul_"),
    ("p.grad /= n", "grad rescale"),
    ("opt.multiply_grads(1 / n)", "multiply_grads"),
    ("training.scale_grads(model, 1 / n)", "scale_grads"),
    ("torch._foreach_mul_(grads, c)", "_foreach_mul_"),
])
def test_gradient_rescales_are_classified(line: str, method: str) -> None:
    source = f"""
    for i, b in enumerate(loader):
        model(b).sum().backward()
        {line}
        if (i + 1) % A == 0:
            optimizer.step()
            optimizer.zero_grad()
    """
    assert kinds(source, EventKind.GRAD_RESCALE) == [(method, "MICROBATCH")]


@pytest.mark.parametrize("line", ["buffer.mul_(0.5)", "p.data.div_(n)", "torch._foreach_mul_(params, c)",
                                  "ema_loss.mul_(0.9)"])
def test_rescales_of_other_tensors_are_not_gradient_rescales(line: str) -> None:
    source = f"""
    for i, b in enumerate(loader):
        model(b).sum().backward()
        {line}
        if (i + 1) % A == 0:
            optimizer.step()
            optimizer.zero_grad()
    """
    assert kinds(source, EventKind.GRAD_RESCALE) == []


def test_rescale_in_a_helper_takes_the_cadence_of_its_call() -> None:
    source = """
    def shrink(params, c):
        for p in params:
            if p.grad is not None:
                p.grad.mul_(c)

    for i, b in enumerate(loader):
        model(b).sum().backward()
        shrink(model.parameters(), 0.5)
        if (i + 1) % A == 0:
            shrink(model.parameters(), 2.0)
            optimizer.step()
            optimizer.zero_grad()
    """
    assert kinds(source, EventKind.GRAD_RESCALE) == [("mul_", "MICROBATCH"), ("mul_", "UPDATE")]


def test_helper_with_a_flag_of_its_own_stays_undecided() -> None:
    source = """
    def maybe_shrink(params, c, now):
        if now:
            for p in params:
                p.grad.mul_(c)

    for i, b in enumerate(loader):
        model(b).sum().backward()
        maybe_shrink(model.parameters(), 0.5, b.sum() > 0)
        if (i + 1) % A == 0:
            optimizer.step()
            optimizer.zero_grad()
    """
    assert kinds(source, EventKind.GRAD_RESCALE) == [("mul_", "UNKNOWN")]


def test_helper_flag_bound_to_the_boundary_test_runs_once_per_update() -> None:
    # the helper's `if now:` is read with `now` bound to the caller's argument
    source = """
    def maybe_shrink(params, c, now):
        if now:
            for p in params:
                p.grad.mul_(c)

    for i, b in enumerate(loader):
        model(b).sum().backward()
        maybe_shrink(model.parameters(), 0.5, (i + 1) % A == 0)
        if (i + 1) % A == 0:
            optimizer.step()
            optimizer.zero_grad()
    """
    assert kinds(source, EventKind.GRAD_RESCALE) == [("mul_", "UPDATE")]


@pytest.mark.parametrize(("line", "method"), [
    ("ema.update(model)", "update"),
    ("self.model_ema.update(model, step=n)", "update"),
    ("swa.update_parameters(model)", "update_parameters"),
    ("model.base_model.update_and_allocate(step)", "update_and_allocate"),
    ("update_ema(ema, model, 0.999)", "update_ema"),
])
def test_update_hooks_are_classified(line: str, method: str) -> None:
    source = f"""
    for i, b in enumerate(loader):
        model(b).sum().backward()
        {line}
        if (i + 1) % A == 0:
            optimizer.step()
            optimizer.zero_grad()
    """
    assert kinds(source, EventKind.UPDATE_HOOK) == [(method, "MICROBATCH")]


def test_a_scheduler_named_for_ema_stays_a_scheduler_step() -> None:
    source = """
    import torch
    ema_scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 10)
    for i, b in enumerate(loader):
        model(b).sum().backward()
        if (i + 1) % A == 0:
            optimizer.step()
            optimizer.zero_grad()
            ema_scheduler.step()
    """
    model = model_of(source)
    assert [e.kind for e in model.loops[0].events if e.method == "step"] == [
        EventKind.UPDATE, EventKind.SCHEDULER_STEP]


GAN = """
import torch
opt_g = torch.optim.Adam(gen.parameters())
opt_d = torch.optim.Adam(disc.parameters())
for i, real in enumerate(loader):
    fake = gen(noise)
    d_loss = crit(disc(real), ones) + crit(disc(fake.detach()), zeros)
    d_loss.backward()
    g_loss = crit(disc.forward(fake), ones)
    g_loss.backward()
    if (i + 1) % A == 0:
        opt_d.step(); opt_g.step()
        opt_d.zero_grad(); opt_g.zero_grad()
"""


def test_optimizers_name_their_models_and_backwards_the_models_they_reach() -> None:
    model = model_of(GAN)
    group = model.loops[0]
    owners = sorted(trained_models(model, u) for u in group.of_kind(EventKind.UPDATE))
    assert owners == [("disc",), ("gen",)]
    reached = [models_reached(b, {"gen", "disc"}) for b in group.of_kind(EventKind.BACKWARD)]
    assert reached == [({"disc"}, {"gen"}), ({"disc", "gen"}, set())]


def test_counter_units_come_from_increments() -> None:
    source = """
    micro = 0
    updates = 0
    both = 0
    for i, b in enumerate(loader):
        model(b).sum().backward()
        micro += 1
        both += 1
        if (i + 1) % A == 0:
            optimizer.step()
            optimizer.zero_grad()
            updates += 1
            both += 1
    """
    assert counter_units(model_of(source)) == {"micro": "microbatch", "updates": "update"}


def test_resume_from_a_saved_key_of_the_other_unit() -> None:
    source = """
    micro = 0
    updates = 0
    if resume:
        updates = state["micro"]
        micro = state["micro"]
    for i, b in enumerate(loader):
        model(b).sum().backward()
        micro += 1
        if (i + 1) % A == 0:
            optimizer.step()
            optimizer.zero_grad()
            updates += 1
            state["micro"] = micro
    """
    found = resume_mismatches(model_of(source))
    assert [(m.target, m.target_unit, m.source, m.source_unit) for m in found] == [
        ("updates", "update", 'state["micro"]', "microbatch")]


def test_throughput_needs_a_clock_reset_once_per_group() -> None:
    source = """
    import time
    t0 = time.time()
    for i, b in enumerate(loader):
        n = b.shape[0]
        model(b).sum().backward()
        if (i + 1) % A == 0:
            optimizer.step()
            optimizer.zero_grad()
            rate_per_sec = n / (time.time() - t0)
            t0 = time.time()
    """
    model = model_of(source)
    rates = throughputs_of_one_microbatch(model, model.loops[0])
    assert [(r.name, r.count) for r in rates] == [("rate_per_sec", "n")]
    assert throughputs_of_one_microbatch(*_reset_every_microbatch()) == []


def _reset_every_microbatch():
    model = model_of("""
    import time
    for i, b in enumerate(loader):
        t0 = time.time()
        n = b.shape[0]
        model(b).sum().backward()
        if (i + 1) % A == 0:
            optimizer.step()
            optimizer.zero_grad()
            rate_per_sec = n / (time.time() - t0)
    """)
    return model, model.loops[0]


def test_ddp_switches_on_fsdp2_modules_only() -> None:
    source = """
    from torch.distributed.fsdp import fully_shard, FullyShardedDataParallel

    def a(model, other):
        fully_shard(model)
        model.require_backward_grad_sync = False
        other.require_backward_grad_sync = False
        with model.no_sync():
            pass

    def b(model):
        model = FullyShardedDataParallel(model)
        with model.no_sync():
            pass
    """
    found = ddp_switches_on_fsdp2(model_of(source))
    assert [(s.model, s.how) for s in found] == [("model", "flag"), ("model", "no_sync")]


def test_double_accumulate_entries_of_one_accelerator() -> None:
    source = """
    for b in loader:
        with acc.accumulate(x), acc.accumulate(y):
            acc.backward(f(b))
            optimizer.step()
        with acc.accumulate(x):
            with other.accumulate(y):
                acc.backward(f(b))
                optimizer.step()
    """
    model = model_of(source)
    entries = [w for g in model.loops for w in double_entries(g)]
    assert len(entries) == 1 and len(entries[0].items) == 2


def test_update_counter_gates_only_in_hf_training_step() -> None:
    source = """
    from transformers import Trainer

    class T(Trainer):
        def training_step(self, model, inputs, num_items_in_batch=None):
            if self.state.global_step % self.args.gradient_accumulation_steps == 0:
                self.report(model)
            if self.micro % self.args.gradient_accumulation_steps == 0:
                self.report(model)

        def log(self, logs):
            if self.state.global_step % self.args.gradient_accumulation_steps == 0:
                self.report(logs)
    """
    gates = update_counter_gates(model_of(source))
    assert len(gates) == 1 and cst.Module([]).code_for_node(gates[0]).startswith("self.state.global_step %")
