"""The guard is a guest: nothing it installs survives exit, an exception or the auto-detach,
and training computes bit for bit the same parameters, optimizer state and RNG state with and
without it (runtime-guard-design.md §7). Every bitwise comparison has a plain-vs-plain control."""

from __future__ import annotations

import importlib
import inspect
import warnings

import pytest

torch = pytest.importorskip("torch")

import runtime_guard  # noqa: E402
from tests.guard.guard_loops import bitwise_equal, train  # noqa: E402

ORIGINAL_CLIP = torch.nn.utils.clip_grad_norm_


def _method(obj: object, name: str) -> object:
    """What ``obj.name`` resolves to, unbound: the instance's own attribute, else the class's
    (the guard wraps on the class where it can: the instance dict stays as it was)."""
    return vars(obj).get(name) or inspect.getattr_static(type(obj), name)


def installed(model, opt, sched, scaler) -> dict[str, object]:
    """Every kind of change the probe makes, as observable state."""
    module = torch.nn.modules.module
    return {
        "module hooks": sum(len(m._forward_pre_hooks) + len(m._forward_hooks) for m in model.modules()),
        "global module hooks": len(module._global_forward_pre_hooks) + len(module._global_forward_hooks),
        "parameter hooks": sum(len(p._post_accumulate_grad_hooks or {}) for p in model.parameters()),
        "optimizer hooks": len(opt._optimizer_step_pre_hooks) + len(opt._optimizer_step_post_hooks),
        "zero_grad wrappers": (_method(opt, "zero_grad"), _method(model, "zero_grad")),
        "optimizer step attribute": vars(opt).get("step"),
        "scheduler wrapper": _method(sched, "step"),
        "scaler wrappers": [_method(scaler, name) for name in ("scale", "unscale_", "step", "update")],
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


# -- no trace, compared object by object (issue 7, item 5) ------------------------------------------
def _dict_items(value: object) -> list[tuple[object, int]]:
    return [(k, id(v)) for k, v in value.items()] if isinstance(value, dict) else []


def _hooks(obj: object) -> dict[str, list[tuple[object, int]]]:
    """Every hook dict in the instance dict (forward, pre, backward, state-dict, step hooks ...)."""
    return {k: _dict_items(v) for k, v in vars(obj).items() if "hook" in k.lower() and isinstance(v, dict)}


def _methods(obj: object) -> dict[str, int]:
    """Callables set on the instance (wrappers, or the scheduler's own ``step`` wrapper on the
    optimizer) and the functions of its classes (where the guard wraps a method for this instance)."""
    own = {k: id(v) for k, v in vars(obj).items() if callable(v) and not isinstance(v, torch.nn.Module)}
    return {**own, **{f"{cls.__qualname__}.{k}": id(v) for cls in type(obj).__mro__ for k, v in vars(cls).items()
                      if inspect.isfunction(v)}}


def trace_state(model, opt, sched=None, scaler=None, loader=None, iterators=()) -> dict[str, object]:  # noqa: ANN001
    """Hook dicts and bound methods of every object the probe touches, and the globals it may patch."""
    module, optimizer = torch.nn.modules.module, importlib.import_module("torch.optim.optimizer")
    clip = torch.nn.utils.clip_grad
    return {
        "module hooks": {name: _hooks(m) for name, m in model.named_modules()},
        "module methods": {name: _methods(m) for name, m in model.named_modules()},
        "parameter hooks": [(_dict_items(p._post_accumulate_grad_hooks), _dict_items(p._backward_hooks))
                            for p in model.parameters()],
        "optimizer hooks": _hooks(opt),
        "optimizer methods": _methods(opt),
        "scheduler methods": _methods(sched) if sched is not None else None,
        "scaler methods": _methods(scaler) if scaler is not None else None,
        "global module hooks": {k: _dict_items(v) for k, v in vars(module).items() if k.startswith("_global_")},
        "global optimizer hooks": {k: _dict_items(v) for k, v in vars(optimizer).items() if k.startswith("_global_")},
        "functions": [id(f) for f in (torch.nn.utils.clip_grad_norm_, torch.nn.utils.clip_grad_value_,
                                      clip.clip_grad_norm_, clip.clip_grad_value_, torch.nn.utils.clip_grads_with_norm_,
                                      torch.autograd.backward,
                                      torch.autograd.grad, torch.Tensor.backward)],
        "saved-tensor hooks": torch._C._autograd._top_saved_tensors_default_hooks(False),
        "grad mode": torch.is_grad_enabled(),
        "loader type": type(loader),
        "iterator types": [type(it) for it in iterators],
    }


class Boom(KeyError):
    """The user's error in the loop."""


def _epoch_setup(scaler: bool = True):
    from tests.guard.guard_loops import TinyLM, epoch_loader

    torch.manual_seed(0)
    model = TinyLM()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.9)
    grad_scaler = torch.amp.GradScaler("cpu", init_scale=256.0) if scaler else None
    return model, opt, sched, grad_scaler, epoch_loader(10)  # 10 batches: r = 2 at A = 4


