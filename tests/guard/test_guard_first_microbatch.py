"""The probe's first microbatch (where the zero-code mode attaches): its one-time costs are paid
before the script starts (runtime_guard.warm), and its parameter checksums are taken at the next
microbatch, with the same ACC004 verdicts as when they were taken at once (issue 35, overhead)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import runtime_guard  # noqa: E402
from runtime_guard import warm  # noqa: E402

A = 2


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Linear(6, 8)
        self.head = torch.nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.body(x)))


def _train(between_first_two=None, groups: int = 1):
    """A microbatches per update, cross entropy / A; ``between_first_two(net)`` runs after the
    first microbatch's backward. Returns the probe after detach."""
    torch.manual_seed(0)
    net = _Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    x, y = torch.randn(A * groups, 4, 6), torch.randint(0, 5, (A * groups, 4))
    probe = runtime_guard.probe(net, opt, accumulation_steps=A, groups=groups)
    probe.attach()
    for i in range(A * groups):
        loss = torch.nn.functional.cross_entropy(net(x[i]), y[i]) / A
        loss.backward()
        if i == 0 and between_first_two is not None:
            between_first_two(net)
        if (i + 1) % A == 0:
            opt.step()
            opt.zero_grad()
    probe.detach()
    return probe


def test_first_checksums_are_filled_at_the_next_microbatch() -> None:
    probe = _train()
    first, second = probe.record.groups[0].microbatches
    assert first.params_at_forward is not None
    assert first.params_at_forward == second.params_at_forward
    assert first.param_bits == second.param_bits
    assert probe.report().codes == set()


def test_another_update_between_the_first_two_microbatches_is_acc004() -> None:
    def other_update(net: torch.nn.Module) -> None:
        with torch.no_grad():
            for p in net.parameters():
                p.add_(0.01)

    probe = _train(other_update)
    first, second = probe.record.groups[0].microbatches
    assert first.params_at_forward is None  # written before the next microbatch: not summed
    assert first.param_bits != second.param_bits
    assert probe.report().codes == {"ACC004"}


def test_parameters_rewritten_with_their_own_values_are_no_update() -> None:
    def restore(net: torch.nn.Module) -> None:  # e.g. weights swapped out for an evaluation and back
        with torch.no_grad():
            for p in net.parameters():
                p.copy_(p.clone())

    probe = _train(restore)
    assert probe.report().codes == set()


def test_warm_up_draws_no_random_number_and_leaves_no_hook(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(warm, "_done", False)
    module_hooks = torch.nn.modules.module
    before = (torch.get_rng_state(), len(module_hooks._global_forward_pre_hooks),
              len(module_hooks._global_forward_hooks))
    warm.warm_up()
    after = (torch.get_rng_state(), len(module_hooks._global_forward_pre_hooks),
             len(module_hooks._global_forward_hooks))
    assert torch.equal(before[0], after[0]) and before[1:] == after[1:]
    assert warm._done
    assert torch._C._autograd._top_saved_tensors_default_hooks(False) is None  # its saved-tensor hooks popped


def test_a_failing_warm_up_never_reaches_the_script(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> None:
        raise RuntimeError("no such operator")

    monkeypatch.setattr(warm, "_done", False)
    monkeypatch.setattr(warm, "_numeric_paths", broken)
    warm.warm_up()  # returns: the script runs
    assert warm._done
