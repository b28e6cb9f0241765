"""Which forwards a backward's loss was computed from (issue 31, loss provenance).

Each value the simulation computes from a forward's output remembers that forward, as the
(epoch, microbatch) of its event; a backward records the forwards of its loss. A forward that no
backward takes computes nothing an update applies: an agent's action chosen by the network it
trains (its output goes through ``argmax``), a sample drawn for a log. A forward whose output is
kept for a later backward (``sum(losses).backward()``) is a microbatch of that backward's group.
Where the output went to an object out of sight, what is read back from it is unknown, and the
run keeps counting every forward, as it did before it knew any provenance.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import libcst as cst

from accumlint.commands.explain import render_text, to_json
from accumlint.model.module_functions import ModuleFunctions
from accumlint.model.simulation import Simulation, simulate
from accumlint.model.trace import Configuration, Trace
from accumlint.spec.vocabulary import EventKind
from tests.support import findings, lint


def _only(source: str) -> Simulation:
    (result,) = simulate(ModuleFunctions(cst.parse_module(textwrap.dedent(source))), "train.py")
    return result


def _run(result: Simulation, a: int, n: int) -> Trace:
    (trace,) = [t for t in result.traces if t.configuration == Configuration(a, n) and not t.choices]
    return trace


def _feeds(trace: Trace) -> list[frozenset[tuple[int, int | None]] | None]:
    return [e.feeds for e in trace.events if e.kind is EventKind.BACKWARD]


DEFERRED = """
import torch


def fit(net, opt, loader, crit, accum, store):
    losses = []
    for i, (x, y) in enumerate(loader):
        losses.append(crit(net(x), y))
        if (i + 1) % accum == 0:
            {backward}
            opt.step()
            opt.zero_grad()
            losses = []
"""


def test_a_loss_is_computed_from_its_own_microbatchs_forward() -> None:
    result = _only("""
    def fit(net, opt, loader, crit, accum):
        for i, (x, y) in enumerate(loader):
            loss = crit(net(x), y) / accum
            loss.backward()
            if (i + 1) % accum == 0:
                opt.step()
                opt.zero_grad()
    """)
    trace = _run(result, 2, 4)
    assert _feeds(trace) == [frozenset({(0, m)}) for m in range(4)] + [frozenset({(1, m)}) for m in range(4)]
    assert trace.accumulates()


def test_a_sum_of_kept_losses_is_computed_from_every_forward_of_its_group() -> None:
    trace = _run(_only(DEFERRED.format(backward="(sum(losses) / accum).backward()")), 2, 4)
    assert _feeds(trace)[:2] == [frozenset({(0, 0), (0, 1)}), frozenset({(0, 2), (0, 3)})]
    assert trace.accumulates()


def test_a_kept_loss_stacked_by_a_library_call_keeps_its_forwards() -> None:
    trace = _run(_only(DEFERRED.format(backward="torch.stack(losses).mean().backward()")), 2, 4)
    assert _feeds(trace)[:2] == [frozenset({(0, 0), (0, 1)}), frozenset({(0, 2), (0, 3)})]


def test_a_detached_output_feeds_no_backward() -> None:
    trace = _run(_only(DEFERRED.format(backward="sum(v.detach() for v in losses).backward()")), 2, 4)
    assert all(f is None or (0, 0) not in f for f in _feeds(trace))


ACTING = """
import torch.nn.functional as F


def run(policy, opt, env, replay, cfg):
    obs = env.reset()
    for tick in range(cfg.ticks):
        out = policy(obs)
        {act}
        replay.add(obs, action)
        if (tick + 1) % cfg.train_every == 0:
            batch = replay.sample(cfg.batch_size)
            loss = F.mse_loss(policy(batch.obs), batch.target)
            opt.zero_grad()
            loss.backward()
            opt.step()
"""


def test_an_action_chosen_by_argmax_is_no_microbatch_of_a_group() -> None:
    result = _only(ACTING.format(act="action = out.argmax()\n        obs = env.step(action)"))
    trace = _run(result, 2, 4)
    assert [f for f in _feeds(trace)] and all(f == frozenset() for f in _feeds(trace))
    assert not trace.accumulates() and trace.idles()
    assert result.trains_without_groups()


def test_an_output_handed_to_an_object_out_of_sight_leaves_the_loss_unknown() -> None:
    # the replay buffer holds the forward's own output: what `sample` reads back may be computed from it
    result = _only(ACTING.format(act="action = out\n        obs = env.step(action.argmax())"))
    trace = _run(result, 2, 4)
    assert _feeds(trace) and all(f is None for f in _feeds(trace))
    assert trace.accumulates()


REINFORCE = """
def run(policy, opt, observations, cfg):
    log_probs = []
    for tick, obs in enumerate(observations):
        dist = policy(obs)
        action = dist.sample()
        log_probs.append(dist.log_prob(action))
        if {gate}:
            opt.zero_grad()
            (-sum(log_probs)).backward()
            opt.step()
            log_probs = []
