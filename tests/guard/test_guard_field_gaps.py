"""The shapes the second field trial of the runtime guard missed (issue 17): losses on
log-probabilities and with class weights, model outputs that are dicts without ``"logits"``,
scripts run as modules, a learning rate written into ``param_groups`` every microbatch, Lightning
manual optimization stepping every microbatch, and a callback given the wrong module."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

import runtime_guard  # noqa: E402

A = 4
CLASS_WEIGHTS = [1.0, 2.0, 0.5, 3.0, 1.5]


class Classifier(torch.nn.Module):
    """``[m, 8] -> [m, 5]``: logits, or log-probabilities when ``log_probs`` (torchvision / Lightning demo style)."""

    def __init__(self, log_probs: bool = False) -> None:
        super().__init__()
        self.head = torch.nn.Linear(8, 5)
        self.log_probs = log_probs

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.head(x)
        return F.log_softmax(z, dim=-1) if self.log_probs else z


class DictTask(torch.nn.Module):
    """Computes its loss in the forward and returns ``{"loss", "output"}`` (no ``"logits"`` key)."""

    def __init__(self) -> None:
        super().__init__()
        self.head = torch.nn.Linear(8, 5)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
        out = self.head(x)
        return {"loss": F.cross_entropy(out, y), "output": out}


def _classifier_loop(loss: str, divisor: float, class_weights: bool = False) -> runtime_guard.Report:
    """Three groups of A microbatches of 6 examples (one labelled ignore_index), the microbatch
    loss divided by ``divisor`` (A is right)."""
    torch.manual_seed(0)
    model = DictTask() if loss == "dict" else Classifier(log_probs=loss == "nll")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    weight = torch.tensor(CLASS_WEIGHTS) if class_weights else None
    with runtime_guard.probe(model, optimizer, accumulation_steps=A) as p:
        for i in range(3 * A):
            x, y = torch.randn(6, 8), torch.randint(0, 5, (6,))
            y[0] = -100
            if loss == "dict":
                value = model(x, y)["loss"]
            elif loss == "nll":
                value = F.nll_loss(model(x), y, weight=weight)
            else:
                value = F.cross_entropy(model(x), y, weight=weight)
            (value / divisor).backward()
            if (i + 1) % A == 0:
                optimizer.step()
                optimizer.zero_grad()
    return p.report()


@pytest.mark.parametrize("loss", ["nll", "ce", "dict"])
@pytest.mark.parametrize(("divisor", "codes", "total"), [(A, set(), 1.0), (A * A, {"ACC101"}, 1 / A),
                                                         (1, {"ACC103"}, A)])
def test_loss_weights_of_nll_and_dict_outputs(loss: str, divisor: float, codes: set[str], total: float) -> None:
    report = _classifier_loop(loss, divisor)
    assert report.codes == codes, [f.one_line() for f in report.findings]
    assert report.card["normalization_weight_sums"] == pytest.approx([total, total], rel=1e-5)
    assert report.card["supervised_tokens_per_group"]["local"] == [5 * A, 5 * A]  # ignore_index rows left out


@pytest.mark.parametrize("loss", ["nll", "ce"])
@pytest.mark.parametrize(("divisor", "codes", "total"), [(A, set(), 1.0), (A * A, {"ACC101"}, 1 / A),
                                                         (1, {"ACC103"}, A)])
def test_class_weights_are_summed_exactly(loss: str, divisor: float, codes: set[str], total: float) -> None:
    """With ``weight=`` each microbatch's weights sum to 1 but vary with the target class: the
    guard sums them over every row instead of giving up on the spread."""
    report = _classifier_loop(loss, divisor, class_weights=True)
    assert report.codes == codes, [f.one_line() for f in report.findings]
    assert report.card["normalization"].startswith("class-weighted mean")
    assert report.card["normalization_weight_sums"] == pytest.approx([total, total], rel=1e-5)


def test_dict_with_two_candidate_tensors_is_not_guessed() -> None:
    from runtime_guard.ce_weights import logits_of

    a, b = torch.randn(2, 5, requires_grad=True), torch.randn(2, 3, requires_grad=True)
    assert logits_of({"output": a, "loss": a.sum()}) is a
    assert logits_of({"head_a": a, "head_b": b}) is None
    assert logits_of({"logits": b, "output": a}) is b


MODULE_SCRIPT = """
import sys
import torch
torch.manual_seed(0)
print("module argv", sys.argv[1:])
model = torch.nn.Linear(8, 5)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for i in range(12):
    x, y = torch.randn(2, 8), torch.randint(0, 5, (2,))
    (torch.nn.functional.cross_entropy(model(x), y) / 4 / 4).backward()
    if (i + 1) % 4 == 0:
        optimizer.step()
        optimizer.zero_grad()
