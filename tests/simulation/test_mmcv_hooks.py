"""mmcv 1.x runner hooks as a framework-owned loop (:data:`accumlint.frameworks.mmcv.RUNNER_HOOKS`):
an optimizer hook's ``after_train_iter`` is the microbatch body, called once per iteration with
``runner.iter`` 0-based across epochs (``every_n_iters`` tests ``runner.iter + 1``) and
``runner.outputs`` the iteration's forward outputs (field trial 54, reduction 08)."""

from __future__ import annotations

import libcst as cst
import pytest

from accumlint.model.module_functions import ModuleFunctions
from accumlint.model.simulation import simulate
from tests.support import check, lint, loop_reasons

#: a detection repository's custom optimizer hook; ``{divisor}``, ``{gate}`` and ``{update}``
#: (the update and the reset, indented under the gate or not) vary per twin
_HOOK = """
from mmcv.runner import HOOKS, OptimizerHook


@HOOKS.register_module()
class SlowOptimizerHook(OptimizerHook):
    def __init__(self, accumulation_steps=1, interval=1, grad_clip=None):
        self.accumulation_steps = accumulation_steps
        self.interval = interval
        self.grad_clip = grad_clip

    def after_train_iter(self, runner):
        scaled = runner.outputs["loss"] / {divisor}
        scaled.backward()
        if {gate}:
            if self.grad_clip is not None:
                self.clip_grads(runner.model.parameters())
{update}
"""

_GATED = "            runner.optimizer.step()\n            runner.optimizer.zero_grad()"
_UNGATED = "        runner.optimizer.step()\n        runner.optimizer.zero_grad()"
#: the update under no gate, the reset still under it
_STEP_OUTSIDE = "            runner.optimizer.zero_grad()\n        runner.optimizer.step()"

_EVERY_N = "self.every_n_iters(runner, self.accumulation_steps)"


def _hook(gate: str = _EVERY_N, update: str = _GATED, divisor: str = "self.accumulation_steps") -> str:
    return _HOOK.replace("{gate}", gate).replace("{update}", update).replace("{divisor}", divisor)


def _simulation(source: str):
    (result,) = simulate(ModuleFunctions(cst.parse_module(source)), "hooks.py")
    return result


def test_every_n_iters_gates_one_update_per_group() -> None:
    result = _simulation(_hook())
    assert result.decided, result.reasons()
    assert result.entry.description == ("`SlowOptimizerHook.after_train_iter`, called once per microbatch by "
                                        "mmcv's loop as a hook, with its iteration counts")
    assert lint(_hook(), "ALL") == []


def test_runner_iter_counts_across_epochs() -> None:
    """A = 2 over epochs of 5 microbatches: ``runner.iter`` is not restarted, so the third group
    takes the first epoch's last microbatch and the second epoch's first."""
    result = _simulation(_hook())
    (trace,) = [t for t in result.traces if (t.configuration.accumulation, t.configuration.microbatches,
                                              t.configuration.replicas) == (2, 5, 1)]
    assert trace.updates_at() == [(0, 1), (0, 3), (1, 0), (1, 2), (1, 4)]


def test_every_n_inner_iters_restarts_with_each_epoch() -> None:
    result = _simulation(_hook(gate="self.every_n_inner_iters(runner, self.accumulation_steps)"))
    assert result.decided, result.reasons()
    (trace,) = [t for t in result.traces if (t.configuration.accumulation, t.configuration.microbatches,
                                              t.configuration.replicas) == (2, 5, 1)]
    assert trace.updates_at() == [(0, 1), (0, 3), (1, 1), (1, 3)]


@pytest.mark.parametrize("update", [_UNGATED, _STEP_OUTSIDE], ids=["no gate", "step outside the gate"])
def test_an_update_on_every_microbatch_of_a_divided_loss_is_found(update: str) -> None:
    assert lint(_hook(update=update), "ALL") == [("ACC004", 18 if update is _UNGATED else 19)]


def test_runner_iter_read_as_one_based_is_an_irregular_boundary() -> None:
    # `runner.iter` is 0 on the first iteration: `% A == 0` updates after each group's first microbatch
    assert lint(_hook(gate="runner.iter % self.accumulation_steps == 0"), "ALL") == [("ACC006", 15)]
    assert lint(_hook(gate="(runner.iter + 1) % self.accumulation_steps == 0"), "ALL") == []


def test_a_gate_on_another_interval_than_the_divisor_is_decided() -> None:
    """No rule compares a divisor with another run-level interval (a plain loop's ``loss / A`` under
    ``(i + 1) % k`` is silent too); the loop is decided with A bound to the gate's interval."""
    source = _hook(gate="self.every_n_iters(runner, self.interval)")
    result = _simulation(source)
    assert result.decided, result.reasons()
    assert {t.configuration.accumulation for t in result.traces} == {1, 2, 4}
    assert lint(source, "ALL") == []


@pytest.mark.parametrize("first", [True, False], ids=["logger first", "logger last"])
def test_the_backpropagating_hook_stands_for_the_loop(first: bool) -> None:
    """A logging hook in the same module does not take the optimizer hook's place."""
    logger = ("\n\nclass LossLogger(Hook):\n    def after_train_iter(self, runner):\n"
              "        print(runner.outputs[\"loss\"])\n")
    source = _hook().replace("HOOKS, OptimizerHook", "HOOKS, Hook, OptimizerHook")
    source = source.replace("\n\n@HOOKS", logger + "\n\n@HOOKS", 1) if first else source + logger
    assert _simulation(source).decided
    assert lint(source, "ALL") == []


def test_statistics_count_the_hook_decided_and_another_packages_undecided() -> None:
    """``--statistics`` counts the loop decided; the same hook on a base class of a package that
    is not mmcv stays undecided (its caller's counters are not known)."""
    assert loop_reasons(check(_hook(), "ALL").loops) == [()]
    other = _hook().replace("from mmcv.runner import", "from detlib.runner import")
    assert "mmcv" not in _simulation(other).entry.description
    (reasons,) = loop_reasons(check(other, "ALL").loops)
    assert any("runner" in reason for reason in reasons), reasons
