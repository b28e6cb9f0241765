"""The guard's ACC103 under optimizers that ignore a constant factor on the gradients (issue 31:
the static and the runtime answer say the same). An undivided sum of A microbatch gradients gives
Adam, AdamW and their kin the update the group mean gives, so neither engine reports it unless a
gradient clip sees the A-times-larger gradient; SGD keeps ACC103."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import runtime_guard  # noqa: E402
from runtime_guard.frameworks import scale_invariant_optimizer  # noqa: E402

A = 4


class Tagger(torch.nn.Module):
    """``[m, 5]`` token ids -> ``[m, 5, 7]`` logits."""

    def __init__(self) -> None:
        super().__init__()
        self.embed, self.head = torch.nn.Embedding(7, 6), torch.nn.Linear(6, 7)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(ids))


def _undivided_loop(optimizer_class: type, clip: bool) -> runtime_guard.Report:
    """A plain loop whose token-mean cross-entropy reaches backward undivided; the update every A
    microbatches, with a norm clip before it when ``clip``."""
    torch.manual_seed(0)
    model = Tagger()
    optimizer = optimizer_class(model.parameters(), lr=0.01)
    with runtime_guard.probe(model, optimizer, accumulation_steps=A) as probe:
        for i in range(3 * A):
            ids = torch.randint(0, 7, (2, 5))
            logits = model(ids)
            torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids).backward()
            if (i + 1) % A == 0:
                if clip:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                optimizer.zero_grad()
    return probe.report()


def test_sgd_without_the_division_is_acc103() -> None:
    report = _undivided_loop(torch.optim.SGD, clip=False)
    assert report.codes == {"ACC103"}, [f.one_line() for f in report.findings]
    assert report.card["optimizer_scale_invariant"] is False


def test_adamw_without_the_division_and_without_a_clip_is_silent() -> None:
    report = _undivided_loop(torch.optim.AdamW, clip=False)
    assert report.codes == set(), [f.one_line() for f in report.findings]
    assert report.card["optimizer_scale_invariant"] is True
    # the weights themselves are still measured and shown: only the verdict changes
    assert report.card["normalization_groups"], report.card


def test_adamw_with_a_clip_keeps_acc103_and_says_why() -> None:
    report = _undivided_loop(torch.optim.AdamW, clip=True)
    assert report.codes == {"ACC103"}, [f.one_line() for f in report.findings]
    (found,) = [f for f in report.findings if f.code == "ACC103"]
    assert "torch.optim.AdamW takes the same update from the sum as from the mean" in found.observed


def test_which_optimizers_count_as_scale_invariant() -> None:
    params = [torch.nn.Parameter(torch.zeros(2))]

    class HomeMadeAdam(torch.optim.Adam):
        """A subclass defined outside torch: its update may be anything."""

    assert scale_invariant_optimizer(torch.optim.Adam(params)) == "torch.optim.Adam"
    assert scale_invariant_optimizer(torch.optim.RMSprop(params)) == "torch.optim.RMSprop"
    assert scale_invariant_optimizer(torch.optim.SGD(params, lr=0.1)) == ""
    assert scale_invariant_optimizer(torch.optim.RAdam(params)) == ""
    assert scale_invariant_optimizer(HomeMadeAdam(params)) == ""
