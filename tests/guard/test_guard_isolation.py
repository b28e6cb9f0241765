"""The guard records only its own loop: calls from other threads and on other models' parameters
are not attributed to the probed model, a loop with several models whose forwards cannot be told
apart is "not observable" instead of a guess, and what the guard puts into process-wide state
(``clip_grad_norm_``, the saved-tensor default hooks) never outlives it nor undoes the program's own
changes (issue 28, item 12)."""

from __future__ import annotations

import gc
import threading
import weakref

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

import runtime_guard  # noqa: E402

ORIGINAL_CLIP = torch.nn.utils.clip_grad_norm_
top_hooks = torch._C._autograd._top_saved_tensors_default_hooks


def _model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))


def _twin(model: nn.Module) -> list[torch.Tensor]:
    """Copies of ``model``'s parameters holding copies of its grads: clipped by the original function
    for comparison."""
    twin = []
    for p in model.parameters():
        q = p.detach().clone().requires_grad_()
        q.grad = p.grad.clone()
        twin.append(q)
    return twin


def _correct_step(model: nn.Module, opt: torch.optim.Optimizer, i: int, a: int = 2) -> None:
    """One microbatch of a correct loop: one clip per group, after the group's last backward."""
    (model(torch.randn(5, 4)).square().mean() / a).backward()
    if i % a == a - 1:
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()


def test_a_clip_on_another_thread_is_not_recorded() -> None:
    """A second thread clipping its own model between the loop's backwards: no ACC301 (it was)."""
    model, other = _model(0), _model(1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    other(torch.randn(5, 4)).sum().backward()
    go, finished, stop = threading.Event(), threading.Event(), False

    def clipper() -> None:
        while go.wait() and not stop:
            go.clear()
            torch.nn.utils.clip_grad_norm_(other.parameters(), 0.01)
            finished.set()

    worker = threading.Thread(target=clipper)
    worker.start()
    try:
        with runtime_guard.probe(model, opt, accumulation_steps=2) as p:
            for i in range(6):
                (model(torch.randn(5, 4)).square().mean() / 2).backward()
                go.set()  # the other thread clips now, inside the loop's group
                assert finished.wait(10)
                finished.clear()
                if i % 2 == 1:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                    opt.step()
                    opt.zero_grad()
    finally:
        stop = True
        go.set()
        worker.join(10)
    report = p.report()
    assert report.codes == set()
    assert [g["trace"] for g in report.card["groups"][:2]] == ["F B F B C S Z"] * 2


def _gan_loop(
    g: nn.Module, d: nn.Module, opt_g: torch.optim.Optimizer, opt_d: torch.optim.Optimizer, steps: int, a: int = 2
) -> None:
    """A correct GAN loop with accumulation: D clipped every microbatch, G forwarded twice."""
    bce = nn.BCEWithLogitsLoss()
    for i in range(steps):
        real, z = torch.randn(5, 3), torch.randn(5, 4)
        fake = g(z)
        d_loss = bce(d(real), torch.ones(5, 1)) + bce(d(fake.detach()), torch.zeros(5, 1))
        (d_loss / a).backward()
        torch.nn.utils.clip_grad_norm_(d.parameters(), 1.0)
        g_loss = bce(d(g(z)), torch.ones(5, 1))
        (g_loss / a).backward()
        if i % a == a - 1:
            torch.nn.utils.clip_grad_norm_(g.parameters(), 1.0)
            opt_d.step()
            opt_d.zero_grad()
            opt_g.step()
            opt_g.zero_grad()


@pytest.mark.parametrize("given", [2, None])
def test_gan_loop_is_not_observable_instead_of_false_findings(given: int | None) -> None:
    """Probe on G: D's clips are not G's (no ACC301), and G's two forwards per microbatch (one feeds D
    detached) make the group sizes "not observable: several models" (no ACC006), and A is not
    inferred from them."""
    g, d = _model(0), nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1))
    opt_g, opt_d = torch.optim.Adam(g.parameters(), 1e-3), torch.optim.Adam(d.parameters(), 1e-3)
    with runtime_guard.probe(g, opt_g, accumulation_steps=given) as p:
        _gan_loop(g, d, opt_g, opt_d, 8)
    report = p.report()
    assert report.codes == set()
    checks = report.card["checks"]
    assert checks["ACC006"].startswith("not observable: several models")
    assert "4 forwards" in checks["ACC006"] and "2 of them reached by a backward" in checks["ACC006"]
    assert checks["ACC301"] == "checked"
    assert report.card["groups"][0]["trace"] == "F F B F F B C S Z"  # D's clips are not in G's trace
    assert any(note.endswith("were not counted as its own: clip_grad_norm_ 5x") for note in report.card["notes"])
    assert report.card["A"] == given
    if given is None:
        assert report.card["A_source"].startswith("not inferred: several models: group 0 had 4 forwards")


