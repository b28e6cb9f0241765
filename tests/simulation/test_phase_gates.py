"""A gate that starts a training phase of its own is no group boundary, for the patterns too.

An off-policy agent (field trial 62) updates its critic on every environment step and, every
``policy_every`` steps, runs a loop of ``policy_every`` actor updates, each with its own reset,
backward and update. The simulation finds that gate to start a training phase of its own and
shows the first phase and ends (a phase it cannot show whole leaves the loop open); the reading of
the code took the same gate for the update's boundary and reported its 0-based test (ACC006). Where
the runs say what a gate starts, that reading yields; the groups inside the phase are judged.
"""

from __future__ import annotations

import pytest

from tests.support import line_of, lint

DELAYED_POLICY = """
import torch
import torch.nn.functional as F


def train(actor, critic, q_opt, pi_opt, replay, env, cfg):
    obs = env.reset()
    for step in range(cfg.total):
        {act}
        obs = env.step(action)
        replay.add(obs, action)
        if step > cfg.warmup:
            data = replay.sample(cfg.batch)
            q_loss = F.mse_loss(critic(data.obs, data.act), data.target)
            q_opt.zero_grad()
            q_loss.backward()
            q_opt.step()
            if step % cfg.policy_every == 0:
{policy}
"""

PHASE = """                for _ in range(cfg.policy_every):
                    pi_loss = -critic(data.obs, actor(data.obs)).mean()
                    pi_opt.zero_grad()
                    pi_loss.backward()
                    pi_opt.step()"""

#: the twin: the actor's loss backpropagated on every step, its update alone under the 0-based gate
ACCUMULATED = """
import torch
import torch.nn.functional as F


def train(actor, critic, q_opt, pi_opt, replay, env, cfg):
    obs = env.reset()
    for step in range(cfg.total):
        data = replay.sample(cfg.batch)
        pi_loss = -critic(data.obs, actor(data.obs)).mean() / cfg.policy_every
        pi_loss.backward()
        if step % cfg.policy_every == 0:
            pi_opt.step()
            pi_opt.zero_grad()
"""


ACTING = "action = actor(torch.as_tensor(obs)).detach().numpy()"
#: random actions until the warm-up ends: the threshold then also gates the actor's phase
RANDOM_FIRST = """if step < cfg.warmup:
            action = env.sample()
        else:
            action = actor(torch.as_tensor(obs)).detach().numpy()"""


@pytest.mark.parametrize("act", [ACTING, RANDOM_FIRST], ids=["acting", "random-first"])
def test_a_delayed_policy_phase_under_a_zero_based_gate_is_silent(act: str) -> None:
    assert lint(DELAYED_POLICY.format(act=act, policy=PHASE), "ALL") == []


def test_a_zero_based_gate_over_an_accumulated_update_is_acc006() -> None:
    assert [code for code, _ in lint(ACCUMULATED, "ALL")] == ["ACC006"]


#: a learning phase every `learn_every` environment steps that gathers `accum` replayed batches per update
ACCUMULATING_PHASE = """
def run(env, agent, opt, steps, learn_every, memory, accum):
    for t in range(steps):
        memory.add(env.step(agent.act()))
        if t % learn_every == 0:
            for i, batch in enumerate(memory.batches()):
                loss = agent.loss(batch) / accum
                loss.backward()
                if {test}:
                    opt.step()
                    opt.zero_grad()
"""


def test_the_groups_inside_a_training_phase_are_judged() -> None:
    """The runs show the first phase: a 0-based test in it closes the first group after one batch."""
    source = ACCUMULATING_PHASE.format(test="i % accum == 0")
    assert lint(source, "ALL") == [("ACC006", line_of(source, "if i % accum == 0:"))]


def test_the_right_groups_inside_a_training_phase_are_silent() -> None:
    assert lint(ACCUMULATING_PHASE.format(test="(i + 1) % accum == 0"), "ALL") == []
