"""Shapes the runtime guard did not see before issue 35 (items 7-8): a model that returns its own
loss, probed through its inner network (``run --submodule``); the loss weights of mean-reduced losses
other than cross entropy on the model's logits (MSE, a contrastive cross entropy over a similarity
matrix); a weight EMA advanced every microbatch (ACC007); a scheduler stepped once per update with the
microbatch index and a per-microbatch learning rate whose decay starts inside a group (ACC304)."""

from __future__ import annotations

import contextlib
import io
import textwrap
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

import runtime_guard  # noqa: E402

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


# -- item 8b: the normalization of mean-reduced losses other than cross entropy on logits ----------

class Encoder(torch.nn.Module):
    """``[m, 8] -> [m, 4]``: a regression output, or embeddings for a contrastive loss."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


def _contrastive(z: torch.Tensor) -> torch.Tensor:
    """InfoNCE over a microbatch of two views: cross entropy over the similarity matrix (mean-reduced)."""
    a, b = F.normalize(z[0::2], dim=1), F.normalize(z[1::2], dim=1)
    return F.cross_entropy(a @ b.T / 0.1, torch.arange(a.shape[0]))


def _loop(loss: str, divisor: float) -> runtime_guard.Report:
    """Two groups of A microbatches of 6 examples, each microbatch's mean loss divided by ``divisor``."""
    torch.manual_seed(0)
    model = Encoder()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with runtime_guard.probe(model, optimizer, accumulation_steps=A) as p:
        for i in range(2 * A):
            x = torch.randn(6, 8)
            value = F.mse_loss(model(x), torch.randn(6, 4)) if loss == "mse" else _contrastive(model(x))
            (value / divisor).backward()
            if (i + 1) % A == 0:
                optimizer.step()
                optimizer.zero_grad()
    return p.report()


@pytest.mark.parametrize("loss", ["mse", "contrastive"])
@pytest.mark.parametrize(("divisor", "codes", "total"), [(A, set(), 1.0), (A * A, {"ACC101"}, 1 / A),
                                                         (1, {"ACC103"}, A)])
def test_mean_reduced_losses_are_judged_by_their_factors(loss: str, divisor: float, codes: set[str],
                                                         total: float) -> None:
    """No softmax cross entropy on the output (a regression, embeddings): the factor on each
    microbatch's mean loss, read at its backward node, sums to 1 over a group divided by A once."""
    report = _loop(loss, divisor)
    assert report.codes == codes, [f.one_line() for f in report.findings]
    assert report.card["normalization_weight_sums"] == pytest.approx([total, total], rel=1e-5)
    assert report.card["checks"]["ACC101"] == "checked"
    assert report.card["checks"]["ACC102"].startswith("not observable: normalization inferred from the factors")


def test_several_losses_backpropagated_apart_are_not_judged() -> None:
    """Two mean losses per microbatch, each backpropagated on its own: not one group mean, no verdict."""
    torch.manual_seed(0)
    model = Encoder()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with runtime_guard.probe(model, optimizer, accumulation_steps=2) as p:
        for i in range(4):
            z = model(torch.randn(6, 8))
            (F.mse_loss(z, torch.randn(6, 4)) / 2).backward(retain_graph=True)
            (z.abs().mean() / 2).backward()
            if (i + 1) % 2 == 0:
                optimizer.step()
                optimizer.zero_grad()
    report = p.report()
    assert report.codes == set()
    assert report.card["checks"]["ACC103"] == "not observable: normalization not inferred"


# -- item 8a: a weight EMA advanced every microbatch (ACC007) ---------------------------------------

DECAY = 0.9


def _ema_loop(kind: str, where: str) -> runtime_guard.Report:
    """Three groups of A microbatches on a small MLP with a copy of its parameters made before the probe
    attaches and written ``where`` ("microbatch": after every backward, "update": once after the
    optimizer update, "before_update": once, just before it). ``kind``: a hand-written EMA over a
    deepcopy (``mul_``/``add_``), ``AveragedModel`` with an EMA function, a list of shadow tensors
    updated with ``torch._foreach_lerp_`` through ``.data`` (diffusers style); and writes that are no
    average: a backup ``copy_`` of the weights, a list of buffers accumulating the gradients."""
    import copy

    from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    params = list(model.parameters())
    if kind == "averaged_model":
        shadow = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(DECAY))
    elif kind == "module":
        shadow = copy.deepcopy(model)
    else:
        shadow = [torch.zeros_like(p) if kind == "grad_buffers" else p.detach().clone() for p in params]

    def write() -> None:
        with torch.no_grad():
            if kind == "averaged_model":
                shadow.update_parameters(model)
            elif kind == "module":
                for s, p in zip(shadow.parameters(), params, strict=True):
                    s.mul_(DECAY).add_(p, alpha=1 - DECAY)
            elif kind == "lerp_list":
                torch._foreach_lerp_([s.data for s in shadow], [p.data for p in params], 1 - DECAY)
            elif kind == "backup":
                for s, p in zip(shadow, params, strict=True):
                    s.copy_(p)
            else:  # grad_buffers
                for s, p in zip(shadow, params, strict=True):
                    s.add_(p.grad)

    with runtime_guard.probe(model, optimizer, accumulation_steps=A) as p:
        for i in range(3 * A):
            x = torch.randn(6, 8)
            (F.cross_entropy(model(x), torch.randint(0, 3, (6,))) / A).backward()
            if where == "microbatch":
                write()
            if (i + 1) % A == 0:
                if where == "before_update":
                    write()
                optimizer.step()
                optimizer.zero_grad()
                if where == "update":
                    write()
    return p.report()


