"""The runtime guard inside a real Lightning ``Trainer.fit`` (GuardCallback), on CPU with a tiny
classifier: the framework's own division, reset and closure-based step give no finding; a user
division on top (ACC101) and a manual-optimization reset every batch (ACC001) are reported."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pl = pytest.importorskip("lightning.pytorch", reason="lightning is not installed (pip install lightning)")

from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

import runtime_guard  # noqa: E402
from runtime_guard.integrations.lightning import GuardCallback  # noqa: E402

M = 2  # examples per microbatch


class Classifier(pl.LightningModule):
    """nn.Linear logits, mean cross entropy; ``extra_div`` divides the returned loss again."""

    def __init__(self, extra_div: int = 1, scheduler: bool = True) -> None:
        super().__init__()
        self.net = nn.Linear(8, 5)
        self.extra_div = extra_div
        self.use_scheduler = scheduler

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(self(x), y) / self.extra_div

    def configure_optimizers(self):  # noqa: ANN201
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        if not self.use_scheduler:
            return opt
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0 / (1 + step))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


class ManualClassifier(Classifier):
    """Manual optimization with A microbatches per update; ``zero_each`` resets every batch (ACC001);
    ``divide=False`` backpropagates each microbatch's mean loss undivided (ACC105)."""

    def __init__(self, a: int, zero_each: bool, step_each: bool = False, divide: bool = True) -> None:
        super().__init__(scheduler=False)
        self.automatic_optimization = False
        self.a = a
        self.zero_each = zero_each
        self.step_each = step_each
        self.divide = divide

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        opt = self.optimizers()
        x, y = batch
        if self.zero_each:
            opt.zero_grad()
        self.manual_backward(F.cross_entropy(self(x), y) / (self.a if self.divide else 1))
        if self.step_each:  # ACC004: the update outside the gate, the reset still in it
            opt.step()
        if (batch_idx + 1) % self.a == 0:
            if not self.step_each:
                opt.step()
            if not self.zero_each:
                opt.zero_grad()


def loader(batches: int) -> DataLoader:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(batches * M, 8, generator=g)
    y = torch.randint(0, 5, (batches * M,), generator=g)
    return DataLoader(TensorDataset(x, y), batch_size=M, shuffle=False)


def fit(module: pl.LightningModule, guard: GuardCallback, a: int, batches: int = 12) -> None:
    torch.manual_seed(0)
    trainer = pl.Trainer(
        accelerator="cpu", devices=1, max_epochs=1, accumulate_grad_batches=a, callbacks=[guard], logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
    )
    trainer.fit(module, loader(batches))


@pytest.mark.parametrize("a", [2, 4])
def test_correct_automatic_optimization_reports_nothing(a: int, tmp_path: Path) -> None:
    guard = GuardCallback(groups=2, json_path=tmp_path / "card.json")
    fit(Classifier(), guard, a)
    report = guard.report
    assert report is not None and not guard.probe.attached
    assert report.findings == [], [f.one_line() for f in report.findings]
    card = report.card
    assert (card["A"], card["m"], card["group_sizes"]) == (a, M, [a, a])
    assert card["A_source"].startswith("trainer.accumulate_grad_batches")
    assert card["updates"]["attempted"] == 2 and card["updates"]["applied"] == 2
    assert card["scheduler_steps_per_update"] == 1
    # Lightning's own division by A: the per-token weights of each group sum to 1
    assert card["normalization"] == "token-weighted mean over the group"
    assert card["normalization_weight_sums"] == pytest.approx([1.0, 1.0], rel=1e-4)
    # the reset runs after the first batch's forward; the last batch runs inside optimizer.step(closure)
    assert card["groups"][0]["trace"].split() == ["F", "Z", "B"] + ["F", "B"] * (a - 1) + ["S", "L"]
    assert card["framework"]["name"] == "lightning" and card["framework"]["automatic_optimization"] is True
    saved = json.loads((tmp_path / "card.json").read_text())
    assert saved["card"]["A"] == a and saved["findings"] == []


def test_loss_divided_by_a_again_is_acc101() -> None:
    guard = GuardCallback(groups=2)
    fit(Classifier(extra_div=2), guard, 2)
    assert guard.report is not None
    assert guard.report.codes == {"ACC101"}, [f.one_line() for f in guard.report.findings]


def test_manual_optimization_zero_grad_every_batch_is_acc001() -> None:
    guard = GuardCallback(groups=2, accumulation_steps=2)
    fit(ManualClassifier(a=2, zero_each=True), guard, 1)
    report = guard.report
    assert report is not None and report.codes == {"ACC001"}, [f.one_line() for f in report.findings]
    finding = report.findings[0]
    assert "optimizer.zero_grad()" in finding.observed  # seen by name through the LightningOptimizer
    assert report.card["A_source"] == "given to GuardCallback"


def test_manual_optimization_correct_reports_nothing() -> None:
    guard = GuardCallback(groups=2, accumulation_steps=2)
    fit(ManualClassifier(a=2, zero_each=False), guard, 1)
    report = guard.report
    assert report is not None and report.findings == [], [f.one_line() for f in report.findings]
    assert report.card["group_sizes"] == [2, 2] and report.card["updates"]["applied"] == 2


