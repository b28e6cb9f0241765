"""The runtime guard inside a real HF ``Trainer.train`` (GuardCallback), on CPU with a tiny GPT-2
(2 layers, n_embd 16, random tokens, nothing downloaded): the Trainer's own normalization by
``num_items_in_batch`` (or by the group's microbatch count) gives no finding; a ``compute_loss``
override dividing by A again is ACC101, one returning a per-microbatch mean that the Trainer
takes as already scaled is ACC103."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers", reason="transformers is not installed (pip install transformers)")
pytest.importorskip("accelerate", reason="transformers' Trainer needs accelerate")

from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import runtime_guard  # noqa: E402
from runtime_guard.integrations.transformers import GuardCallback  # noqa: E402
from tests.shared_data import REPO  # noqa: E402

M, T, V = 2, 12, 64  # examples per microbatch, tokens per example, vocabulary


class TokenData(torch.utils.data.Dataset):
    """Random tokens; a varying number (1 to T/2 - 1) of leading labels set to -100, so token counts differ;
    ``least=0``: every label supervised."""

    def __init__(self, n: int, least: int = 1) -> None:
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, V, (n, T), generator=g)
        self.masked = torch.randint(1, T // 2, (n,), generator=g) if least else torch.zeros(n, dtype=torch.long)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        labels = self.ids[i].clone()
        labels[: int(self.masked[i])] = -100
        return {"input_ids": self.ids[i], "labels": labels}


def tiny_gpt2() -> nn.Module:
    config = transformers.GPT2Config(n_layer=2, n_embd=16, n_head=2, vocab_size=V, n_positions=32,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(config)


class DivideAgain(transformers.Trainer):
    """Bug: divides the (already group-normalized) loss by A once more."""

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):  # noqa: ANN001, ANN201
        loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        return loss / self.args.gradient_accumulation_steps


class MeanPerMicrobatch(transformers.Trainer):
    """Bug: returns the model's per-microbatch mean, ignoring num_items_in_batch, while the model takes
    loss kwargs: the Trainer believes the loss is scaled for accumulation and does not divide."""

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):  # noqa: ANN001, ANN201
        logits = model(input_ids=inputs["input_ids"]).logits
        labels = inputs["labels"]
        return F.cross_entropy(logits[:, :-1].reshape(-1, V), labels[:, 1:].reshape(-1), ignore_index=-100)


def train(tmp_path: Path, guard: GuardCallback, a: int, trainer_class: type = transformers.Trainer,
          max_steps: int = 4, least_masked: int = 1) -> transformers.Trainer:
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=M, gradient_accumulation_steps=a,
        max_steps=max_steps, learning_rate=1e-3, lr_scheduler_type="linear", warmup_steps=1, save_strategy="no",
        report_to=[], use_cpu=True, disable_tqdm=True, logging_strategy="no", dataloader_num_workers=0, seed=0,
    )
    trainer = trainer_class(model=tiny_gpt2(), args=args, train_dataset=TokenData(M * a * max_steps, least_masked),
                            callbacks=[guard])
    trainer.train()
    return trainer


@pytest.mark.parametrize("a", [2, 4])
def test_correct_trainer_reports_nothing(a: int, tmp_path: Path) -> None:
    guard = GuardCallback(groups=2, json_path=tmp_path / "card.json")
    train(tmp_path, guard, a)
    report = guard.report
    assert report is not None and not guard.probe.attached
    assert report.findings == [], [f.one_line() for f in report.findings]
    card = report.card
    assert (card["A"], card["m"], card["group_sizes"]) == (a, M, [a, a])
    assert card["A_source"].startswith("TrainingArguments.gradient_accumulation_steps")
    assert card["updates"]["attempted"] == 2 and card["updates"]["applied"] == 2
    assert card["scheduler_steps_per_update"] == 1
    # the Trainer normalizes by the group's supervised tokens: uniform per-token weights summing to 1
    assert card["normalization"] == "token-weighted mean over the group"
    assert card["normalization_weight_sums"] == pytest.approx([1.0, 1.0], rel=1e-4)
    assert card["framework"]["model_accepts_loss_kwargs"] is True
    trace = card["groups"][0]["trace"].split()
    assert trace == ["F", "B"] * a + ["C", "S", "L", "Z"]  # clip, step, scheduler, model.zero_grad()
    assert json.loads((tmp_path / "card.json").read_text())["card"]["A"] == a


class NoLossKwargsLM(nn.Module):
    """A causal LM whose forward takes no ``**kwargs``: the Trainer passes no ``num_items_in_batch``."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = tiny_gpt2()

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None) -> object:
        return self.inner(input_ids=input_ids, labels=labels)