def test_forwards_backwarded_together_are_still_microbatches() -> None:
    """The control: all of a group's forwards first, then one backward of their summed losses: every
    output is reached, the forwards are microbatches (sizes checked, no "several models"; the graphs
    kept across microbatches are ACC201)."""
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with runtime_guard.probe(model, opt) as p:
        for _ in range(3):
            sum(model(torch.randn(5, 4)).square().mean() / 2 for _ in range(2)).backward()
            opt.step()
            opt.zero_grad()
    report = p.report()
    assert report.codes == {"ACC201"}
    assert report.card["group_sizes"] == [2, 2] and report.card["A"] == 2
    assert report.card["checks"]["ACC006"] == "checked"


def test_a_shared_scaler_records_only_the_probed_optimizers_unscale_and_step() -> None:
    """One GradScaler for G and D: D's ``unscale_`` and ``step`` are not G's (D's step closed G's group,
    before G's own clip and step)."""
    g, d = _model(0), nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1))
    opt_g, opt_d = torch.optim.Adam(g.parameters(), 1e-3), torch.optim.Adam(d.parameters(), 1e-3)
    scaler = torch.amp.GradScaler("cpu", init_scale=4.0)
    bce = nn.BCEWithLogitsLoss()
    with runtime_guard.probe(g, opt_g, accumulation_steps=2, scaler=scaler) as p:
        for i in range(6):
            real, z = torch.randn(5, 3), torch.randn(5, 4)
            d_loss = bce(d(real), torch.ones(5, 1)) + bce(d(g(z).detach()), torch.zeros(5, 1))
            scaler.scale(d_loss / 2).backward()
            scaler.scale(bce(d(g(z)), torch.ones(5, 1)) / 2).backward()
            if i % 2 == 1:
                for opt, model in ((opt_d, d), (opt_g, g)):
                    scaler.unscale_(opt)
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                    scaler.step(opt)
                    opt.zero_grad()
                scaler.update()
    report = p.report()
    assert report.codes == set()
    assert [g["trace"] for g in report.card["groups"][:2]] == ["F K F K B F K F K B X C s S Z U"] * 2
    assert report.card["notes"][-1].endswith("clip_grad_norm_ 2x, scaler.step 2x, scaler.unscale_ 2x")


def _gan_weights(guard: bool) -> list[torch.Tensor]:
    g, d = _model(0), nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1))
    opt_g, opt_d = torch.optim.Adam(g.parameters(), 1e-3), torch.optim.Adam(d.parameters(), 1e-3)
    torch.manual_seed(1)
    if guard:
        with runtime_guard.probe(g, opt_g, accumulation_steps=2):
            _gan_loop(g, d, opt_g, opt_d, 8)
    else:
        _gan_loop(g, d, opt_g, opt_d, 8)
    return [t.detach().clone() for t in (*g.parameters(), *d.parameters())]


def test_gan_loop_bitwise_identical_with_and_without_guard() -> None:
    plain, control, guarded = _gan_weights(False), _gan_weights(False), _gan_weights(True)
    assert all(torch.equal(a, b) for a, b in zip(plain, control, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(plain, guarded, strict=True))


def test_a_clip_of_another_model_leaves_a_real_finding() -> None:
    """Attribution by parameters keeps the real ACC301: G itself clipped every microbatch."""
    g, d = _model(0), _model(1)
    opt = torch.optim.SGD(g.parameters(), lr=0.1)
    with runtime_guard.probe(g, opt, accumulation_steps=2) as p:
        for i in range(6):
            (g(torch.randn(5, 4)).square().mean() / 2).backward()
            torch.nn.utils.clip_grad_norm_(d.parameters(), 1.0)  # another model's: not counted
            torch.nn.utils.clip_grad_norm_(iter([*d.parameters(), *g.parameters()]), 1.0)  # G's too: counted
            if i % 2 == 1:
                opt.step()
                opt.zero_grad()
    report = p.report()
    assert report.codes == {"ACC301"}
    assert report.card["groups"][0]["trace"] == "F B C F B C S Z"


def test_a_clip_given_a_generator_clips_the_same() -> None:
    """The wrapper reads the parameters to attribute the clip; torch still gets a generator (its
    warning on an empty one) and the same gradients."""
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(5, 4)).sum().backward()
    twin = _twin(model)
    norm = ORIGINAL_CLIP(twin, 0.5)
    with runtime_guard.probe(model, opt, accumulation_steps=2):
        got = torch.nn.utils.clip_grad_norm_((p for p in model.parameters()), 0.5)
        with pytest.warns(UserWarning, match="empty generator"):
            torch.nn.utils.clip_grad_norm_((p for p in ()), 0.5)
    assert torch.equal(got, norm)
    assert all(torch.equal(p.grad, q.grad) for p, q in zip(model.parameters(), twin, strict=True))


def _forward_backward(model: nn.Module) -> None:
    model(torch.randn(5, 4)).square().mean().backward()


