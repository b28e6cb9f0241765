"""The guard's normalization check reports the measured sum of each group's loss weights and the
factor it implies (issue 16 item 4): a finding when the sum is neither the convention nor 1, with
sequences padded to the longest of their microbatch (so padded lengths differ between
microbatches), the sum convention declared, class weights, and "not observed" where no weights
can be inferred."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

import runtime_guard  # noqa: E402
from runtime_guard.render import render_card  # noqa: E402

A, V = 4, 7
# supervised tokens of the two sequences of each microbatch; each microbatch is padded to its longest
LENGTHS = [(10, 6), (8, 6), (5, 3), (12, 9)]
SUPERVISED = [sum(pair) for pair in LENGTHS]  # 16, 14, 8, 21 = 59 per group
PADDED = [2 * max(pair) for pair in LENGTHS]  # 20, 16, 10, 24 positions
# the mean over padded positions divided by A: sum_k (n_k / P_k) / A = 0.8375
PADDED_MEAN = sum(n / p for n, p in zip(SUPERVISED, PADDED, strict=True)) / A
TASK_WEIGHTS = (0.3, 0.7)


def _microbatch(k: int) -> tuple[torch.Tensor, torch.Tensor]:
    longest = max(LENGTHS[k])
    ids = torch.randint(0, V, (2, longest))
    labels = ids.clone()
    for row, n in enumerate(LENGTHS[k]):
        labels[row, n:] = -100
    return ids, labels


def _lm_loop(loss: str, **options: object) -> runtime_guard.Report:
    """Two groups of A microbatches of a tiny LM; ``loss`` says how each microbatch loss is formed."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(V, 8), torch.nn.Linear(8, V))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    seen: list[int] = []
    with runtime_guard.probe(model, optimizer, accumulation_steps=A, **options) as p:
        for _ in range(2):
            group = [_microbatch(k) for k in range(A)]
            group_tokens = sum(int((labels != -100).sum()) for _, labels in group)
            for ids, labels in group:
                per_token = F.cross_entropy(model(ids).flatten(0, 1), labels.flatten(), reduction="none")
                supervised = int((labels != -100).sum())
                value = {
                    "token_mean": per_token.sum() / group_tokens,
                    "padded_mean": per_token.sum() / labels.numel() / A,
                    "padded_mean_twice": per_token.sum() / labels.numel() / A / A,
                    "padded_mean_undivided": per_token.sum() / labels.numel(),
                    "mean_of_means": per_token.sum() / supervised / A,
                    "sum": per_token.sum(),
                    "sum_divided": per_token.sum() / A,
                    # a task weight per microbatch (by dataset), each microbatch its own token mean
                    "task_weighted": TASK_WEIGHTS[len(seen) % 2] * per_token.sum() / supervised / A,
                }[loss]
                seen.append(supervised)
                value.backward()
            optimizer.step()
            optimizer.zero_grad()
    return p.report()


@pytest.mark.parametrize(("loss", "code", "total", "divisor"), [
    ("token_mean", None, 1.0, None),
    ("padded_mean", "ACC102", PADDED_MEAN, A),  # 0.84: per-microbatch denominators count padding
    ("padded_mean_twice", "ACC101", PADDED_MEAN / A, A * A),  # 0.21 ~ 1/A: and divided by A again
    ("padded_mean_undivided", "ACC103", PADDED_MEAN * A, 1),  # 3.35 ~ A: never divided by A
])
def test_weight_sums_with_uneven_padding(loss: str, code: str | None, total: float, divisor: int | None) -> None:
    report = _lm_loop(loss)
    assert report.codes == ({code} if code else set()), [f.one_line() for f in report.findings]
    groups = report.card["normalization_groups"]
    assert [g["weight_sum"] for g in groups] == pytest.approx([total, total], rel=1e-5)
    assert [g["factor"] for g in groups] == pytest.approx([total, total], rel=1e-5)
    assert {(g["convention"], g["convention_source"], g["expected_sum"], g["supervised_tokens"]) for g in groups} == {
        ("mean", "assumed", 1.0, sum(SUPERVISED))}
    if code:
        observed = report.findings[0].observed
        assert f"sum to {total:.4g}" in observed and f"{total:.4g}x the token mean" in observed
        # the per-microbatch denominators the weights imply: the padded positions times what divided them
        assert f"divided by their own count ({', '.join(f'{p * divisor:.4g}' for p in PADDED)})" in observed
    assert f"sum {total:.4g} = {total:.4g}x the mean convention (assumed, expected 1)" in render_card(report.card)


