"""A write of a DeepSpeed engine's micro-step count is simulated, not a reason to give up.

``engine.micro_steps = 0`` sets the count that ``is_gradient_accumulation_boundary()`` reads
(deepspeed 0.19.x ``runtime/engine.py``): where the run knows the value, the count takes it and the
engine's boundary follows from it, whether the engine was built in sight or is known by its use
later in the run. A write that changes the count inside a pass over the data moves the boundary: that
is ACC505's bug, and the run leaves the verdict to it. A value the run does not know (read from a
checkpoint) leaves the loop undecided.
"""

from __future__ import annotations

import textwrap

import libcst as cst

from accumlint.model.module_functions import ModuleFunctions
from accumlint.model.simulation import Configuration, accumulation_loops, simulate
from accumlint.spec.vocabulary import EventKind
from tests.support import lint

#: an engine built in sight, accumulating ``ACCUM`` microbatches per update
BUILT = """
import deepspeed
import torch

ACCUM = 4
net = torch.nn.Linear(8, 1)
engine, _, _, _ = deepspeed.initialize(model=net, model_parameters=net.parameters(),
                                       config={"gradient_accumulation_steps": ACCUM})
loader = torch.utils.data.DataLoader(torch.randn(64, 8), batch_size=4)
"""


def results(*parts: str, judged_only: bool = True) -> list:
    """The simulations of the module the dedented ``parts`` make: ``check``'s, or ``explain``'s (every
    configuration)."""
    source = "".join(map(textwrap.dedent, parts))
    return simulate(ModuleFunctions(cst.parse_module(source)), "train.py", judged_only=judged_only)


def updates(trace) -> list[tuple[int, int | None]]:
    return [(e.epoch, e.microbatch) for e in trace.events if e.kind is EventKind.UPDATE]


def test_a_count_set_to_zero_before_each_pass_of_whole_groups_is_followed() -> None:
    # the engine is known only by its use (a parameter that backpropagates and steps), the count is
    # written before the run meets it as an engine
    loop = results("""
        def one_pass(engine, batches):
            engine.zero_grad()
            engine.micro_steps = 0
            for x in batches:
                loss = engine(x).mean()
                engine.backward(loss)
                engine.step()
        """)
    assert accumulation_loops(loop) == [()]
    (result,) = loop
    whole = next(t for t in result.traces if t.configuration == Configuration(4, 8))
    assert updates(whole) == [(0, 3), (0, 7), (1, 3), (1, 7)]


def test_a_count_set_again_at_each_epoch_start_drops_the_tail_count() -> None:
    # N = 2A + 1: the epoch's last microbatch would open the next group; the write restarts the count,
    # so the next epoch's updates come after its own second and fourth microbatches
    (result,) = results(BUILT, """
        for epoch in range(2):
            engine.micro_steps = 0
            for x in loader:
                engine.backward(engine(x).mean())
                engine.step()
        """, judged_only=False)
    assert result.decided, result.reasons()
    tail = next(t for t in result.traces if t.configuration == Configuration(4, 9))
    assert updates(tail) == [(0, 3), (0, 7), (1, 3), (1, 7)]


def test_a_count_reset_inside_the_pass_is_left_to_acc505() -> None:
    # the engine's boundary never comes: the run leaves the verdict to the rule about the write
    source = textwrap.dedent(BUILT) + textwrap.dedent("""
        for epoch in range(2):
            for x in loader:
                engine.backward(engine(x).mean())
                engine.micro_steps = 0
                engine.step()
        """)
    (result,) = results(source)
    assert not result.decided
    assert "`engine.micro_steps` is set inside the pass over the data to another number than its own count: " \
           "DeepSpeed's boundary moves (ACC505 reports it)" in result.reasons()
    assert [code for code, _ in lint(source)] == ["ACC505"]


def test_a_count_restored_from_a_checkpoint_leaves_the_loop_undecided() -> None:
    (result,) = results(BUILT, """
        state = torch.load("resume.pt")
        engine.micro_steps = state["micro_steps"]
        for epoch in range(2):
            for x in loader:
                engine.backward(engine(x).mean())
                engine.step()
        """)
    assert not result.decided
    assert any("`engine.micro_steps` is written with a value the run does not know" in reason
               for reason in result.reasons())
