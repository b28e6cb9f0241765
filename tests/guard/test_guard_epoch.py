"""The probe at an epoch end (ACC005): what the loop does with the epoch's last partial group of
``len(loader) % A`` microbatches, decided from the events, on shuffled DataLoaders; and the
loader watch is a guest like every other wrapper (bitwise-identical training, nothing left after
exit or an exception)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import runtime_guard  # noqa: E402
from tests.guard.guard_loops import EPOCH_VARIANTS, A, TinyLM, bitwise_equal, epoch_loader, train_epochs  # noqa: E402

TREATMENTS = {
    "true_denominator": ("applied, true denominator", set()),
    "weighted_r_over_a": ("applied, weighted r/A", {"ACC005"}),
    "dropped": ("dropped", set()),  # an explicit choice (guide P9): a card fact, as in the linter
    "leaks": ("leaks into the next epoch", {"ACC005"}),
}


def test_every_epoch_variant_has_an_expectation() -> None:
    assert set(TREATMENTS) == set(EPOCH_VARIANTS)


@pytest.mark.parametrize("variant", sorted(TREATMENTS))
def test_partial_group_treatment(variant: str) -> None:
    report = train_epochs(variant).report
    treatment, codes = TREATMENTS[variant]
    assert report.card["last_group"].split(":")[0] == treatment
    assert report.codes == codes
    assert report.card["checks"]["ACC005"] == "checked"
    roles = [g.get("role") for g in report.card["groups"]]
    assert roles == [None, None, "partial", "next", None]  # 2 last full groups, partial, next epoch's first, tail
    assert report.card["group_sizes"] == [A, A]
    if codes:
        finding = report.findings[0]
        assert finding.severity == "warning"
        assert finding.observed.startswith(treatment + ":")  # the message names the treatment
        assert "E" in finding.evidence.split()  # the epoch end is in the trace


@pytest.mark.parametrize("variant", sorted(TREATMENTS))
def test_evaluation_forwards_after_the_epoch_leave_the_treatment(variant: str) -> None:
    """Field trial (transformers run_glue_no_trainer, its evaluation loop without ``torch.no_grad()``):
    a grad-enabled forward in eval mode after the epoch's last update, never backpropagated, was taken
    for the partial group, so a tail applied with weight r/A read as "dropped" (ACC005 missed)."""
    report = train_epochs(variant, evaluations=2).report
    treatment, codes = TREATMENTS[variant]
    assert report.card["last_group"].split(":")[0] == treatment
    assert report.codes == codes


def test_accelerate_weighting_is_a_card_fact(monkeypatch: pytest.MonkeyPatch) -> None:
    """Accelerate's prepared loader weights its last group r/A by contract (rules-spec exemption): with
    the Accelerator's gradient_state known, the treatment stays on the card and is no finding."""
    from runtime_guard.observe.placement import PlacementObserver

    place = PlacementObserver.place_at_epoch_end

    def as_if_prepared(self: PlacementObserver) -> bool:  # what an Accelerator with a prepared loader gives the record
        placed = place(self)
        self.state.record.accelerate_num_steps, self.state.record.loader_unprepared = A, False
        return placed

    monkeypatch.setattr(PlacementObserver, "place_at_epoch_end", as_if_prepared)
    report = train_epochs("weighted_r_over_a").report
    assert report.card["last_group"].startswith("applied, weighted r/A:")
    assert "Accelerate's documented treatment" in report.card["last_group"]
    assert report.codes == set()


def test_leak_names_the_merged_group_size() -> None:
    finding = train_epochs("leaks").report.findings[0]
    assert finding.group == 3 and "A + r = 6 microbatches" in finding.observed


def test_weighting_comes_from_the_cross_entropy_weights() -> None:
    card = train_epochs("weighted_r_over_a").report.card
    assert "weighted 0.5 = r/A" in card["last_group"] and "per-token cross-entropy weights" in card["last_group"]


@pytest.mark.parametrize("variant", ["leaks", "weighted_r_over_a"])
def test_no_partial_group_when_the_length_is_a_multiple_of_a(variant: str) -> None:
    report = train_epochs(variant, batches=3 * A).report
    assert report.card["last_group"] == f"no partial group: len(loader) = {3 * A} is a multiple of A = {A}"
    assert report.codes == set()
    assert report.card["checks"]["ACC005"] == "checked"


def test_loader_without_len_is_not_observed() -> None:
    report = train_epochs("leaks", sized=False).report
    assert report.card["last_group"].startswith("not observed: the loader has no len()")
    assert report.card["checks"]["ACC005"].startswith("not observed")
    assert report.codes == set()
    assert [g.get("role") for g in report.card["groups"]] == [None, None, None]  # probed from the start


def test_probe_at_the_start_leaves_the_treatment_not_observed() -> None:
    report = train_epochs("leaks", probe_options={"at": "start"}).report
    assert report.card["last_group"].startswith("not observed: the probe ran at the start")
    assert report.codes == set()


def test_epoch_end_needs_a_loader_and_a() -> None:
    model = TinyLM()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="needs the training loader"):
        runtime_guard.probe(model, opt, accumulation_steps=A, at="epoch_end")
    with pytest.raises(ValueError, match="at must be"):
        runtime_guard.probe(model, opt, accumulation_steps=A, at="end")
    loader = epoch_loader(6)
    p = runtime_guard.probe(model, opt, loader=loader, at="epoch_end")
    with pytest.raises(ValueError, match="needs A"):
        p.attach()
    assert type(loader) is torch.utils.data.DataLoader


