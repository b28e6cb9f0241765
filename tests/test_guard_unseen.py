"""Shapes the runtime guard did not see before issue 35 (items 7-8): a model that returns its own
loss, probed through its inner network (``run --submodule``); the loss weights of mean-reduced losses
other than cross entropy on the model's logits (MSE, a contrastive cross entropy over a similarity
matrix); a weight EMA advanced every microbatch (ACC007)."""

from __future__ import annotations

import contextlib
import io
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")


A = 4

# -- item 7: a model that returns its own loss ------------------------------------------------------

LOSS_MODEL = """
import torch
import torch.nn.functional as F

A = 4
LENGTHS = [12, 11, 4, 11]  # supervised tokens per microbatch (the rest is padding, label -100)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(20, 16)
        self.head = torch.nn.Linear(16, 20)

    def forward(self, ids):
        return self.head(self.embed(ids))


class WithLoss(torch.nn.Module):
    # computes its loss in the forward and returns only the loss: the logits never leave it
    def __init__(self):
        super().__init__()
        self.net = Net()

    def forward(self, ids, labels):
        logits = self.net(ids)
        return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="{reduction}")


torch.manual_seed(0)
model = WithLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for i in range(3 * A):
    ids = torch.randint(0, 20, (1, 12))
    labels = ids.clone()
    labels[0, LENGTHS[i % A]:] = -100
    loss = model(ids, labels) / {divisor}
    loss.backward()
    if (i + 1) % A == 0:
        optimizer.step()
        optimizer.zero_grad()
"""


def _run(tmp_path: Path, script: str, *options: str) -> tuple[int, dict]:
    """``python -m runtime_guard run -A 4 OPTIONS SCRIPT``: its exit status and the report's JSON."""
    import json

    from runtime_guard.__main__ import main

    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent(script))
    out = tmp_path / "report.json"
    with contextlib.redirect_stdout(io.StringIO()):
        status = main(["run", "-A", str(A), "--json", str(out), *options, str(path)])
    return status, json.loads(out.read_text())


def _codes(report: dict) -> set[str]:
    return {f["code"] for f in report["findings"]}


@pytest.mark.parametrize(("reduction", "divisor", "codes"), [
    ("mean", "A", {"ACC102"}),  # a mean of microbatch means over 12, 11, 4, 11 tokens
    ("sum", "sum(LENGTHS)", set()),  # the group's token sum over its supervised tokens
])
def test_submodule_shows_the_loss_weights_a_model_hides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        reduction: str, divisor: str, codes: set[str]) -> None:
    """The zero-code mode probes the model it finds, here a wrapper whose forward returns a scalar
    loss: no logits, so the per-token weights are not inferred. ``--submodule net`` probes the inner
    network, whose logits show that each microbatch's mean is weighted 1/A whatever its tokens."""
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    script = LOSS_MODEL.format(reduction=reduction, divisor=divisor)
    status, report = _run(tmp_path, script, "--submodule", "net")
    assert _codes(report) == codes, report["findings"]
    assert status == (1 if codes else 0)
    card = report["card"]
    assert card["model"] == "Net" and card["group_sizes"] == [A, A]
    assert card["supervised_tokens_per_group"]["local"] == [38, 38]
    _, whole = _run(tmp_path, script)  # the wrapper: its loss weights per token stay hidden
    assert "ACC102" not in _codes(whole) and whole["card"]["model"] == "WithLoss"


def test_unknown_submodule_probes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture) -> None:
    from runtime_guard.__main__ import main

    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent(LOSS_MODEL.format(reduction="mean", divisor="A")))
    assert main(["run", "-A", str(A), "--submodule", "backbone", str(path)]) == 2
    assert "WithLoss, the model found at the first forward, has no submodule 'backbone'" in capsys.readouterr().err
