"""What a loop reports about itself, at run time (issue 35, item 8): a rate handed to ``runtime_guard.log``
that counts one microbatch over the time of a whole group (ACC903), and a resumed run whose scheduler was
restored from a count of microbatches while the optimizer's own count says updates (ACC904).

The loops are reduced from the shapes of real scripts (a throughput logged at each update; a checkpoint
that saves the microbatch counter under "step"). The time a rate covers comes from a clock the test
advances by one second per microbatch, the same for the loop and the guard: no timed test."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

import runtime_guard  # noqa: E402
from runtime_guard.observe import figures, loggers  # noqa: E402
from runtime_guard.observe.figures import rate_unit  # noqa: E402

A = 4
MICROBATCH = 8


class Clock:
    """Seconds that pass only when the loop says so (one per microbatch)."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(figures, "clock", fake)
    return fake


def _data(groups: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(MICROBATCH, 16, generator=g), torch.randn(MICROBATCH, 1, generator=g))
            for _ in range(groups * A)]


def _throughput_loop(clock: Clock, log: Any, groups: int = 3) -> runtime_guard.Report:
    """The catalogue's throughput loop: examples per second logged at each update, from ``log(n_examples,
    seen, elapsed)``."""
    torch.manual_seed(0)
    model = nn.Linear(16, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with runtime_guard.probe(model, opt, accumulation_steps=A, groups=2) as p:
        seen, t0 = 0, clock()
        for i, (x, y) in enumerate(_data(groups)):
            n_examples = x.shape[0]
            (nn.functional.mse_loss(model(x), y) / A).backward()
            clock.now += 1.0  # this microbatch took a second
            seen += n_examples
            if (i + 1) % A == 0:
                opt.step()
                opt.zero_grad()
                log(n_examples, seen, clock() - t0)
                seen, t0 = 0, clock()
    return p.report()


def test_a_rate_of_one_microbatch_over_the_group_time_is_acc903(clock: Clock) -> None:
    report = _throughput_loop(clock, lambda n, seen, dt: runtime_guard.log({"train/examples_per_sec": n / dt}))
    assert [(f.code, f.group) for f in report.findings] == [("ACC903", 1)]  # group 0 has no update before it
    assert "the examples of the group's last microbatch (8), not of its 4 microbatches (32)" in \
        report.findings[0].observed
    assert report.card["checks"]["ACC903"] == "checked"
    rows = report.card["logged_rates"]
    assert [r["verdict"] for r in rows][:2] == ["not judged: logged before the probe saw an update, so the time it "
                                                "covers is not known", "one microbatch"]
    assert rows[1]["rate_times_seconds"] == 8.0 and rows[1]["counts"]["examples"] == {"group": 32,
                                                                                      "last_microbatch": 8}


def test_a_rate_of_the_whole_group_is_right(clock: Clock) -> None:
    report = _throughput_loop(clock, lambda n, seen, dt: runtime_guard.log(samples_per_second=seen / dt))
    assert report.findings == []
    assert report.card["checks"]["ACC903"] == "checked"
    assert report.card["logged_rates"][1]["verdict"] == "the whole group"


def test_token_rates_count_input_tokens(clock: Clock) -> None:
    """``batch["input_ids"].numel()`` of the last microbatch over the group's time: the probe knows the
    tokens of each microbatch from its integer input."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(50, 8), nn.Linear(8, 50))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    with runtime_guard.probe(model, opt, accumulation_steps=A, groups=2) as p:
        t0 = clock()
        for i in range(3 * A):
            ids = torch.randint(0, 50, (2, 6), generator=g)
            logits = model(ids)
            (nn.functional.cross_entropy(logits.reshape(-1, 50), ids.reshape(-1)) / A).backward()
            clock.now += 0.5
            if (i + 1) % A == 0:
                opt.step()
                opt.zero_grad()
                runtime_guard.log({"tokens_per_sec": ids.numel() / (clock() - t0), "loss": 1.0})
                t0 = clock()
    report = p.report()
    assert [f.code for f in report.findings] == ["ACC903"]
    row = report.card["logged_rates"][1]
    assert row["unit"] == "tokens" and row["counts"]["input tokens"] == {"group": 48, "last_microbatch": 12}
    # "loss" is no rate (not kept); the third update comes after the probe detached
    assert [r["name"] for r in report.card["logged_rates"]] == ["tokens_per_sec"] * 2


def test_a_rate_without_a_unit_or_without_a_log_is_not_judged(clock: Clock) -> None:
    report = _throughput_loop(clock, lambda n, seen, dt: runtime_guard.log(throughput=n / dt))
    assert report.findings == []
    assert report.card["checks"]["ACC903"].startswith("not observed: 2 logged rate(s), none judged (not judged: ")
    report = _throughput_loop(clock, lambda n, seen, dt: None)
    assert report.card["checks"]["ACC903"].startswith("not observed: no rate (tokens or examples per second) was "
                                                      "logged while probed through runtime_guard.log()")
    assert report.card["logged_rates"] is None


def test_log_without_a_probe_does_nothing() -> None:
    runtime_guard.log({"tokens_per_sec": 3.0})  # no probe attached: no error


@pytest.mark.parametrize(("name", "unit"), [
    ("tokens_per_sec", "tokens"), ("train/tok/s", "tokens"), ("samples_per_second", "examples"),
    ("examples/sec", "examples"), ("img_per_sec", "examples"), ("throughput", ""), ("it/s", ""),
    ("perf/tps", "tokens"), ("sps", "examples"), ("loss", None), ("lr", None), ("grad_norm", None), ("steps", None),
    ("eps", None),
])
def test_rate_names(name: str, unit: str | None) -> None:
    assert rate_unit(name) == unit


SCHEDULE = staticmethod(lambda step: 1.0 / (1 + step))


def _train(model: nn.Module, opt: torch.optim.Optimizer, sched: Any, data: list, probed: bool = False
           ) -> tuple[int, runtime_guard.Report | None]:
    """The catalogue's resumable loop with an LR scheduler stepped at each update; returns the microbatch
    counter it saves and the report when ``probed``."""
    p = runtime_guard.probe(model, opt, accumulation_steps=A, scheduler=sched, groups=2).attach() if probed else None
    micro_step = 0
    for i, (x, y) in enumerate(data):
        (nn.functional.mse_loss(model(x), y) / A).backward()
        micro_step += 1
        if (i + 1) % A == 0:
            opt.step()
            sched.step()
            opt.zero_grad()
    return micro_step, (p.detach() if p is not None else None)


def _resume(restore: str) -> runtime_guard.Report:
    """Train 2 updates, save {"step": micro_step, "updates": 2, optimizer}, then resume a new run whose
    scheduler starts at the counter ``restore`` names, probed."""
    torch.manual_seed(0)
    model = nn.Linear(16, 1)
    opt = torch.optim.AdamW(model.parameters(), lr=0.05)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, SCHEDULE)
    micro_step, _ = _train(model, opt, sched, _data(2))
    ckpt = {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": micro_step, "updates": 2}
    model = nn.Linear(16, 1)
    model.load_state_dict(ckpt["model"])
    opt = torch.optim.AdamW(model.parameters(), lr=0.05)
    opt.load_state_dict(ckpt["optimizer"])
    completed_updates = ckpt[restore]
    sched = torch.optim.lr_scheduler.LambdaLR(opt, SCHEDULE, last_epoch=completed_updates - 1)
    _, report = _train(model, opt, sched, _data(3), probed=True)
    assert report is not None
    return report


def test_a_scheduler_resumed_from_the_microbatch_counter_is_acc904() -> None:
    report = _resume("step")
    assert [f.code for f in report.findings] == ["ACC904"]
    assert "applied 2 updates (its own count, state['step']) and the LR scheduler stood at position 8" in \
        report.findings[0].observed
    assert report.card["checks"]["ACC904"] == "checked"
    assert report.card["at_attach"] == {"optimizer_updates": 2, "scheduler_position": 8}


def test_a_scheduler_resumed_from_the_update_counter_is_right() -> None:
    report = _resume("updates")
    assert report.findings == []
    assert report.card["checks"]["ACC904"] == "checked"
    assert report.card["at_attach"] == {"optimizer_updates": 2, "scheduler_position": 2}


def test_a_fresh_run_leaves_acc904_not_observed() -> None:
    torch.manual_seed(0)
    model = nn.Linear(16, 1)
    opt = torch.optim.AdamW(model.parameters(), lr=0.05)
    _, report = _train(model, opt, torch.optim.lr_scheduler.LambdaLR(opt, SCHEDULE), _data(3), probed=True)
    assert report is not None and report.findings == []
    assert report.card["checks"]["ACC904"].startswith("not observed: the optimizer's state held no update count")


# -- the loggers a loop already calls (runtime_guard.observe.loggers) -------------------------------------------


def _stand_in(monkeypatch: pytest.MonkeyPatch, module: str, cls: type) -> None:
    """Make ``cls`` the class ``module`` defines, as if the script had imported it (no wandb or TensorBoard
    here: the guard finds the class through ``sys.modules`` and hooks it there)."""
    loaded = types.ModuleType(module)
    setattr(loaded, cls.__name__, cls)
    monkeypatch.setitem(sys.modules, module, loaded)


class Run:
    """Shaped like wandb 0.31.0's ``wandb.sdk.wandb_run.Run``: ``log`` ends in ``self._log(data=...)``."""

    def __init__(self) -> None:
        self.history: list[dict[str, Any]] = []

    def _log(self, data: dict[str, Any], step: int | None = None, commit: bool | None = None) -> None:
        self.history.append(dict(data))

    def log(self, data: dict[str, Any], step: int | None = None, commit: bool | None = None) -> None:
        self._log(data=data, step=step, commit=commit)


class SummaryWriter:
    """Shaped like torch's (and tensorboardX's) ``SummaryWriter``: ``add_scalars`` does not call ``add_scalar``."""

    def __init__(self) -> None:
        self.scalars: list[tuple[str, float]] = []

    def add_scalar(self, tag: str, scalar_value: float, global_step: int | None = None,
                   walltime: float | None = None) -> None:
        self.scalars.append((tag, scalar_value))

    def add_scalars(self, main_tag: str, tag_scalar_dict: dict[str, float], global_step: int | None = None,
                    walltime: float | None = None) -> None:
        self.scalars += [(f"{main_tag}_{tag}", v) for tag, v in tag_scalar_dict.items()]


def test_wandb_log_bound_before_attach_is_read(clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    """``wandb.init`` binds ``wandb.log = run.log`` before the loop: the hook on ``Run._log`` sees it."""
    _stand_in(monkeypatch, "wandb.sdk.wandb_run", Run)
    run = Run()
    log = run.log  # wandb.log after wandb.init
    report = _throughput_loop(clock, lambda n, seen, dt: log({"train/examples_per_sec": n / dt, "loss": 0.1}))
    assert [(f.code, f.group) for f in report.findings] == [("ACC903", 1)]
    assert report.findings[0].evidence == "wandb.log('train/examples_per_sec') in group 1"
    assert [r["source"] for r in report.card["logged_rates"]] == ["wandb.log"] * 2
    assert len(run.history) == 3 and run.history[0]["loss"] == 0.1  # every call reached wandb, unchanged
    assert Run.__dict__["_log"].__qualname__ == "Run._log"  # the hook left with the probe


def test_wandb_nested_sections_and_a_right_rate(clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    _stand_in(monkeypatch, "wandb.sdk.wandb_run", Run)
    run = Run()
    report = _throughput_loop(clock, lambda n, seen, dt: run.log({"perf": {"samples_per_second": seen / dt}}))
    assert report.findings == []
    assert report.card["checks"]["ACC903"] == "checked"
    assert [(r["name"], r["verdict"]) for r in report.card["logged_rates"]][1] == ("perf/samples_per_second",
                                                                                    "the whole group")


@pytest.mark.parametrize("module", ["torch.utils.tensorboard.writer", "tensorboardX.writer"])
def test_summary_writer_scalars_are_read(clock: Clock, monkeypatch: pytest.MonkeyPatch, module: str) -> None:
    _stand_in(monkeypatch, module, SummaryWriter)
    writer = SummaryWriter()
    report = _throughput_loop(clock, lambda n, seen, dt: writer.add_scalar("examples/sec", n / dt, global_step=1))
    assert [f.code for f in report.findings] == ["ACC903"]
    assert report.card["logged_rates"][1]["source"].endswith("add_scalar")
    report = _throughput_loop(clock, lambda n, seen, dt: writer.add_scalars("throughput", {"examples_per_sec": n / dt}))
    assert [f.code for f in report.findings] == ["ACC903"]
    assert report.card["logged_rates"][1]["name"] == "throughput/examples_per_sec"
    assert writer.scalars[3:] == [("throughput_examples_per_sec", 2.0)] * 3  # every call reached the writer


def test_accelerator_log_is_read_once_through_its_trackers(clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    """accelerate 1.15.0: ``Accelerator.log`` calls each tracker's ``log``; a TensorBoard tracker calls
    ``writer.add_scalar``: the figure is read at ``Accelerator.log`` and not again inside it."""
    from accelerate import Accelerator

    _stand_in(monkeypatch, "torch.utils.tensorboard.writer", SummaryWriter)
    writer = SummaryWriter()
    tracker = types.SimpleNamespace(name="tensorboard", log=lambda values, step=None: [
        writer.add_scalar(k, v, global_step=step) for k, v in values.items()])
    accelerator = Accelerator(cpu=True)
    monkeypatch.setattr(accelerator, "trackers", [tracker])
    report = _throughput_loop(clock, lambda n, seen, dt: accelerator.log({"examples_per_sec": n / dt}, step=0))
    assert [f.code for f in report.findings] == ["ACC903"]
    assert [r["source"] for r in report.card["logged_rates"]] == ["Accelerator.log"] * 2
    assert len(writer.scalars) == 3


@pytest.mark.parametrize(("module", "cls"), [("torch.utils.tensorboard.writer", SummaryWriter),
                                             ("wandb.sdk.wandb_run", Run)])
def test_a_logger_imported_after_attach_is_read_from_the_next_update(clock: Clock, monkeypatch: pytest.MonkeyPatch,
                                                                     module: str, cls: type) -> None:
    """A script that imports its logger lazily, inside the loop at its first log call (after the first group's
    update): the guard looks in ``sys.modules`` again at each update and hooks it from the next one on. The
    first call, before that update, is not read; the module is restored by monkeypatch."""
    monkeypatch.delitem(sys.modules, module, raising=False)
    made: list[Any] = []

    def log(n: int, seen: int, dt: float) -> None:
        if not made:  # ``from torch.utils.tensorboard import SummaryWriter`` at the first call
            _stand_in(monkeypatch, module, cls)
            made.append(cls())
        figures = {"examples_per_sec": n / dt}
        if isinstance(made[0], SummaryWriter):
            made[0].add_scalar("examples_per_sec", figures["examples_per_sec"])
        else:
            made[0].log(figures)

    report = _throughput_loop(clock, log)
    assert [(f.code, f.group) for f in report.findings] == [("ACC903", 1)]
    assert [r["group"] for r in report.card["logged_rates"]] == [1]
    assert report.card["logged_rates"][0]["verdict"] == "one microbatch"
    assert cls.__dict__["add_scalar" if cls is SummaryWriter else "_log"].__qualname__.startswith(cls.__name__)


def test_a_rate_logged_twice_at_one_point_is_kept_once(clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    _stand_in(monkeypatch, "wandb.sdk.wandb_run", Run)
    run = Run()

    def log(n: int, seen: int, dt: float) -> None:
        figures = {"examples_per_sec": n / dt}
        runtime_guard.log(figures)
        run.log(figures)

    report = _throughput_loop(clock, log)
    assert [f.code for f in report.findings] == ["ACC903"]
    assert [r["source"] for r in report.card["logged_rates"]] == ["runtime_guard.log"] * 2


def test_no_logger_imported_says_so_and_imports_none(clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    for logger in loggers.LOGGERS:
        monkeypatch.delitem(sys.modules, logger.module, raising=False)
    before = set(sys.modules)
    report = _throughput_loop(clock, lambda n, seen, dt: None)
    assert report.card["checks"]["ACC903"].endswith("and no logger the guard reads (wandb, TensorBoard's "
                                                    "SummaryWriter, tensorboardX, Accelerator.log) was imported "
                                                    "by the probe's last update")
    assert not {logger.module for logger in loggers.LOGGERS} & (set(sys.modules) - before)


def test_a_logger_call_the_guard_cannot_read_passes_through(clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    """wandb raises ``TypeError`` for data that is no mapping: the guard reads nothing, fails nothing, and the
    program gets wandb's own error."""

    class StrictRun(Run):
        def _log(self, data: Any, step: int | None = None, commit: bool | None = None) -> None:
            if not isinstance(data, dict):
                raise TypeError("wandb.log must be passed a dictionary")
            super()._log(data, step, commit)

    _stand_in(monkeypatch, "wandb.sdk.wandb_run", StrictRun)
    run, errors = StrictRun(), []

    def log(n: int, seen: int, dt: float) -> None:
        try:
            run.log([("examples_per_sec", n / dt)])  # type: ignore[arg-type]
        except TypeError as error:
            errors.append(str(error))

    report = _throughput_loop(clock, log)
    assert errors == ["wandb.log must be passed a dictionary"] * 3
    assert report.card["checks"]["ACC903"].startswith("not observed: no rate")
    assert not any("the probe stopped observing" in note for note in report.card["notes"])