def _epoch_loop(model, opt, sched, scaler, loader, iterators, fail=None, a: int = 4) -> None:  # noqa: ANN001
    """Two epochs; ``fail = (epoch, microbatch, where, exception)`` raises at ``where`` in
    "loop" (after the backward), "forward" (inside the model's forward) or "backward" (in a grad hook)."""
    from tests.guard.guard_loops import VOCAB

    for epoch in range(2):
        it = iter(loader)
        iterators.append(it)
        for i, (ids, labels) in enumerate(it):
            here = fail is not None and fail[:2] == (epoch, i)
            handle = None
            if here and fail[2] == "forward":
                def raise_in_forward(mod, args, exc=fail[3]):  # noqa: ANN001, ANN202
                    raise exc("interrupted inside the forward")
                handle = model.head.register_forward_pre_hook(raise_in_forward)
            if here and fail[2] == "backward":
                def raise_in_backward(grad, exc=fail[3]):  # noqa: ANN001, ANN202
                    raise exc("interrupted inside the backward")
                handle = model.head.weight.register_hook(raise_in_backward)
            try:
                loss = torch.nn.functional.cross_entropy(model(ids).reshape(-1, VOCAB), labels.reshape(-1)) / a
                (scaler.scale(loss) if scaler is not None else loss).backward()
            finally:
                if handle is not None:
                    handle.remove()
            if here and fail[2] == "loop":
                raise fail[3]("the user's loop raised")
            if (i + 1) % a == 0:
                if scaler is not None:
                    scaler.unscale_(opt)
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                if scaler is not None:
                    scaler.step(opt)
                    scaler.update()
                else:
                    opt.step()
                sched.step()
                opt.zero_grad()


NO_TRACE_CASES = {
    # name: (probe options, fail)
    "normal exit": ({}, None),
    "exception mid-group": ({}, (0, 1, "loop", Boom)),
    "KeyboardInterrupt in the loop": ({}, (0, 5, "loop", KeyboardInterrupt)),
    "KeyboardInterrupt inside a forward": ({}, (0, 2, "forward", KeyboardInterrupt)),
    "KeyboardInterrupt inside a backward": ({}, (0, 2, "backward", KeyboardInterrupt)),
    "exception after auto-detach": ({"groups": 1}, (1, 3, "loop", Boom)),
    "replay, exception mid-group": ({"normalization": "replay"}, (0, 6, "loop", Boom)),
    "epoch end, normal exit": ({"at": "epoch_end"}, None),
    "epoch end, exception before the window": ({"at": "epoch_end"}, (0, 1, "loop", Boom)),
    "epoch end, KeyboardInterrupt in the window": ({"at": "epoch_end"}, (0, 9, "loop", KeyboardInterrupt)),
    "epoch end, KeyboardInterrupt in a backward": ({"at": "epoch_end"}, (1, 1, "backward", KeyboardInterrupt)),
}


