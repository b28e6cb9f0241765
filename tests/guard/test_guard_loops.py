"""The runtime guard on real loops: each faulty variant produces exactly its rule code, the
correct-placement variants produce none (runtime-guard-design.md §1, §3), and the card holds
the observed values."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")

import runtime_guard  # noqa: E402
from tests.guard.guard_loops import A, make_data, train  # noqa: E402

EXPECTED = {
    "correct": set(),
    "zero_each": {"ACC001"},
    "grad_none_each": {"ACC001"},
    "no_zero": {"ACC002"},
    "sched_each": {"ACC304"},
    "step_each": {"ACC004"},
    "clip_each": {"ACC301"},
    "clip_with_norm_each": {"ACC301"},
    "clip_each_prebound": {"ACC307"},  # a clip the probe did not see is an unseen in-place rescale
    "second_optimizer": {"ACC004"},
    "data_zero_each": {"ACC001"},
    "data_scale_each": {"ACC307"},
    "data_update_each": {"ACC004"},
    "losses_list": {"ACC201"},
    "running_total": {"ACC201"},
    "outputs_list": {"ACC201"},
    "sum_then_backward": {"ACC201"},
    "retain_graph": {"ACC202"},
    "zero_before_step": {"ACC003"},
    "zero_at_group_start": set(),
    "zero_between_forward_and_backward": set(),
    "eval_forward": set(),
    "divided_twice": {"ACC101"},
    "not_divided": {"ACC103"},
}


@pytest.fixture(autouse=True)
def _quiet_scheduler_warning():
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step")
        yield


@pytest.mark.parametrize("variant", sorted(EXPECTED))
def test_variant_codes(variant: str) -> None:
    assert train(variant).report.codes == EXPECTED[variant]


@pytest.mark.parametrize(("variant", "expected"), [
    ("correct", set()), ("unscale_update_each", {"ACC303"}), ("clip_before_unscale", {"ACC302"}),
    ("inject_inf", set()),
])
def test_scaler_variants(variant: str, expected: set[str]) -> None:
    assert train(variant, scaler=True).report.codes == expected


def test_mean_of_means_only_with_variable_lengths() -> None:
    lengths = [12, 11, 4, 11]
    report = train("mean_of_means", lengths=lengths).report
    assert report.codes == {"ACC102"}
    assert report.card["normalization"] == "mean of microbatch means"
    assert train("mean_of_means").report.codes == set()  # equal lengths: the same objective


def test_other_losses_leave_normalization_not_inferred() -> None:
    report = train("label_smoothing").report
    assert report.codes == set()
    assert report.card["normalization"].startswith("not inferred: the loss is not plain softmax cross entropy")
    assert report.card["checks"]["ACC101"] == "not observable: normalization not inferred"


def test_the_card_says_each_static_rule_is_not_observable() -> None:
    """A rule with no runtime entry in the spec is on the card too, as not observable, not left out."""
    from runtime_guard.checks import RUNTIME_CHECKS, STATIC_ONLY

    checks = train("correct").report.card["checks"]
    assert {"ACC106", "ACC308", "ACC407", "ACC503", "ACC504"} <= set(STATIC_ONLY)
    assert not set(STATIC_ONLY) & set(RUNTIME_CHECKS)
    assert {code: checks[code] for code in STATIC_ONLY} == dict.fromkeys(
        STATIC_ONLY, "not observable: a static rule, read from the code only")
    assert checks["ACC304"] == "checked"  # the runtime codes keep their own status


def test_effective_batch_mismatch_is_acc404() -> None:
    assert train("correct", probe_options={"effective_batch": 4 * A}).report.codes == set()
    finding = train("correct", probe_options={"effective_batch": 4 * A * 8}).report.findings[0]
    assert finding.code == "ACC404"
    assert finding.observed == f"configured effective batch {4 * A * 8}, observed m x A x D = {4 * A}"


def test_correct_card_values() -> None:
    report = train("correct").report
    card = report.card
    data = make_data(2)
    tokens = [sum(int((labels != -100).sum()) for _, labels in data[g * A:(g + 1) * A]) for g in range(2)]
    assert (card["m"], card["A"], card["D"], card["effective_batch"]) == (4, A, 1, 4 * A)
    assert card["A_source"] == "given to the probe"
    assert card["group_sizes"] == [A, A]
    assert card["supervised_tokens_per_group"]["local"] == tokens
    assert card["normalization"] == "token-weighted mean over the group"
    assert card["normalization_weight_sums"] == pytest.approx([1.0, 1.0], rel=1e-6)
    assert card["updates"] == {"attempted": 2, "applied": 2, "skipped_non_finite": "not observable without the "
                                                                                    "GradScaler"}
    assert card["scheduler_steps_per_update"] == 1.0
    assert card["groups"][0]["timeline"] == "F B | F B | F B | F B ‖ clip step sched zero"
    assert card["groups"][2] == {"index": 2, "tail": True, "microbatches": 1, "timeline": "F B", "trace": "F B"}
    assert card["counts"]["microbatches"] == 2 * A + 1
    assert card["counts"]["examples"] == 4 * (2 * A + 1)
    per_mb = card["memory"]["per_microbatch"]
    assert len(per_mb) == 2 * A + 1 and all(row["saved_activation_peak_bytes"] > 0 for row in per_mb)
    assert max(row["graphs_alive_at_forward"] for row in per_mb) == 1  # only the loop variable


def test_a_scheduler_step_check_needs_a_scheduler_or_groups_to_compare() -> None:
    """With a scheduler its steps are counted; without one the learning rate in param_groups is
    compared between microbatches, which needs a closed group of 2 or more: with groups of one
    microbatch and no scheduler, the card does not claim ACC304 was checked."""
    assert train("correct").report.card["checks"]["ACC304"] == "checked"
    assert train("correct", probe_options={"scheduler": None}).report.card["checks"]["ACC304"] == "checked"
    status = train("step_each", probe_options={"scheduler": None}).report.card["checks"]["ACC304"]
    assert status.startswith("not observable: no LR scheduler"), status


def test_findings_locate_and_explain() -> None:
    finding = next(iter(train("zero_each").report.findings))
    assert (finding.code, finding.name, finding.group, finding.microbatch) == ("ACC001", "zero-grad-inside-group", 0, 1)
    assert "3x by optimizer.zero_grad()" in finding.observed
    assert finding.evidence.startswith("F B Z F B Z F B Z F B")
    assert finding.fix and finding.meaning and finding.url.endswith("ACC001-zero-grad-inside-group/README.md")
    kept = next(iter(train("losses_list").report.findings))
    assert kept.code == "ACC201" and (kept.group, kept.microbatch) == (0, A - 1)
    assert f"the graphs of its microbatches 0-{A - 3} were still alive" in kept.observed


def test_scaler_attempts_and_applied_are_counted_apart() -> None:
    card = train("inject_inf", scaler=True).report.card
    assert card["updates"] == {"attempted": 2, "applied": 1, "skipped_non_finite": 1}
    assert card["precision"]["scaler_scale"] == [128.0, 256.0]


def test_card_counts_every_update_attempt_not_groups_with_one() -> None:
    """Two optimizer steps at each boundary: the trace holds two update attempts per group, and so
    does the card (it counted groups with an attempt: 2 where the trace showed 4)."""
    torch.manual_seed(0)
    net = torch.nn.Linear(6, 5)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    probe = runtime_guard.probe(net, opt, accumulation_steps=2, groups=2)
    probe.attach()
    for i in range(6):
        loss = torch.nn.functional.cross_entropy(net(torch.randn(4, 6)), torch.randint(0, 5, (4,))) / 2
        loss.backward()
        if i % 2 == 1:
            opt.step()
            opt.step()
            opt.zero_grad()
    card = probe.detach().card
    assert [g.letters() for g in probe.record.groups[:2]] == ["FBFBSSZ", "FBFBSSZ"]
    assert card["updates"]["attempted"] == 4 and card["updates"]["applied"] == 4
    assert card["counts"]["update_attempts"] == 4


def test_accumulation_steps_inferred_when_omitted() -> None:
    card = train("correct", accumulation_steps=None).report.card
    assert card["A"] == A
    assert card["A_source"] == f"inferred from observed group sizes {[A, A]}"
    # without A, an update per microbatch with a reset every A updates: the reset cadence tells A
    # (runtime-guard-design.md §1, "step every microbatch" is ACC004)
    report = train("step_each", accumulation_steps=None).report
    assert report.codes == {"ACC004"} and report.card["A"] == A
    assert report.card["A_source"].startswith(f"inferred from the gradient resets: one every {A} updates")


def test_batchnorm_listed_on_card() -> None:
    card = train("correct", batchnorm=True, dropout=0.0).report.card
    assert card["batchnorm"] == {"modules": ["norm"], "train_mode": True, "examples_per_statistics": 4}


def test_on_finding_warn_and_raise() -> None:
    with pytest.warns(runtime_guard.GuardWarning, match="ACC001"):
        train("zero_each", probe_options={"on_finding": "warn"})
    with pytest.raises(runtime_guard.GuardFindingError, match="ACC304") as info:
        train("sched_each", probe_options={"on_finding": "raise"})
    assert info.value.report.codes == {"ACC304"}


def test_attach_detach_without_context_manager() -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    p = runtime_guard.probe(model, opt, accumulation_steps=2, groups=1).attach()
    for i in range(6):  # keeps running after the auto-detach
        model(torch.randn(5, 3)).sum().backward()
        if i % 2 == 1:
            opt.step()
            opt.zero_grad()
    assert not p.attached
    report = p.detach()
    assert report.card["group_sizes"] == [2] and report.codes == set()


def test_invalid_arguments() -> None:
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for bad in ({"groups": 0}, {"on_finding": "shout"}, {"normalization": "guess"}, {"accumulation_steps": 0}):
        with pytest.raises(ValueError):
            runtime_guard.probe(model, opt, **bad)


@pytest.mark.parametrize(("variant", "lengths", "expected", "verdict"), [
    ("correct", [12, 11, 4, 11], set(), "token-weighted mean over the group (replay)"),
    ("mean_of_means", [12, 11, 4, 11], {"ACC102"}, "mean of microbatch means (replay)"),
    ("divided_twice", None, {"ACC101"}, "token-weighted mean over the group, divided by A again (replay)"),
    ("not_divided", None, {"ACC103"}, "token-weighted mean over the group, not divided by A (replay)"),
])
def test_replay_against_references(variant: str, lengths, expected: set[str], verdict: str) -> None:
    """Dropout 0.1: the replay must restore each microbatch's RNG state to match (design notes §3)."""
    report = train(variant, lengths=lengths, probe_options={"normalization": "replay"}).report
    assert report.codes == expected
    assert report.card["normalization"] == verdict
    replay = report.card["normalization_replay"][0]
    assert set(replay) == {"cos_token", "ratio_token", "cos_mean", "ratio_mean"}