"""


def test_log_probabilities_kept_over_ticks_are_one_group_and_its_gate_is_checked() -> None:
    """The forwards on each tick feed the sum that the gate's backward takes: a group of ticks,
    so a 0-based gate there fires on the first tick alone (ACC006), unlike the acting network."""
    trace = _run(_only(REINFORCE.format(gate="(tick + 1) % cfg.every == 0")), 2, 4)
    assert _feeds(trace)[:2] == [frozenset({(0, 0), (0, 1)}), frozenset({(0, 2), (0, 3)})]
    assert trace.accumulates()
    assert "ACC006" in [code for code, _ in lint(REINFORCE.format(gate="tick % cfg.every == 0"), "ALL")]
    assert "ACC006" not in [code for code, _ in lint(REINFORCE.format(gate="(tick + 1) % cfg.every == 0"), "ALL")]


METHOD_LOSS = """
def fit(net, opt, loader, objective, meter, accum):
    for i, (x, y) in enumerate(loader):
        loss = objective.compute(net(x), y) / accum
        {log}
        loss.backward()
        if (i + 1) % accum == 0:
            opt.step()
            opt.zero_grad()
"""


def test_a_loss_computed_by_a_method_of_an_object_out_of_sight_keeps_its_forward() -> None:
    trace = _run(_only(METHOD_LOSS.format(log="meter.update(loss.item())")), 2, 4)
    assert _feeds(trace)[:2] == [frozenset({(0, 0)}), frozenset({(0, 1)})]


def test_a_loss_handed_to_a_meter_keeps_its_forward() -> None:
    # the meter keeps the loss, but no loss is read back from it
    trace = _run(_only(METHOD_LOSS.format(log="meter.update(loss)")), 2, 4)
    assert _feeds(trace)[:2] == [frozenset({(0, 0)}), frozenset({(0, 1)})]


def test_a_loss_read_back_from_an_object_that_kept_outputs_is_unknown() -> None:
    trace = _run(_only(DEFERRED.format(backward="store.add(losses[-1])\n            store.total().backward()")),
                 2, 4)
    assert _feeds(trace) and all(f is None for f in _feeds(trace))


def test_explain_says_which_forwards_each_backward_learns_from() -> None:
    result = _only(DEFERRED.format(backward="(sum(losses) / accum).backward()"))
    text = render_text("train.py", [result])
    a2 = text.split("A=2 N=4 epochs=2 D=1\n")[1].split("\n  A=")[0]
    assert "forwards each backward's loss comes from: 2 microbatches (its own and 1 before)" in a2
    (run,) = [r for r in to_json("train.py", [result])[0]["runs"]
              if r["configuration"] == {"accumulation": 2, "microbatches": 4, "epochs": 2, "replicas": 1}]
    backwards = [e for e in run["events"] if e["kind"] == "backward"]
    assert backwards[0]["loss_forwards"] == [[0, 0], [0, 1]]
    assert run["loss_sources"] == ["2 microbatches (its own and 1 before)"]


# --- a loss computed by a function of another module ----------------------------------------------

LOSS_LOOP = """
from objectives import objective


def fit(net, opt, loader, crit, accum):
    for i, (x, y) in enumerate(loader):
        loss = objective(net, crit, x, y, accum)
        loss.backward()
        if (i + 1) % accum == 0:
            opt.step()
            opt.zero_grad()
"""


def test_a_loss_divided_by_a_in_another_modules_function_is_followed(tmp_path: Path) -> None:
    """The module that computes the loss performs no training event; a loop that takes its loss
    from it follows it there (its forward, its factor): no ACC103 for a division it cannot see."""
    objectives = "def objective(net, crit, x, y, accum):\n    return crit(net(x), y) / accum\n"
    assert findings(tmp_path, {"train.py": LOSS_LOOP, "objectives.py": objectives}) == []


def test_the_same_function_without_the_division_is_acc103(tmp_path: Path) -> None:
    objectives = "def objective(net, crit, x, y, accum):\n    return crit(net(x), y)\n"
    assert [code for _, code, _ in findings(tmp_path, {"train.py": LOSS_LOOP, "objectives.py": objectives})] \
        == ["ACC103"]
