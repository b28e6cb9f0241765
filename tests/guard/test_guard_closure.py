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


def test_a_probe_attached_inside_a_running_closure_sees_that_update() -> None:
    """Every batch through ``optimizer.step(closure)`` and the probe attached inside the first closure (as
    the zero-code mode does at the first forward): that step's pre-hook ran before the probe's hooks, its
    post-hook after them. The update is recorded at the post-hook, after the closure's microbatch: groups of
    1 (ACC004), not the first two microbatches merged with the parameters changed inside (ACC001, ACC006)."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    probe = runtime_guard.probe(model, opt, accumulation_steps=A, groups=2)
    attached = []

    def closure(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if not attached:
            attached.append(probe.attach())
        loss = torch.nn.functional.cross_entropy(model(x), y) / A
        loss.backward()
        return loss

    for _ in range(6):
        x, y = torch.randn(2, 4), torch.randint(0, 3, (2,))
        opt.step(lambda x=x, y=y: closure(x, y))
        opt.zero_grad()
    report = probe.report()
    assert report.codes == {"ACC004"}, [f.one_line() for f in report.findings]
    assert report.card["groups"][0]["trace"].split() == ["F", "B", "S", "Z"]
    assert "an optimizer step begun before the probe's hooks (the probe attached inside its closure) was seen at " \
        "its end: group 0's update" in report.card["notes"]