@pytest.mark.parametrize("case", list(NO_TRACE_CASES))
@pytest.mark.parametrize("with_scaler", [True, False], ids=["scaler", "no-scaler"])
def test_no_trace_after_probe(case: str, with_scaler: bool) -> None:
    options, fail = NO_TRACE_CASES[case]
    model, opt, sched, scaler, loader = _epoch_setup(with_scaler)
    iterators: list[object] = []
    _epoch_loop(model, opt, sched, scaler, loader, iterators)  # warm-up: lazy imports and state exist now
    clean = trace_state(model, opt, sched, scaler, loader)
    iterators.clear()
    options = dict(accumulation_steps=4, scheduler=sched, scaler=scaler, loader=loader, **options)
    p = runtime_guard.probe(model, opt, **options)
    if fail is None:
        with p:
            _epoch_loop(model, opt, sched, scaler, loader, iterators)
    else:
        with pytest.raises(fail[3]), p:
            _epoch_loop(model, opt, sched, scaler, loader, iterators, fail)
    assert not p.attached
    after = trace_state(model, opt, sched, scaler, loader, iterators)
    assert after["iterator types"] == [type(iter(loader))] * len(iterators)
    assert after == {**clean, "iterator types": after["iterator types"]}
    report = p.report()  # the report is there on every path
    assert report.card["notes"][-1:] == ([] if fail is None or "auto-detach" in case else
                                         ["the probe detached on an exception"])


def test_trace_state_sees_the_attached_probe() -> None:
    """Negative control for the comparison above: while attached, each kind of change shows."""
    model, opt, sched, scaler, loader = _epoch_setup()
    clean = trace_state(model, opt, sched, scaler, loader)
    with runtime_guard.probe(model, opt, accumulation_steps=4, scheduler=sched, scaler=scaler):
        during = trace_state(model, opt, sched, scaler, loader)
    changed = {k for k in clean if clean[k] != during[k]}
    assert changed == {"module hooks", "module methods", "parameter hooks", "optimizer hooks", "optimizer methods",
                       "scheduler methods", "scaler methods", "functions", "saved-tensor hooks"}
    with runtime_guard.probe(model, opt, accumulation_steps=4, loader=loader, at="epoch_end"):
        assert trace_state(model, opt, sched, scaler, loader)["loader type"] is not clean["loader type"]
    assert trace_state(model, opt, sched, scaler, loader) == clean


def test_no_trace_with_on_finding_raise() -> None:
    """GuardFindingError comes from the exit, after everything was removed."""
    model, opt, sched, scaler, loader = _epoch_setup(scaler=False)
    clean = trace_state(model, opt, sched, scaler, loader)
    with pytest.raises(runtime_guard.GuardFindingError), runtime_guard.probe(
            model, opt, accumulation_steps=4, on_finding="raise"):
        for ids, _ in loader:
            opt.zero_grad()  # every microbatch: ACC001
            model(ids).square().mean().backward()
    assert trace_state(model, opt, sched, scaler, loader) == clean