@pytest.mark.parametrize(("variant", "batches"), [(v, 14) for v in sorted(TREATMENTS)] + [("leaks", 12)])
def test_bitwise_identical_with_and_without_the_epoch_probe(variant: str, batches: int) -> None:
    """Dropout on and a shuffled loader: a batch skipped, added, reordered or an RNG draw would show."""
    plain_a = train_epochs(variant, guard=False, batches=batches)
    plain_b = train_epochs(variant, guard=False, batches=batches)
    assert bitwise_equal(plain_a, plain_b)  # control: the harness itself is deterministic
    assert bitwise_equal(plain_a, train_epochs(variant, batches=batches))
    assert not bitwise_equal(plain_a, train_epochs(variant, guard=False, batches=batches, epochs=1))  # it bites


def _loader_state(loader) -> tuple[type, dict]:
    return type(loader), dict(vars(loader))


@pytest.mark.parametrize("fail_at", [None, (0, 2), (0, 13), (1, 1)])
def test_loader_and_hooks_restored_on_exit_and_exception(fail_at) -> None:
    """Before the window (0, 2), inside it (0, 13), in the next epoch (1, 1), and a clean run."""
    torch.manual_seed(0)
    model = TinyLM()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = epoch_loader(14)
    before = _loader_state(loader)
    backward, clip = torch.autograd.backward, torch.nn.utils.clip_grad_norm_
    iterators = []
    with pytest.raises(KeyError) if fail_at else _nothing(), \
            runtime_guard.probe(model, opt, accumulation_steps=A, loader=loader, at="epoch_end") as p:
        for epoch in range(2):
            it = iter(loader)
            iterators.append(it)
            for i, (ids, labels) in enumerate(it):
                torch.nn.functional.cross_entropy(model(ids).reshape(-1, 7), labels.reshape(-1)).backward()
                if fail_at == (epoch, i):
                    raise KeyError("user error")
                if (i + 1) % A == 0:
                    opt.step()
                    opt.zero_grad()
    assert not p.attached
    assert _loader_state(loader) == before
    assert torch.autograd.backward is backward and torch.nn.utils.clip_grad_norm_ is clip
    assert sum(len(m._forward_pre_hooks) + len(m._forward_hooks) for m in model.modules()) == 0
    assert sum(len(q._post_accumulate_grad_hooks or {}) for q in model.parameters()) == 0
    assert "zero_grad" not in vars(opt) and "zero_grad" not in vars(model)
    assert torch._C._autograd._top_saved_tensors_default_hooks(False) is None
    # an iterator handed out while attached keeps yielding the same batches after detach
    assert len(list(iterators[-1])) == 0 or fail_at is not None
    if fail_at is None:
        assert p.report().card["last_group"].startswith("leaks into the next epoch")


class _nothing:  # noqa: N801 - a null context for the parametrized raise
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


@pytest.mark.parametrize("at", [0, 3, 5])
def test_a_read_ahead_loaders_running_epoch_is_counted_a_batch_behind(fresh_accelerate, at: int) -> None:
    """An Accelerate ``DataLoaderShard`` reads its DataLoader one batch ahead and runs its own epoch (a
    generator the guard cannot swap): watched from batch ``at`` of a running epoch of 6, every batch the loop
    gets is reported once, in order, and the epoch ends when the loop asks for a 7th, not when the inner
    iterator ran out; the next epoch is counted by the loader's own watch; undo restores both classes."""
    from accelerate.data_loader import DataLoaderShard

    from accumlint import frameworks as fw
    from runtime_guard import frameworks
    from runtime_guard.epoch import LoaderWatch
    from runtime_guard.undo import UndoStack

    shard = DataLoaderShard(list(range(12)), batch_size=2)
    shard_class = type(shard)
    seen: list[tuple] = []
    watch = LoaderWatch(lambda e, i: seen.append(("batch", e, i)), lambda e, n: seen.append(("end", e, n)),
                        lambda where, error: seen.append(("failed", where, error)))
    undo = UndoStack()
    epoch = iter(shard)
    for index, _batch in enumerate(epoch):
        seen.append(("loop", index))
        if index == at:
            inner = epoch.gi_frame.f_locals["dataloader_iter"]  # the discovery finds it among the live objects
            assert watch.watch(undo, shard) is None
            last = frameworks.read_ahead_last(shard)
            assert last is (at == 5)
            assert watch.adopt_read_ahead(undo, shard, inner, inner._num_yielded, last,
                                          fw.accelerate.READ_AHEAD_END_METHOD)
    seen.append(("after",))
    assert seen == ([("loop", i) for i in range(at + 1)] + [("batch", 0, at)]
                    + [x for i in range(at + 1, 6) for x in (("batch", 0, i), ("loop", i))]
                    + [("end", 0, 6), ("after",)])
    seen.clear()
    assert [b.tolist() for b in shard] == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9], [10, 11]]
    assert seen == [("batch", 1, i) for i in range(6)] + [("end", 1, 6)]
    undo.run()
    assert type(shard) is shard_class
    assert type(inner) is torch.utils.data.dataloader._SingleProcessDataLoaderIter


def test_a_read_ahead_loader_that_holds_batches_back_is_not_counted(fresh_accelerate) -> None:
    """A resumed epoch (``skip_first_batches``: the shard reads its first batches and yields none of them):
    the loop's batches cannot be told from the inner iterator's, so the zero-code run keeps its start."""
    from accelerate.data_loader import DataLoaderShard

    from runtime_guard import frameworks

    assert frameworks.read_ahead_last(DataLoaderShard(list(range(12)), batch_size=2, skip_batches=1)) is None
    shard = DataLoaderShard(list(range(12)), batch_size=2)
    assert frameworks.read_ahead_last(shard) is False
    assert frameworks.read_ahead_last(torch.utils.data.DataLoader(list(range(12)), batch_size=2)) is None