def test_replay_is_bitwise_invisible() -> None:
    from tests.guard.guard_loops import bitwise_equal

    options = {"normalization": "replay"}
    plain = train("correct", guard=False, probe_options=options)
    assert bitwise_equal(plain, train("correct", guard=False, probe_options=options))
    assert bitwise_equal(plain, train("correct", guard=True, probe_options=options))


def test_accumulation_steps_read_from_the_accelerator() -> None:
    """A omitted with an Accelerator: A is ``gradient_state.num_steps``, and the prepared
    optimizer's no-op steps inside ``accumulate()`` do not split the groups."""
    pytest.importorskip("accelerate")
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, GradientState

    try:
        accelerator = Accelerator(gradient_accumulation_steps=3, cpu=True)
        torch.manual_seed(0)
        model = torch.nn.Linear(6, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model, optimizer = accelerator.prepare(model, optimizer)
        with runtime_guard.probe(model, optimizer, accelerator=accelerator) as p:
            for _ in range(9):
                with accelerator.accumulate(model):
                    accelerator.backward(model(torch.randn(4, 6)).pow(2).mean())
                    optimizer.step()
                    optimizer.zero_grad()
        card = p.report().card
        assert (card["A"], card["A_source"]) == (3, "accelerator.gradient_state.num_steps")
        assert card["group_sizes"] == [3, 3] and p.report().codes == set()
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)
        GradientState._reset_state()


