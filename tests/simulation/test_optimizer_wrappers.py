"""An optimizer that backpropagates the loss itself: a mixed-precision wrapper, no engine.

apex's ``FP16_Optimizer`` and a booster's optimizer wrapper take ``optimizer.backward(loss)``
(they scale the loss), then ``step()`` and ``zero_grad()`` as any optimizer: they count no
microbatches. The runs took such a receiver, known by its use alone, for a DeepSpeed engine
(``.backward(loss)`` and ``.step()``) and left the loop undecided ("decides the group's cadence
itself"); named an optimizer and reset as one, it is one (field trial 66: six loops of one
repository's examples and one of another's).
"""

from __future__ import annotations

from accumlint.model.simulation import simulate
from tests.support import line_of, lint, model_of

WRAPPED = """
def train(model, {name}, loader, accum):
    for step, batch in enumerate(loader):
        loss = model(batch).mean() / accum
        {name}.backward(loss)
        if {test}:
            {name}.step()
            {name}.zero_grad()
"""


def _entry(source: str):
    (entry,) = simulate(model_of(source).functions, "")
    return entry


def test_an_optimizer_that_backpropagates_is_decided_as_an_optimizer() -> None:
    entry = _entry(WRAPPED.format(name="optimizer", test="(step + 1) % accum == 0"))
    assert entry.decided, entry.reasons()
    assert [fact.role.value for fact in entry.roles if fact.label == "optimizer"] == ["optimizer"]
    assert lint(WRAPPED.format(name="optimizer", test="(step + 1) % accum == 0"), "ALL") == []


def test_its_zero_based_gate_is_acc006() -> None:
    source = WRAPPED.format(name="optimizer", test="step % accum == 0")
    assert lint(source, "ALL") == [("ACC006", line_of(source, "if step % accum == 0:"))]


def test_an_engine_named_so_stays_an_engine() -> None:
    """The same use by a receiver named for an engine: DeepSpeed's, which counts its own steps (here
    gated by hand, which the run leaves to ACC502)."""
    entry = _entry(WRAPPED.format(name="engine", test="(step + 1) % accum == 0"))
    assert not entry.decided
    assert [fact.role.value for fact in entry.roles if fact.label == "engine"] == ["DeepSpeed engine"]