def test_padded_mean_is_0_84_not_1() -> None:
    """The numbers the parametrized test relies on, worked out by hand."""
    assert SUPERVISED == [16, 14, 8, 21] and PADDED == [20, 16, 10, 24]
    assert PADDED_MEAN == pytest.approx(0.8375)


def test_mean_of_means_sums_to_1_and_keeps_its_own_finding() -> None:
    """Each microbatch divided by its own supervised tokens and by A: the sum is 1 (no off-scale
    finding), but uneven token counts are ACC102's equal-microbatch pattern."""
    report = _lm_loop("mean_of_means")
    assert report.codes == {"ACC102"}
    assert "carries weight 0.25 whatever its supervised tokens [16, 14, 8, 21]" in report.findings[0].observed
    assert [g["factor"] for g in report.card["normalization_groups"]] == pytest.approx([1.0, 1.0], rel=1e-5)


def test_per_microbatch_task_weights_stay_silent() -> None:
    """Weights 0.3 and 0.7 by microbatch sum to 0.5 and differ between microbatches, but imply no
    whole per-microbatch count (16 / 0.3 = 53.3 tokens): a deliberate weighting the guard cannot
    tell from a bug, so the card shows the factor and no finding follows."""
    report = _lm_loop("task_weighted")
    assert report.codes == set(), [f.one_line() for f in report.findings]
    groups = report.card["normalization_groups"]
    assert [g["factor"] for g in groups] == pytest.approx([0.5, 0.5], rel=1e-5)
    assert {g["shape"] for g in groups} == {"per-token weights differ between microbatches"}


def test_undeclared_sum_is_missing_normalization_with_a_hint() -> None:
    report = _lm_loop("sum")
    assert report.codes == {"ACC103"}
    assert "declare it with loss_convention='sum'" in report.findings[0].observed
    groups = report.card["normalization_groups"]
    assert [g["weight_sum"] for g in groups] == pytest.approx([59.0, 59.0], rel=1e-4)
    assert {g["shape"] for g in groups} == {"token-weighted mean over the group; every token weighs 1 (a summed loss)"}


@pytest.mark.parametrize(("loss", "codes", "factor"), [
    ("sum", set(), 1.0),  # the declared convention: every token weighs 1, the sum is the count
    ("token_mean", set(), 1 / 59),  # a sum of 1 is accepted under the sum convention too
    ("sum_divided", {"ACC101"}, 1 / A),  # the declared sum divided by A: 1/A of it
])
def test_declared_sum_convention(loss: str, codes: set[str], factor: float) -> None:
    report = _lm_loop(loss, loss_convention="sum")
    assert report.codes == codes, [f.one_line() for f in report.findings]
    groups = report.card["normalization_groups"]
    assert {(g["convention"], g["convention_source"], g["expected_sum"]) for g in groups} == {("sum", "declared", 59)}
    # fp32: a weight of 1 per token is measured to ~1e-5 (the sampled mean times the count)
    assert [g["factor"] for g in groups] == pytest.approx([factor, factor], rel=1e-4)
    if codes:
        assert "= N/A (A = 4)" in report.findings[0].observed


def test_loss_convention_is_checked() -> None:
    with pytest.raises(ValueError, match="loss_convention"):
        _lm_loop("sum", loss_convention="total")


CLASS_WEIGHTS = torch.tensor([1.0, 2.0, 0.5, 3.0, 1.5])


