"""The guard never raises into the training it watches (issue 35, items 1-3): a prepared loader at an
epoch end, a hook or a discovery step that fails, a lazy package that would import the world, and a
script that raises under ``python -m runtime_guard run`` (its report is still written, its exception
is its own)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import types
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import runtime_guard  # noqa: E402
from runtime_guard import discover  # noqa: E402
from runtime_guard.contain import call_through  # noqa: E402
from runtime_guard.observe.backward import BackwardObserver  # noqa: E402
from runtime_guard.observe.forward import ForwardObserver  # noqa: E402
from runtime_guard.observe.gradient_ops import GradientOpsObserver  # noqa: E402
from runtime_guard.observe.services import ProbeServices  # noqa: E402
from runtime_guard.observe.updates import UpdateObserver  # noqa: E402
from runtime_guard.probe import Probe  # noqa: E402
from runtime_guard.report import GuardFindingError, Report  # noqa: E402
from tests.guard.guard_loops import A, TinyLM, bitwise_equal, epoch_loader, train, train_epochs  # noqa: E402
from tests.guard.test_guard_scripts import BUGGY  # noqa: E402
from tests.shared_data import REPO  # noqa: E402

#: The classes whose methods the containment test makes fail, by name.
_OBSERVERS = {cls.__name__: cls for cls in (ForwardObserver, BackwardObserver, UpdateObserver, GradientOpsObserver,
                                            ProbeServices)}


def _boom(*args, **kwargs):
    raise RuntimeError("boom")


def _all_not_observed(report: Report, where: str) -> bool:
    reason = f"not observed: the guard's {where} failed (RuntimeError: boom)"
    return not report.findings and set(report.card["checks"].values()) == {reason}


# -- the containers ------------------------------------------------------------------------------------


def test_call_through_keeps_the_users_call_and_exception() -> None:
    """The user's call runs once; its exception comes out unchanged although the guard's code after it
    failed too; a guard failure before the call still makes the call."""
    failures: list[str] = []

    def on_failure(where: str, error: Exception) -> None:
        failures.append(f"{where}: {error}")

    user_error = ValueError("the user's")
    calls: list[int] = []

    def user(x: int) -> int:
        calls.append(x)
        if x < 0:
            raise user_error
        return 2 * x

    def fails_after(call):
        try:
            return call(-1)
        finally:
            raise RuntimeError("guard after")

    with pytest.raises(ValueError) as raised:
        call_through(on_failure, "w", user, fails_after, (-1,), {})
    assert raised.value is user_error and raised.value.__context__ is None
    assert call_through(on_failure, "w", user, _boom, (3,), {}) == 6  # failed before the call: made here
    assert call_through(on_failure, "w", user, lambda call: call(4) and _boom(), (4,), {}) == 8  # after it
    assert calls == [-1, 3, 4] and failures == ["w: guard after", "w: boom", "w: boom"]
    finding = GuardFindingError(Report([], {}))
    with pytest.raises(GuardFindingError):  # asked for with on_finding="raise": passes through
        call_through(on_failure, "w", user, lambda call: (_ for _ in ()).throw(finding), (1,), {})


# -- item 1: hooks and the epoch-end watch -----------------------------------------------------------


@pytest.mark.parametrize("hook", ["ForwardObserver.on_forward_pre", "ForwardObserver.on_forward",
                                  "BackwardObserver.on_param_grad", "BackwardObserver._on_backward_end",
                                  "UpdateObserver.on_step_pre", "ProbeServices.around_grads",
                                  "GradientOpsObserver.observe_clip", "UpdateObserver.close_group",
                                  "ProbeServices.take_snapshot"])
def test_a_failing_hook_is_recorded_and_training_is_unchanged(hook: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each hook body, wrapper and patched function of a GradScaler loop made to fail: the loop runs to
    its end bit for bit as without the guard (every user call made once), nothing stays installed, and
    the card says "not observed" with the reason instead of judging the trace."""
    clips: list[int] = []  # parameters per clip call: a clip skipped or given a spent generator would show
    clip = torch.nn.utils.clip_grad_norm_

    def counting_clip(parameters, *args, **kwargs):
        parameters = list(parameters)
        clips.append(len(parameters))
        return clip(parameters, *args, **kwargs)

    for module in (torch.nn.utils, torch.nn.utils.clip_grad):
        monkeypatch.setattr(module, "clip_grad_norm_", counting_clip)
    plain, plain_clips = train(scaler=True, guard=False), list(clips)
    clips.clear()
    owner, name = hook.split(".")
    monkeypatch.setattr(_OBSERVERS[owner], name, _boom)
    probed = train(scaler=True)
    assert bitwise_equal(plain, probed) and clips == plain_clips
    failure = probed.report.card["checks"]["ACC001"]
    assert failure.startswith("not observed: the guard's ") and failure.endswith("failed (RuntimeError: boom)")
    assert not probed.report.findings
    assert any(note.startswith(failure) for note in probed.report.card["notes"])
    assert torch.nn.utils.clip_grad_norm_ is torch.nn.utils.clip_grad.clip_grad_norm_
    assert torch._C._autograd._top_saved_tensors_default_hooks(False) is None


