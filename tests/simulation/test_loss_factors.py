"""The factor the code puts on each loss before its backward, carried by the simulator's values
(``Unknown.factor``) to the backward events of the traces and printed by ``accumlint explain``
(issue 31: each microbatch's weight in the update starts from this factor)."""

from __future__ import annotations

import pytest

from accumlint.commands.explain import render_markdown, render_text, to_json
from accumlint.model.trace import factor_in_a
from tests.simulation.test_simulation import only, run

LOOP = """
import torch

ACCUM = 4


def weighted(loss, weight):
    return loss * weight


def train(model, loader, opt, scaler, accelerator, cfg):
    for i, (x, y) in enumerate(loader):
        out = model(x)
        loss = torch.nn.functional.cross_entropy(out, y)
        BACKWARD
        if (i + 1) % ACCUM == 0:
            opt.step()
            opt.zero_grad()


def main():
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = torch.utils.data.DataLoader(list(range(8)), batch_size=2)
    train(model, loader, opt, torch.amp.GradScaler(), None, CFG)


CFG = None

if __name__ == "__main__":
    main()
"""


def _factors(backward: str, a: int = 4) -> list[str]:
    result = only(LOOP.replace("BACKWARD", backward))
    return run(result, a, 2 * a).loss_factors()


@pytest.mark.parametrize(("backward", "expected"), [
    ("loss.backward()", ["1"]),
    ("(loss / ACCUM).backward()", ["1/A"]),
    ("loss = loss / ACCUM\n        loss /= ACCUM\n        loss.backward()", ["1/A²"]),
    ("(0.5 * loss / ACCUM).backward()", ["0.5/A"]),
    ("(loss * ACCUM).backward()", ["A"]),
    # scaling survives the scaler's own scale, a reduction and a project helper
    ("scaler.scale((loss / ACCUM).mean()).backward()", ["1/A"]),
    ("weighted(loss, 1 / ACCUM).backward()", ["1/A"]),
    # a sum of terms is a new loss; dividing it by A is the factor
    ("((loss + 0.1 * out.pow(2).mean()) / ACCUM).backward()", ["1/A"]),
    # a weight the run does not know
    ("(loss * cfg.weight / ACCUM).backward()", ["unknown"]),
    # the loss handed to an object's backward
    ("accelerator.backward(loss / ACCUM)", ["1/A"]),
])
def test_the_factor_on_the_loss_at_its_backward(backward: str, expected: list[str]) -> None:
    assert _factors(backward) == expected


def test_a_data_divisor_computes_a_new_loss() -> None:
    """Dividing by a count of this microbatch's tokens is part of the loss (a token mean), not a
    scaling of it."""
    assert _factors("(loss.sum() / (y != -100).sum() / ACCUM).backward()") == ["1/A"]


def test_with_a_of_one_the_factor_is_the_number() -> None:
    assert _factors("(loss / ACCUM).backward()", a=1) == ["1"]
    assert _factors("(loss / ACCUM).backward()", a=2) == ["1/A"]


def test_explain_prints_and_serialises_the_factor() -> None:
    result = only(LOOP.replace("BACKWARD", "(loss / ACCUM).backward()"))
    text = render_text("train.py", [result])
    assert "    factor on the loss at each backward: 1/A" in text.splitlines()
    (entry,) = to_json("train.py", [result])
    (four,) = [r for r in entry["runs"] if r["configuration"] == {
        "accumulation": 4, "microbatches": 8, "epochs": 2, "replicas": 1}]
    assert four["loss_factors"] == ["1/A"]
    backwards = [e for e in four["events"] if e["kind"] == "backward"]
    assert len(backwards) == 8 and {e["loss_factor"] for e in backwards} == {0.25}
    assert all("loss_factor" not in e for e in four["events"] if e["kind"] != "backward")
    # the editor's hover shows the runs with A = 2
    assert "factor on the loss at each backward: 1/A" in render_markdown(result).splitlines()


@pytest.mark.parametrize(("factor", "a", "words"), [
    (0.25, 4, "1/A"), (0.0625, 4, "1/A²"), (4.0, 4, "A"), (1.0, 4, "1"), (0.125, 4, "0.5/A"),
    (1 / 3, 2, "0.333333"), (0.5, 1, "0.5"), (None, 4, "unknown"),
])
def test_factor_in_words_of_a(factor: float | None, a: int, words: str) -> None:
    assert factor_in_a(factor, a) == words