@pytest.mark.parametrize("kind", ["module", "averaged_model", "lerp_list"])
def test_weight_ema_every_microbatch_is_acc007(kind: str) -> None:
    report = _ema_loop(kind, "microbatch")
    assert report.codes == {"ACC007"}, [f.one_line() for f in report.findings]
    found = report.findings[0]
    assert f"averaged toward them {A}x inside group 1" in found.observed
    assert f"{DECAY:.4g}" in found.observed
    assert report.card["checks"]["ACC007"] == "checked"


@pytest.mark.parametrize("kind", ["module", "averaged_model", "lerp_list"])
@pytest.mark.parametrize("where", ["update", "before_update"])
def test_weight_ema_once_per_update_is_clean(kind: str, where: str) -> None:
    report = _ema_loop(kind, where)
    assert report.codes == set(), [f.one_line() for f in report.findings]
    assert report.card["checks"]["ACC007"] == "checked"


@pytest.mark.parametrize("kind", ["backup", "grad_buffers"])
def test_other_writes_to_parameter_shaped_tensors_are_no_average(kind: str) -> None:
    """A backup copied from the weights every microbatch (factor 0) and buffers summing the gradients
    (no common factor toward the weights) are written inside every group: not ACC007."""
    assert _ema_loop(kind, "microbatch").codes == set()


def test_without_a_weight_copy_acc007_is_not_observable() -> None:
    report = _loop("mse", A)
    assert report.card["checks"]["ACC007"].startswith("not observable: no copy of the model's parameters")


# -- item 8: a scheduler stepped once per update but given a count of microbatches --------------------


def _indexed_scheduler_loop(position: str, **options) -> runtime_guard.Report:
    """Three groups of A microbatches; a LambdaLR (a per-update decay) stepped once per update, with no
    argument (``"none"``), with the update count (``"updates"``) or with the loop's microbatch count
    (``"microbatches"``: ``sched.step(i + 1)``, a schedule A times too fast)."""
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 5)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: 0.9 ** k)
    updates = 0
    with runtime_guard.probe(model, optimizer, scheduler=scheduler, accumulation_steps=A, groups=3, **options) as p:
        for i in range(4 * A):
            x, y = torch.randn(6, 8), torch.randint(0, 5, (6,))
            (F.cross_entropy(model(x), y) / A).backward()
            if (i + 1) % A == 0:
                optimizer.step()
                optimizer.zero_grad()
                updates += 1
                with warnings.catch_warnings():  # torch deprecates the index argument (EPOCH_DEPRECATION_WARNING)
                    warnings.simplefilter("ignore", UserWarning)
                    if position == "microbatches":
                        scheduler.step(i + 1)
                    elif position == "updates":
                        scheduler.step(updates)
                    else:
                        scheduler.step()
    return p.report()


def test_scheduler_given_the_microbatch_index_is_acc304() -> None:
    report = _indexed_scheduler_loop("microbatches")
    assert report.codes == {"ACC304"}, [f.one_line() for f in report.findings]
    finding = report.findings[0]
    assert (finding.group, finding.microbatch) == (1, None)
    assert finding.observed.startswith("the LR scheduler was stepped once per update, but its position (last_epoch) "
                                       "moved by 4 at each update, the group's microbatch count (4 -> 8 -> 12 over "
                                       "groups 0-2)")
    assert report.card["checks"]["ACC304"] == "checked"


@pytest.mark.parametrize("position", ["none", "updates"])
def test_scheduler_stepped_once_per_update_is_clean(position: str) -> None:
    report = _indexed_scheduler_loop(position)
    assert report.codes == set(), [f.one_line() for f in report.findings]


def test_scheduler_indexed_in_microbatches_by_design() -> None:
    assert _indexed_scheduler_loop("microbatches", lr_in_microbatches=True).codes == set()


def _delayed_decay_loop() -> runtime_guard.Report:
    """A learning rate written into param_groups after every microbatch from the microbatch count: constant
    for the first 6 microbatches, then a decay per count (its start falls inside the second group)."""
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 5)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with runtime_guard.probe(model, optimizer, accumulation_steps=A, groups=3) as p:
        for i in range(4 * A):
            x, y = torch.randn(6, 8), torch.randint(0, 5, (6,))
            (F.cross_entropy(model(x), y) / A).backward()
            for group in optimizer.param_groups:
                group["lr"] = 0.1 * 0.9 ** max(0, i + 1 - 5)
            if (i + 1) % A == 0:
                optimizer.step()
                optimizer.zero_grad()
    return p.report()


def test_learning_rate_decay_starting_inside_a_group_is_acc304() -> None:
    """The group where the decay starts changes at its last gaps only (0.1 -> 0.1 -> 0.09 -> 0.081): a phase
    of the schedule, not a veto; the next group changes at every gap."""
    report = _delayed_decay_loop()
    assert report.codes == {"ACC304"}, [f.one_line() for f in report.findings]
    assert report.findings[0].observed.startswith(
        "the learning rate in optimizer.param_groups changed between every two microbatches of 1 of 3 probed "
        "group(s) (group 2: 0.0729 -> 0.06561 -> 0.059049 -> 0.0531441; changed at the first or last gaps only "
        "in 1, constant in 1)")