"""


def test_run_a_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """``run -m pkg.train ARGS``: the module runs as ``python -m`` would run it, every argument after
    its name is its own (also ``--options``), and a missing module is a one-line error."""
    from runtime_guard.__main__ import main

    (tmp_path / "trainpkg").mkdir()
    (tmp_path / "trainpkg" / "__init__.py").write_text("")
    (tmp_path / "trainpkg" / "train.py").write_text(textwrap.dedent(MODULE_SCRIPT))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    card = tmp_path / "card.json"
    assert main(["run", "-A", "4", "--json", str(card), "-m", "trainpkg.train", "--lr", "3", "-A", "9"]) == 1
    out = capsys.readouterr().out
    assert "module argv ['--lr', '3', '-A', '9']" in out
    assert "ACC101" in out
    assert card.is_file()
    assert main(["run", "-m", "trainpkg.missing"]) == 2
    assert capsys.readouterr().err.strip() == "error: no module named 'trainpkg.missing'"


def _hand_written_lr(per: str, **options) -> runtime_guard.Report:
    """A schedule written into param_groups by hand (no scheduler object, as timm's ``step_update``
    does), from a count of microbatches (``per="microbatch"``) or of updates (``per="update"``)."""
    torch.manual_seed(0)
    model = Classifier()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    updates = 0

    def set_lr(count: int) -> None:
        for group in optimizer.param_groups:
            group["lr"] = 0.1 * 0.9 ** count

    with runtime_guard.probe(model, optimizer, accumulation_steps=A, **options) as p:
        for i in range(3 * A):
            x, y = torch.randn(6, 8), torch.randint(0, 5, (6,))
            (F.cross_entropy(model(x), y) / A).backward()
            if per == "microbatch":
                set_lr(i + 1)
            if (i + 1) % A == 0:
                optimizer.step()
                optimizer.zero_grad()
                updates += 1
                if per == "update":
                    set_lr(updates)
    return p.report()


def test_learning_rate_written_every_microbatch_is_acc304() -> None:
    report = _hand_written_lr("microbatch")
    assert report.codes == {"ACC304"}, [f.one_line() for f in report.findings]
    finding = report.findings[0]
    assert finding.observed.startswith("the learning rate in optimizer.param_groups changed between every two "
                                       "microbatches of 2 of 2 probed group(s) (group 0: 0.1 -> 0.09 -> "
                                       "0.081 -> 0.0729) with no optimizer update attempt")
    assert report.card["checks"]["ACC304"] == "checked"


def test_learning_rate_written_once_per_update_is_clean() -> None:
    report = _hand_written_lr("update")
    assert report.codes == set(), [f.one_line() for f in report.findings]
    assert report.card["checks"]["ACC304"] == "checked"


def test_learning_rate_counted_in_microbatches_by_design() -> None:
    """litgpt style (horizon and warmup in microbatches): declared, the per-microbatch changes are
    no finding, and the card says ACC304 could not be judged from them."""
    report = _hand_written_lr("microbatch", lr_in_microbatches=True)
    assert report.codes == set()
    assert report.card["checks"]["ACC304"].startswith("not observable: no LR scheduler was given")


def _update_every_microbatch(reset_every: int | None, microbatches: int = 40) -> runtime_guard.Report:
    """A not given; an update after every microbatch; a reset every ``reset_every`` updates (``None``: never)."""
    torch.manual_seed(0)
    model = Classifier()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with runtime_guard.probe(model, optimizer) as p:
        for i in range(microbatches):
            x, y = torch.randn(6, 8), torch.randint(0, 5, (6,))
            (F.cross_entropy(model(x), y) / A).backward()
            optimizer.step()
            if reset_every is not None and (i + 1) % reset_every == 0:
                optimizer.zero_grad()
    return p.report()


@pytest.mark.parametrize(("reset_every", "codes", "a"), [(4, {"ACC004"}, 4), (3, {"ACC004"}, 3), (1, set(), 1),
                                                          (None, {"ACC002"}, 1)])
def test_a_from_the_reset_cadence(reset_every: int | None, codes: set[str], a: int) -> None:
    """Resets every k updates while every update follows one microbatch: the loop meant A = k
    (ACC004). A reset after every update is a correct A = 1 loop; no reset at all is A = 1 without
    a reset (ACC002), judged after up to 32 groups."""
    report = _update_every_microbatch(reset_every)
    assert report.codes == codes, [f.one_line() for f in report.findings]
    assert report.card["A"] == a
    if reset_every is None:
        assert report.card["counts"]["microbatches"] == 33  # followed 32 groups looking for resets
    elif reset_every == 1:
        assert report.card["counts"]["microbatches"] == 3  # the first reset came right after the first update


def test_learning_rate_schedule_ending_early_is_still_acc304() -> None:
    """A per-update schedule fed a microbatch count reaches its end A times too early and then stays
    constant (timm's cosine after t_initial): one group showing the per-microbatch changes is enough."""
    torch.manual_seed(0)
    model = Classifier()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with runtime_guard.probe(model, optimizer, accumulation_steps=A) as p:
        for i in range(3 * A):
            x, y = torch.randn(6, 8), torch.randint(0, 5, (6,))
            (F.cross_entropy(model(x), y) / A).backward()
            for group in optimizer.param_groups:  # horizon of 3 updates, counted in microbatches
                group["lr"] = 0.1 * max(0.0, 1 - (i + 1) / 3) + 0.001
            if (i + 1) % A == 0:
                optimizer.step()
                optimizer.zero_grad()
    report = p.report()
    assert report.codes == {"ACC304"}, [f.one_line() for f in report.findings]
    assert "microbatches of 1 of 2 probed group(s)" in report.findings[0].observed
    assert "; constant in the others)" in report.findings[0].observed


def test_learning_rate_changed_at_some_gaps_only_is_left_alone() -> None:
    """Written once inside each group (a boundary offset by one microbatch): no per-microbatch schedule."""
    torch.manual_seed(0)
    model = Classifier()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with runtime_guard.probe(model, optimizer, accumulation_steps=A) as p:
        for i in range(3 * A):
            x, y = torch.randn(6, 8), torch.randint(0, 5, (6,))
            (F.cross_entropy(model(x), y) / A).backward()
            if i % A == 0:
                for group in optimizer.param_groups:
                    group["lr"] = 0.1 * 0.9 ** (i // A + 1)
            if (i + 1) % A == 0:
                optimizer.step()
                optimizer.zero_grad()
    assert p.report().codes == set()
