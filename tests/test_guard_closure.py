"""``optimizer.step(closure)``: torch runs step pre-hooks before the closure, so a closure that runs
the group's last forward and backward (Lightning's automatic optimization) must still close the
group after that backward — no false ACC006/ACC001."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import runtime_guard  # noqa: E402

A = 2


@pytest.mark.parametrize("positional", [False, True])
def test_closure_step_closes_the_group_after_the_closure(positional: bool) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = [(torch.randn(2, 4), torch.randint(0, 3, (2,))) for _ in range(6)]

    def microbatch(x: torch.Tensor, y: torch.Tensor, first: bool) -> torch.Tensor:
        loss = torch.nn.functional.cross_entropy(model(x), y) / A
        if first:
            opt.zero_grad()  # Lightning's place: after the first forward, before its backward
        loss.backward()
        return loss

    with runtime_guard.probe(model, opt, accumulation_steps=A, groups=2) as p:
        for i, (x, y) in enumerate(data):
            first = i % A == 0
            if (i + 1) % A:
                microbatch(x, y, first)
            else:
                closure = lambda x=x, y=y, first=first: microbatch(x, y, first)  # noqa: E731
                opt.step(closure) if positional else opt.step(closure=closure)
    report = p.report()
    assert report.findings == [], [f.one_line() for f in report.findings]
    assert report.card["group_sizes"] == [A, A]
    assert report.card["groups"][0]["trace"].split() == ["F", "Z", "B", "F", "B", "S"]