def _classifier_loop(reduction: str, divisor: float) -> runtime_guard.Report:
    """Class-weighted cross entropy over microbatches of 6 examples (one ignored), two groups."""
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 5)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with runtime_guard.probe(model, optimizer, accumulation_steps=A) as p:
        for i in range(2 * A):
            x, y = torch.randn(6, 8), torch.randint(0, 5, (6,))
            y[0] = -100
            loss = F.cross_entropy(model(x), y, weight=CLASS_WEIGHTS, reduction=reduction)
            (loss / divisor).backward()
            if (i + 1) % A == 0:
                optimizer.step()
                optimizer.zero_grad()
    return p.report()


def test_class_weighted_mean_sums_to_1() -> None:
    report = _classifier_loop("mean", A)
    assert report.codes == set()
    groups = report.card["normalization_groups"]
    assert [g["weight_sum"] for g in groups] == pytest.approx([1.0, 1.0], rel=1e-5)
    assert {g["shape"] for g in groups} == {"class-weighted mean"}
    assert {g["supervised_tokens"] for g in groups} == {5 * A}


def test_class_weighted_sum_over_a_token_count_is_not_judged() -> None:
    """A class-weighted sum divided by the group's example count is a convention of its own: its
    weights sum to the mean class weight, not 1. The card shows it; no finding."""
    report = _classifier_loop("sum", 5 * A)
    assert report.codes == set(), [f.one_line() for f in report.findings]
    groups = report.card["normalization_groups"]
    assert all(g["weight_sum"] != pytest.approx(1.0, rel=0.02) for g in groups)
    assert {g["shape"] for g in groups} == {"class-weighted mean"}


def test_class_weighted_mean_divided_twice_is_still_acc101() -> None:
    report = _classifier_loop("mean", A * A)
    assert report.codes == {"ACC101"}
    assert [g["factor"] for g in report.card["normalization_groups"]] == pytest.approx([1 / A, 1 / A], rel=1e-5)


def test_weights_within_the_margin_are_a_card_fact() -> None:
    """A denominator one token too large in 59 (sum 0.983, inside OFF_SCALE_MARGIN): no finding."""
    from runtime_guard.inference import OFF_SCALE_MARGIN

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(V, 8), torch.nn.Linear(8, V))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with runtime_guard.probe(model, optimizer, accumulation_steps=A) as p:
        for _ in range(2):
            for k in range(A):
                ids, labels = _microbatch(k)
                loss = F.cross_entropy(model(ids).flatten(0, 1), labels.flatten(), reduction="sum")
                (loss / (sum(SUPERVISED) + 1)).backward()
            optimizer.step()
            optimizer.zero_grad()
    report = p.report()
    assert abs(59 / 60 - 1) < OFF_SCALE_MARGIN
    assert report.codes == set()
    assert [g["factor"] for g in report.card["normalization_groups"]] == pytest.approx([59 / 60] * 2, rel=1e-5)


def test_no_logits_is_not_observed_never_a_finding() -> None:
    """A regression output (no class dimension) and a sum-reduced loss: neither per-token weights nor
    the factor on a mean-reduced loss can be read, so every closed group is "not observed" on the card,
    whatever the loop divides by (a mean-reduced one is judged: test_guard_unseen.py)."""
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with runtime_guard.probe(model, optimizer, accumulation_steps=A) as p:
        for i in range(2 * A):
            loss = F.mse_loss(model(torch.randn(6, 8)), torch.randn(6, 1), reduction="sum")
            (loss / (A * A)).backward()
            if (i + 1) % A == 0:
                optimizer.step()
                optimizer.zero_grad()
    report = p.report()
    assert report.codes == set()
    groups = report.card["normalization_groups"]
    assert [g["group"] for g in groups] == [0, 1]
    assert all(g["weight_sum"] is None and g["factor"] is None for g in groups)
    why = "not observed: the model output has no logits tensor ([..., V] with V >= 2)"
    assert {g["shape"] for g in groups} == {why}
    assert "group 0: not observed: the model output has no logits" in render_card(report.card)