def test_a_failing_report_is_a_card_that_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """Building the card at the auto-detach (inside the loop) fails: no raise, a card without findings."""
    from runtime_guard import card

    monkeypatch.setattr(card, "build_card", _boom)
    report = train().report
    assert not report.findings and "not observed: the guard failed building its report" in str(report)
    assert set(report.card["checks"].values()) == {
        "not observed: the guard failed building its report (RuntimeError: boom)"}


def test_epoch_end_probe_on_an_accelerate_prepared_loader() -> None:
    """Accelerate's ``DataLoaderShard`` answers ``__class__`` with a read-only property: the watch swaps
    the class underneath it (the property still answers), observes the epoch end, and puts it back."""
    pytest.importorskip("accelerate")
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, GradientState

    torch.manual_seed(0)
    model = TinyLM()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    try:
        model, opt, loader = Accelerator(cpu=True).prepare(model, opt, epoch_loader(14))
        prepared = type(loader)
        with runtime_guard.probe(model, opt, accumulation_steps=A, loader=loader, at="epoch_end") as p:
            assert type(loader) is not prepared and loader.__class__ is torch.utils.data.DataLoader
            for _ in range(2):
                for i, (ids, labels) in enumerate(loader):
                    torch.nn.functional.cross_entropy(model(ids).reshape(-1, 7), labels.reshape(-1)).backward()
                    if (i + 1) % A == 0:
                        opt.step()
                        opt.zero_grad()
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)
        GradientState._reset_state()
    assert type(loader) is prepared and loader.__class__ is torch.utils.data.DataLoader
    assert p.report().card["last_group"].startswith("leaks into the next epoch")


def test_a_failing_epoch_watch_is_recorded_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    """The hooks go in from inside the user's ``for`` loop (the loader watch): a failure there leaves the
    loop running, unchanged, and the card says why nothing was judged."""
    plain = train_epochs("leaks", guard=False)
    monkeypatch.setattr(Probe, "_install", _boom)
    probed = train_epochs("leaks")
    assert bitwise_equal(plain, probed)
    assert _all_not_observed(probed.report, "loader watch (batch)")


# -- item 2: discovery imports nothing -----------------------------------------------------------------

#: the guard scripts' ACC001 loop, with room for code in its body and after it
PLAIN_LOOP = BUGGY.replace("{", "{{").replace("}", "}}") + "    {inside}\n{end}\n"


def _script(tmp_path: Path, inside: str = "pass", end: str = "") -> Path:
    """The loop above, with ``inside`` at the end of each microbatch and ``end`` after the loop."""
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent(PLAIN_LOOP.format(inside=inside, end=end)))
    return path