# -- changes nothing, all state compared (issue 7, item 6) ------------------------------------------
def _full_run(guard: bool, precision: str, lr: float = 1e-2) -> dict[str, object]:
    """Two epochs drawing from torch, ``random`` and numpy RNGs; every piece of state at the end."""
    import random

    np = pytest.importorskip("numpy")
    from tests.guard.guard_loops import VOCAB

    model, opt, sched, scaler, loader = _epoch_setup(scaler=precision != "fp32")
    for group in opt.param_groups:
        group["lr"] = lr
    random.seed(0)
    np.random.seed(0)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    ctx = runtime_guard.probe(model, opt, accumulation_steps=4, scheduler=sched, scaler=scaler) if guard else None
    with ctx if ctx is not None else warnings.catch_warnings():
        for i, (ids, labels) in enumerate(list(loader) * 2):
            with torch.autocast("cpu", dtype=dtype, enabled=dtype is not None):
                logits = model(ids)
            noise = float(np.random.rand()) * 1e-3 + random.random() * 1e-3  # the program's own draws
            loss = (torch.nn.functional.cross_entropy(logits.float().reshape(-1, VOCAB), labels.reshape(-1))
                    + noise) / 4
            (scaler.scale(loss) if scaler is not None else loss).backward()
            if (i + 1) % 4 == 0:
                if scaler is not None:
                    scaler.unscale_(opt)
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                scaler.step(opt) if scaler is not None else opt.step()
                if scaler is not None:
                    scaler.update()
                sched.step()
                opt.zero_grad()
    state = {
        "params": {k: v.view(torch.uint8).tolist() for k, v in model.state_dict().items() if v.dim()},
        "optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
        "scaler": scaler.state_dict() if scaler is not None else None,
        "torch rng": torch.get_rng_state().tolist(), "python rng": random.getstate(),
        "numpy rng": [x.tolist() if hasattr(x, "tolist") else x for x in np.random.get_state()],
    }
    state["optimizer"] = {k: {i: {n: t.view(torch.uint8).tolist() if t.dim() else float(t) for n, t in s.items()}
                              for i, s in v.items()} if k == "state" else v for k, v in state["optimizer"].items()}
    return state


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_all_state_bitwise_identical(precision: str) -> None:
    """fp32 without a scaler; bf16 and fp16 autocast on CPU with ``torch.amp.GradScaler("cpu")``."""
    plain = _full_run(False, precision)
    assert plain == _full_run(False, precision)  # control: the harness is deterministic
    assert plain["params"] != _full_run(False, precision, lr=2e-2)["params"]  # control: it can fail
    guarded = _full_run(True, precision)
    for key in plain:
        assert plain[key] == guarded[key], key


def test_second_probe_is_refused_and_nothing_is_left() -> None:
    """Issue 17 item 8: a nested (or out-of-order) probe on the same objects is refused with a clear
    error; the first probe keeps observing, and after it detaches nothing is installed and nothing
    keeps it alive."""
    import gc
    import weakref

    model, opt, sched, scaler = _setup()
    clean = installed(model, opt, sched, scaler)
    outer = runtime_guard.probe(model, opt, accumulation_steps=2, scheduler=sched, scaler=scaler).attach()
    for other in (model, torch.nn.Linear(2, 2)):  # the same model, or any other: one probe at a time
        second = runtime_guard.probe(other, torch.optim.SGD(other.parameters(), lr=0.1), accumulation_steps=2)
        with pytest.raises(RuntimeError, match="another runtime_guard probe is attached .* one probe at a time"):
            second.attach()
        assert not second.attached
    for i in range(6):
        _microbatch(model, scaler, opt, sched, i)
    report = outer.detach()
    assert report.card["group_sizes"] == [2, 2] and report.codes == set()
    assert installed(model, opt, sched, scaler) == clean
    ref = weakref.ref(outer)
    del outer, report
    gc.collect()
    assert ref() is None  # no wrapper, hook or patch still references the probe


def test_finished_probe_is_detached_by_the_next_one() -> None:
    """A probe that saw its groups but got no further call (it detaches at the next one) makes way."""
    model, opt, sched, scaler = _setup()
    clean = installed(model, opt, sched, scaler)
    first = runtime_guard.probe(model, opt, accumulation_steps=2, groups=1).attach()
    for i in range(3):  # one group plus the next forward and backward: done, still attached
        _microbatch(model, scaler, opt, sched, i)
    assert first.done and first.attached
    second = runtime_guard.probe(model, opt, accumulation_steps=2, groups=1).attach()
    assert not first.attached and first.report().card["group_sizes"] == [2]
    second.detach()
    assert installed(model, opt, sched, scaler) == clean
