"""The guard is a guest: nothing it installs survives exit, an exception or the auto-detach,
and training computes bit for bit the same parameters, optimizer state and RNG state with and
without it (runtime-guard-design.md §7). Every bitwise comparison has a plain-vs-plain control."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")

from guard_loops import bitwise_equal, train  # noqa: E402

import runtime_guard  # noqa: E402

ORIGINAL_CLIP = torch.nn.utils.clip_grad_norm_


def installed(model, opt, sched, scaler) -> dict[str, object]:
    """Every kind of change the probe makes, as observable state."""
    module = torch.nn.modules.module
    return {
        "module hooks": sum(len(m._forward_pre_hooks) + len(m._forward_hooks) for m in model.modules()),
        "global module hooks": len(module._global_forward_pre_hooks) + len(module._global_forward_hooks),
        "parameter hooks": sum(len(p._post_accumulate_grad_hooks or {}) for p in model.parameters()),
        "optimizer hooks": len(opt._optimizer_step_pre_hooks) + len(opt._optimizer_step_post_hooks),
        "zero_grad wrappers": ("zero_grad" in vars(opt)) + ("zero_grad" in vars(model)),
        "optimizer step attribute": vars(opt).get("step"),
        "scheduler wrapper": "step" in vars(sched),
        "scaler wrappers": sorted(set(vars(scaler)) & {"scale", "unscale_", "step", "update"}),
        "clip patched": torch.nn.utils.clip_grad_norm_ is not ORIGINAL_CLIP
        or torch.nn.utils.clip_grad.clip_grad_norm_ is not ORIGINAL_CLIP,
        "saved-tensor hooks": torch._C._autograd._top_saved_tensors_default_hooks(False) is not None,
    }


def _setup():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Dropout(0.1), torch.nn.Linear(8, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, 1)
    scaler = torch.amp.GradScaler("cpu", init_scale=4.0)
    return model, opt, sched, scaler


def _microbatch(model, scaler, opt, sched, i: int, a: int = 2) -> None:
    scaler.scale(model(torch.randn(5, 6)).square().mean() / a).backward()
    if i % a == a - 1:
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        sched.step()
        opt.zero_grad()


def test_attached_probe_changes_every_kind_of_state() -> None:
    """Negative control: the checks below would see each kind of change."""
    model, opt, sched, scaler = _setup()
    clean = installed(model, opt, sched, scaler)
    with runtime_guard.probe(model, opt, accumulation_steps=2, scheduler=sched, scaler=scaler):
        during = installed(model, opt, sched, scaler)
    changed = {k for k in clean if clean[k] != during[k]}
    assert changed == set(clean) - {"global module hooks", "optimizer step attribute"}
    assert installed(model, opt, sched, scaler) == clean


def test_nothing_left_after_exception_mid_group() -> None:
    model, opt, sched, scaler = _setup()
    clean = installed(model, opt, sched, scaler)
    step_before = vars(opt).get("step")
    with pytest.raises(KeyError), runtime_guard.probe(model, opt, accumulation_steps=2, scheduler=sched,
                                                      scaler=scaler) as p:
        _microbatch(model, scaler, opt, sched, 0)
        raise KeyError("user error mid-group")
    assert installed(model, opt, sched, scaler) == clean
    assert vars(opt).get("step") is step_before  # the scheduler's own step wrapper is untouched
    assert not p.attached and p.report().card["notes"][-1] == "the probe detached on an exception"


def test_nothing_left_after_auto_detach_while_loop_runs() -> None:
    model, opt, sched, scaler = _setup()
    clean = installed(model, opt, sched, scaler)
    states = []
    with runtime_guard.probe(model, opt, accumulation_steps=2, scheduler=sched, scaler=scaler, groups=1) as p:
        for i in range(8):
            _microbatch(model, scaler, opt, sched, i)
            states.append(p.attached)
    # group 0 (2 microbatches) + the watched forward/backward, detached at the next call
    assert states == [True, True, True, False, False, False, False, False]
    assert installed(model, opt, sched, scaler) == clean
    assert p.report().card["groups"][-1]["trace"] == "F K B"


def test_script_probe_removes_its_global_hook(tmp_path) -> None:
    from runtime_guard.discover import run_script

    script = tmp_path / "loop.py"
    script.write_text(
        "import torch\n"
        "model = torch.nn.Linear(3, 1)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for i in range(8):\n"
        "    model(torch.randn(2, 3)).sum().backward()\n"
        "    if i % 2 == 1:\n"
        "        opt.step(); opt.zero_grad()\n"
    )
    module = torch.nn.modules.module
    probe = run_script(script, accumulation_steps=2)
    assert len(module._global_forward_pre_hooks) == 0
    assert probe.report().card["group_sizes"] == [2, 2]
    assert probe.report().codes == set()


@pytest.mark.parametrize("variant", ["correct", "zero_each", "losses_list", "retain_graph"])
def test_bitwise_identical_with_and_without_guard(variant: str) -> None:
    """Dropout on: any RNG draw by the guard would change the masks and the weights."""
    plain_a = train(variant, guard=False)
    plain_b = train(variant, guard=False)
    assert bitwise_equal(plain_a, plain_b)  # control: the harness itself is deterministic
    guarded = train(variant, guard=True)
    assert bitwise_equal(plain_a, guarded)
    # the control is not vacuous: another variant trains to different weights
    assert not bitwise_equal(plain_a, train("zero_each" if variant != "zero_each" else "correct", guard=False))


def test_bitwise_identical_with_scaler_and_skipped_update() -> None:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step")
        plain_a = train("inject_inf", guard=False, scaler=True)
        plain_b = train("inject_inf", guard=False, scaler=True)
        guarded = train("inject_inf", guard=True, scaler=True)
    assert bitwise_equal(plain_a, plain_b)
    assert bitwise_equal(plain_a, guarded)
    assert guarded.report.card["updates"]["applied"] == 1


def test_probe_consumes_no_rng() -> None:
    model, opt, sched, scaler = _setup()
    torch.manual_seed(1)
    before = torch.get_rng_state()
    p = runtime_guard.probe(model, opt, accumulation_steps=2).attach()
    p.detach()
    assert torch.equal(torch.get_rng_state(), before)