class _LazyPackage(types.ModuleType):
    """A package whose attributes import submodules on first access (transformers' ``_LazyModule``):
    each access is recorded, and fails as a broken import would."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.accessed: list[str] = []

    def __getattr__(self, name: str):
        self.accessed.append(name)
        raise ImportError(f"importing {self.__name__}.{name} failed")


def test_discovery_never_touches_a_lazy_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Framework classes are read from their defining modules in ``sys.modules`` only: a lazy package is
    never asked (its import would cost seconds inside the first forward, and a failing one kills the run),
    and the first forward imports no module at all."""
    lazy = {name: _LazyPackage(name) for name in ("transformers", "accelerate")}
    for name, package in lazy.items():
        monkeypatch.setitem(sys.modules, name, package)
    for name in ("transformers.trainer", "accelerate.accelerator"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    before = set(sys.modules)
    probe = discover.run_script(_script(tmp_path), accumulation_steps=2)
    assert [p.accessed for p in lazy.values()] == [[], []]
    assert probe.report() is not None and probe.report().codes == {"ACC001"}
    assert set(sys.modules) - before <= {"__main__"}


def test_a_failing_discovery_does_not_break_the_first_forward(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(discover, "_find_objects", _boom)
    probe = discover.run_script(_script(tmp_path), accumulation_steps=2)
    assert probe.report() is None
    assert probe.reason == "discovery at the first forward of Linear failed (RuntimeError: boom)"


# -- item 3: `run` reports a script that raises ------------------------------------------------------


@pytest.mark.parametrize(("inside", "end", "expected"), [
    ("if i == 2: raise ValueError('the script failed')", "", ValueError),  # inside the probed groups
    ("pass", "import sys; sys.exit(3)", SystemExit),  # after them
])
def test_run_writes_the_report_when_the_script_raises(tmp_path: Path, inside: str, end: str, expected: type,
                                                      capsys: pytest.CaptureFixture) -> None:
    """The report is printed and written from a ``finally``; the script's exception comes out unchanged."""
    from runtime_guard.__main__ import main

    script, card = _script(tmp_path, inside, end), tmp_path / "card.json"
    with pytest.raises(expected) as raised:
        main(["run", "-A", "2", "--json", str(card), str(script)])
    written = json.loads(card.read_text())
    assert [f["code"] for f in written["findings"]] == ["ACC001"]
    assert "ACC001" in capsys.readouterr().out
    if expected is SystemExit:
        assert raised.value.code == 3 and written["card"]["notes"] == []
    else:
        assert str(raised.value) == "the script failed" and Path(raised.traceback[-1].path) == script
        assert written["card"]["notes"][-1] == "the probe detached on an exception"


def test_run_keeps_the_scripts_traceback_and_status(tmp_path: Path) -> None:
    """A real ``python -m runtime_guard run``: the script's traceback and exit status, and the card."""
    script, card = _script(tmp_path, "if i == 2: raise ValueError('the script failed')"), tmp_path / "card.json"
    done = subprocess.run([sys.executable, "-m", "runtime_guard", "run", "-A", "2", "--json", str(card),
                           str(script)], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 1
    assert done.stderr.rstrip().endswith("ValueError: the script failed")
    assert f'File "{script}", line ' in done.stderr
    assert "ACC001" in done.stdout and card.is_file()


# -- item 2: no pass over every live object inside the first forward --------------------------------

NEAR_LOOP = """
import warnings

import torch
from torch.optim.swa_utils import AveragedModel
warnings.filterwarnings("ignore", "Detected call of")  # the scheduler stepped before the first update
torch.manual_seed(0)
model = torch.nn.Linear(3, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: 0.9 ** k)
ema = AveragedModel(model)


def train():
    for i in range(8):
        (model(torch.randn(2, 3)).sum() / 2).backward()
        scheduler.step()  # every microbatch: ACC304
        if i % 2 == 1:
            optimizer.step()
            optimizer.zero_grad()
            ema.update_parameters(model)


train()
"""

#: the optimizer held only in another module's dict: the stack does not reach it
FAR_FROM_LOOP = """
import torch
import far_state
torch.manual_seed(0)
model = torch.nn.Linear(3, 2)
far_state.STATE["optimizer"] = torch.optim.SGD(model.parameters(), lr=0.1)
for i in range(8):
    far_state.STATE["optimizer"].zero_grad()  # every microbatch: ACC001
    (model(torch.randn(2, 3)).sum() / 2).backward()
    if i % 2 == 1:
        far_state.STATE["optimizer"].step()
"""


def _count_heap_passes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record every ``gc.get_objects`` and ``gc.collect`` call from now on."""
    import gc

    calls: list[str] = []
    for name in ("get_objects", "collect"):
        original = getattr(gc, name)
        monkeypatch.setattr(gc, name, lambda *a, _name=name, _original=original, **k: (calls.append(_name),
                                                                                    _original(*a, **k))[1])
    return calls


def test_discovery_finds_the_loops_objects_without_a_heap_pass(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The optimizer, the scheduler and the weight copy the loop holds are found from the stack: no
    ``gc.collect()`` and no pass over every live object inside the first forward (with transformers
    imported, 300k+ objects: more than a small model's microbatch). Run on a thread of its own, whose
    stack is a script's (pytest's frames reach more objects than the search's bound: it then falls
    back to the pass)."""
    script = tmp_path / "train.py"
    script.write_text(NEAR_LOOP)
    calls = _count_heap_passes(monkeypatch)
    probes: list[discover.ScriptProbe] = []
    thread = threading.Thread(target=lambda: probes.append(discover.run_script(script, accumulation_steps=2)))
    thread.start()
    thread.join()
    report = probes[0].report()
    assert calls == []
    assert report is not None and "ACC304" in report.codes
    assert report.card["checks"]["ACC007"] == "checked"  # the AveragedModel was found


def test_discovery_falls_back_to_every_live_object(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An optimizer the stack does not reach (held in another module's dict) is still found, by one pass
    over the live objects."""
    (tmp_path / "far_state.py").write_text("STATE = {}\n")
    script = tmp_path / "train.py"
    script.write_text(FAR_FROM_LOOP)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "far_state", raising=False)
    calls = _count_heap_passes(monkeypatch)
    report = discover.run_script(script, accumulation_steps=2).report()
    assert report is not None and report.codes == {"ACC001"}
    assert "get_objects" in calls