def test_auto_detach_inside_the_users_saved_tensor_hooks_pops_the_guards_later() -> None:
    """The probe finishes inside the program's ``saved_tensors_hooks`` block: the program's hooks stay
    on top (and keep being called); the guard's, beneath them, are gone after the block (they stayed
    for the thread's life)."""
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    packed: list[int] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        packed.append(1)
        return t

    p = runtime_guard.probe(model, opt, accumulation_steps=1, groups=1).attach()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        _correct_step(model, opt, 0, a=1)
        _forward_backward(model)  # the watched tail: done
        assert p.done
        _forward_backward(model)  # the next call detaches
        assert not p.attached
        assert top_hooks(False)[0] is pack
        before = len(packed)
        _forward_backward(model)
        assert len(packed) > before  # the program's hooks still run
    _forward_backward(model)
    assert top_hooks(False) is None
    assert any("saved-tensor hooks are beneath" in note for note in p.report().card["notes"])


def _save_on_cpu_run(guard: bool) -> list[torch.Tensor]:
    """A loop whose microbatches run inside ``save_on_cpu()``; with ``guard`` the probe finishes inside it."""
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.manual_seed(1)
    p = runtime_guard.probe(model, opt, accumulation_steps=1, groups=1).attach() if guard else None
    with torch.autograd.graph.save_on_cpu():
        for _ in range(3):
            _forward_backward(model)
            opt.step()
            opt.zero_grad()
        assert p is None or not p.attached
    for _ in range(2):
        _forward_backward(model)
        opt.step()
        opt.zero_grad()
    assert top_hooks(False) is None
    return [t.detach().clone() for t in model.parameters()]


def test_auto_detach_inside_save_on_cpu_pops_the_guards_later() -> None:
    """Gone after the block, and the weights are bitwise those of the run without the guard."""
    guarded, plain = _save_on_cpu_run(True), _save_on_cpu_run(False)
    assert all(torch.equal(a, b) for a, b in zip(guarded, plain, strict=True))


def test_detach_from_another_thread_leaves_no_hooks_on_the_loop_thread() -> None:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    p = runtime_guard.probe(model, opt, accumulation_steps=2).attach()
    _forward_backward(model)
    worker = threading.Thread(target=p.detach)
    worker.start()
    worker.join(10)
    assert not p.attached
    _forward_backward(model)  # the loop thread's next saved tensor drops them
    assert top_hooks(False) is None


def test_the_programs_own_clip_patch_survives_detach() -> None:
    """A patch of ``clip_grad_norm_`` the program made while attached stays; the guard's wrapper under
    it becomes a pass-through."""
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    calls: list[int] = []
    try:
        with runtime_guard.probe(model, opt, accumulation_steps=2) as p:
            guard_wrapper = torch.nn.utils.clip_grad_norm_

            def user_clip(*args: object, **kwargs: object) -> torch.Tensor:
                calls.append(1)
                return guard_wrapper(*args, **kwargs)

            torch.nn.utils.clip_grad_norm_ = user_clip
            for i in range(4):
                _correct_step(model, opt, i)
        assert torch.nn.utils.clip_grad_norm_ is user_clip
        assert torch.nn.utils.clip_grad.clip_grad_norm_ is ORIGINAL_CLIP
        seen = len(p.record.groups)
        model(torch.randn(5, 4)).sum().backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        assert len(calls) == 3 and len(p.record.groups) == seen
    finally:
        torch.nn.utils.clip_grad_norm_ = ORIGINAL_CLIP


def test_a_kept_wrapper_holds_neither_the_probe_nor_the_model() -> None:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with runtime_guard.probe(model, opt, accumulation_steps=2) as p:
        kept = torch.nn.utils.clip_grad_norm_
        for i in range(6):
            _correct_step(model, opt, i)
    assert kept is not ORIGINAL_CLIP and p.report().codes == set()
    refs = weakref.ref(p), weakref.ref(model)
    del p, model, opt
    gc.collect()
    assert [r() for r in refs] == [None, None]
    other = _model(1)
    other(torch.randn(5, 4)).sum().backward()
    twin = _twin(other)
    assert torch.equal(kept(other.parameters(), 0.1), ORIGINAL_CLIP(twin, 0.1))
    assert all(torch.equal(p.grad, q.grad) for p, q in zip(other.parameters(), twin, strict=True))


def test_a_locals_dict_the_program_keeps_is_left_whole() -> None:
    """The search for the loop's objects reads each frame's locals; a ``locals()`` dict the program holds
    is that frame's own snapshot, and stays as it was (only a snapshot nothing else holds is emptied)."""

    def loop() -> dict[str, object]:
        model = _model()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        kept = locals()
        with runtime_guard.probe(model, opt, accumulation_steps=2) as p:
            for i in range(4):
                _correct_step(model, opt, i)
        assert p.report().codes == set()
        return kept

    assert {"model", "opt"} <= set(loop())