class DeepSpeedEngine(torch.nn.Module):
    """Stands in for a ZeRO-2 engine: it divides the loss by A, moves each backward's grads into
    its own buffer (``.grad`` is None between microbatches), and owns the update and the reset."""

    def __init__(self, module: torch.nn.Module, optimizer: torch.optim.Optimizer, steps: int) -> None:
        super().__init__()
        self.module, self.optimizer, self.steps, self.micro = module, optimizer, steps, 0
        self.flat = [torch.zeros_like(p) for p in module.parameters()]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.module(x)

    def backward(self, loss: torch.Tensor) -> None:
        (loss / self.steps).backward()
        for buffer, param in zip(self.flat, self.module.parameters(), strict=True):
            buffer += param.grad
            param.grad = None

    def step(self) -> None:
        self.micro += 1
        if self.micro % self.steps == 0:
            for buffer, param in zip(self.flat, self.module.parameters(), strict=True):
                param.grad = buffer.clone()
                buffer.zero_()
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)


def test_engine_that_owns_the_update_is_declared_not_guessed() -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    engine = DeepSpeedEngine(model, optimizer, A)
    with runtime_guard.probe(engine, optimizer, accumulation_steps=A) as p:
        for _ in range(3 * A):
            engine.backward(engine(torch.randn(5, 8)).pow(2).mean())
            engine.step()
    report = p.report()
    card = report.card
    assert report.codes == set()  # .grad is None between microbatches: not a reset the loop did
    assert card["unobservable"] and card["unobservable"][0].startswith("DeepSpeed engine: it owns")
    for code in ("ACC001", "ACC002", "ACC003", "ACC004", "ACC006", "ACC101", "ACC102", "ACC103"):
        assert card["checks"][code] == "not observable: DeepSpeed engine owns the update", code
    assert card["updates"]["applied"] == card["counts"]["applied_updates"] == "not observed"


def test_correct_loop_takes_no_pass_over_the_grads(monkeypatch) -> None:
    """Bit samples carry a correct loop: exact values (two passes over every grad) are only
    measured where a check needs them, which a correct loop never reaches."""
    from runtime_guard.fingerprint import GradState

    passes = []
    original = GradState.measure

    def counting(self, params):
        if not self.measured and any(p.grad is not None for p in params):
            passes.append(1)
        return original(self, params)

    monkeypatch.setattr(GradState, "measure", counting)
    assert train("correct").report.codes == set()
    assert passes == []
    assert train("data_zero_each").report.codes == {"ACC001"}
    assert passes  # zeroed in place: sampled zeros are measured to be sure the grads are all zero