def test_model_without_loss_kwargs_divided_by_microbatches(tmp_path: Path) -> None:
    guard = GuardCallback(groups=2)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=M, gradient_accumulation_steps=2, max_steps=4,
        learning_rate=1e-3, save_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True,
        logging_strategy="no", seed=0)
    transformers.Trainer(model=NoLossKwargsLM(), args=args, train_dataset=TokenData(16), callbacks=[guard]).train()
    report = guard.report
    assert report is not None and report.card["framework"]["model_accepts_loss_kwargs"] is False
    # the Trainer divides each microbatch mean by the group's 2 microbatches: weights sum to 1 (no ACC101 or
    # ACC103); with unequal token counts that is a mean of microbatch means, which is what ACC102 reports
    assert report.codes <= {"ACC102"}, [f.one_line() for f in report.findings]
    assert report.card["normalization_weight_sums"] == pytest.approx([1.0, 1.0], rel=1e-4)
    assert "mean of microbatch means" in report.card["normalization"]


def test_gpt2_position_zero_labels_inflate_num_items(tmp_path: Path) -> None:
    """transformers 5.24.0: GPT2LMHeadModel's ``loss_type`` is None (its class name matches no LOSS_MAPPING
    key), so the Trainer counts ``num_items_in_batch`` over all labels, while the default ForCausalLMLoss
    shifts them: a supervised position-0 label is counted but never predicted. With every label supervised,
    each group's per-token weights sum to (T - 1) / T; the guard reports no code for it (neither 1/A nor A)
    and shows the sum and a note on the card."""
    guard = GuardCallback(groups=2)
    train(tmp_path, guard, 2, least_masked=0)
    report = guard.report
    assert report is not None and report.findings == []
    assert report.card["normalization_weight_sums"] == pytest.approx([(T - 1) / T] * 2, rel=1e-4)
    assert any("position-0" in note for note in report.card["notes"])


def test_compute_loss_dividing_by_a_again_is_acc101(tmp_path: Path) -> None:
    guard = GuardCallback(groups=2)
    train(tmp_path, guard, 2, DivideAgain)
    assert guard.report is not None
    assert guard.report.codes == {"ACC101"}, [f.one_line() for f in guard.report.findings]


def test_compute_loss_mean_taken_as_scaled_is_acc105(tmp_path: Path) -> None:
    guard = GuardCallback(groups=2)
    train(tmp_path, guard, 2, MeanPerMicrobatch)
    assert guard.report is not None
    assert "ACC105" in guard.report.codes, [f.one_line() for f in guard.report.findings]


def test_on_finding_raise(tmp_path: Path) -> None:
    with pytest.raises(runtime_guard.GuardFindingError) as info:
        train(tmp_path, GuardCallback(groups=1, on_finding="raise"), 2, DivideAgain)
    assert info.value.report.codes == {"ACC101"}


def test_importing_the_adapters_package_imports_no_framework() -> None:
    import subprocess
    import sys

    code = ("import sys, runtime_guard, runtime_guard.integrations; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('lightning', 'pytorch_lightning', "
            "'transformers')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=REPO)
    assert out.stdout.strip() == "[]"