def test_manual_optimization_without_division_is_acc105() -> None:
    """Field trial (Lightning's basics/transformer.py in manual optimization): ``manual_backward`` leaves the
    division by A to the user (ACC105, the framework's contract), not the plain-loop ACC103."""
    guard = GuardCallback(groups=2, accumulation_steps=2)
    fit(ManualClassifier(a=2, zero_each=False, divide=False), guard, 1)
    report = guard.report
    assert report is not None and report.codes == {"ACC105"}, [f.one_line() for f in report.findings]
    assert "manual_backward does not divide" in report.findings[0].observed


def test_manual_optimization_step_every_batch_without_a_is_acc004() -> None:
    """Issue 17: A not given in manual optimization, an update every batch and a reset every A = 4
    batches: the reset cadence gives A (not 1), so this is ACC004, not ACC002."""
    guard = GuardCallback(groups=2)
    fit(ManualClassifier(a=4, zero_each=False, step_each=True), guard, 1, batches=12)
    report = guard.report
    assert report is not None and report.codes == {"ACC004"}, [f.one_line() for f in report.findings]
    assert report.card["A"] == 4
    assert report.card["A_source"].startswith("inferred from the gradient resets: one every 4 updates")


class CallsNetDirectly(Classifier):
    """``training_step`` forwards ``self.net``, never ``self(...)`` (the Lightning demo Transformer's shape)."""

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        self.optimizers().zero_grad()  # ACC001, unseen when the probe watches the wrong module
        return F.cross_entropy(self.net(x), y)


def test_callback_on_a_module_the_loop_does_not_forward_says_so(tmp_path: Path) -> None:
    """Issue 17: a callback given a module that training_step never forwards saw no training event:
    it says so in a warning (whatever on_finding says) and on the card, instead of an empty report;
    given the right module it sees the bug."""
    guard = GuardCallback(groups=2, json_path=tmp_path / "card.json")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit(CallsNetDirectly(), guard, 2)
    report = guard.report
    assert report is not None and report.findings == []
    setup = [str(w.message) for w in caught if isinstance(w.message, runtime_guard.report.GuardSetupWarning)]
    assert len(setup) == 1, setup
    assert setup[0].startswith("runtime_guard (lightning): no training events on the objects it was given: no "
                               "grad-enabled forward of CallsNetDirectly was seen; meanwhile SGD made 6 update "
                               "attempt(s) and ")
    assert "pass GuardCallback(module='<attribute of the LightningModule>')" in setup[0]
    assert report.card["no_training_events"] == setup[0]
    assert json.loads((tmp_path / "card.json").read_text())["card"]["no_training_events"] == setup[0]
    right = GuardCallback(groups=2, module="net")
    fit(CallsNetDirectly(), right, 2)
    assert right.report is not None and right.report.codes == {"ACC001"}
    assert "no_training_events" not in right.report.card


def test_on_finding_raise_and_warn() -> None:
    with pytest.raises(runtime_guard.GuardFindingError) as info:
        fit(Classifier(extra_div=2), GuardCallback(groups=1, on_finding="raise"), 2)
    assert info.value.report.codes == {"ACC101"}
    guard = GuardCallback(groups=1, on_finding="warn")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit(Classifier(extra_div=2), guard, 2)
    assert any(isinstance(w.message, runtime_guard.GuardWarning) and "ACC101" in str(w.message) for w in caught)


def test_short_fit_detaches_at_train_end() -> None:
    guard = GuardCallback(groups=4)
    fit(Classifier(), guard, 2, batches=4)  # 2 groups only: the probe is detached by on_train_end
    report = guard.report
    assert report is not None and not guard.probe.attached
    assert report.card["group_sizes"] == [2, 2] and report.findings == []


class EpochScheduled(Classifier):
    """A scheduler with Lightning's default ``interval="epoch"``; ``by_hand`` also steps it in
    ``training_step`` (ACC306: Lightning steps it at every epoch's end as well)."""

    def __init__(self, by_hand: bool) -> None:
        super().__init__()
        self.by_hand = by_hand

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        if self.by_hand:
            self.lr_schedulers().step()
        return super().training_step(batch, batch_idx)

    def configure_optimizers(self):  # noqa: ANN201
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)}


@pytest.mark.parametrize("batches", [12, 4])  # 4: the probed groups reach the epoch end, where Lightning steps it
def test_epoch_interval_scheduler_stepped_by_hand_is_acc306(batches: int) -> None:
    """Issue 17 item 3: the default interval="epoch" scheduler is followed too."""
    guard = GuardCallback(groups=2)
    fit(EpochScheduled(by_hand=True), guard, 2, batches=batches)
    report = guard.report
    assert report is not None and report.codes == {"ACC306"}, [f.one_line() for f in report.findings]
    assert "once per epoch" in report.findings[0].observed
    clean = GuardCallback(groups=2)
    fit(EpochScheduled(by_hand=False), clean, 2, batches=batches)
    assert clean.report is not None and clean.report.findings == [], [f.one_line() for f in clean.report.findings]
    assert clean.report.card["checks"]["ACC306"] == "checked"
