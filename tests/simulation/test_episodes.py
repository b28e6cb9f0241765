"""Loops over an environment's episodes: the data decides when an episode ends.

A reinforcement-learning driver steps an environment until it reports the episode done
(``while not done:``, or ``if done: break`` inside a loop over a fixed horizon), acting with the
trained network, and trains after the episode or the horizon. The steps between two training
calls run no training event, so where the episode ends changes no group: the runs take two
passes of such a loop and its way out, and an environment's ``obs, reward, done = env.step(a)``
inside a microbatch's iteration is no update. Before, each of these left the loop undecided
("the condition `done` ... decides an event", or a budget spent on an episode that never ended).
"""

from __future__ import annotations

from pathlib import Path

from accumlint.model.simulation import simulate
from tests.precision.test_trial44_b import loop_statistics
from tests.support import line_of, lint, model_of

#: a policy trained after each horizon of environment steps; `{reset}` is its reset
HORIZON = """
import torch


class Agent(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 2)
        self.seen = []
        self.optimizer = torch.optim.Adam(self.parameters(), lr=1e-3)

    def act(self, obs):
        return torch.softmax(self.fc(obs), dim=-1)

    def train_net(self):
        states = torch.tensor(self.seen)
        for _ in range(3):
            loss = -self.act(states).mean()
{reset}            loss.backward()
            self.optimizer.step()
        self.seen = []


def main(env):
    agent = Agent()
    for episode in range(10000):
        obs = env.reset()
        done = False
        while not done:
            for t in range(20):
                chosen = agent.act(torch.as_tensor(obs)).argmax().item()
                obs, reward, done = env.step(chosen)
                agent.seen.append((obs, chosen, reward))
                if done:
                    break
            agent.train_net()
"""

#: a policy gradient: one backward per step of the episode, one update after it
EPISODE = """
import torch


def main(env, policy, optimizer, episodes):
    for episode in range(episodes):
        obs, done, kept = env.reset(), False, []
        while not done:
            probs = policy(torch.as_tensor(obs))
            action = torch.multinomial(probs, 1).item()
            obs, reward, done = env.step(action)
            kept.append((reward, probs[action]))
{reset}        returned = 0.0
        for reward, prob in reversed(kept):
            returned = reward + 0.99 * returned
            (-torch.log(prob) * returned).backward()
        optimizer.step()
"""

RESET = "            self.optimizer.zero_grad()\n"


def test_a_break_when_the_episode_ends_inside_the_horizon_leaves_the_loop_decided(tmp_path: Path) -> None:
    assert lint(HORIZON.format(reset=RESET), "ALL") == []
    # (as `explain` runs it: `check` simulates no loop without a gated update)
    simulations = simulate(model_of(HORIZON.format(reset=RESET)).functions, "")
    (driver,) = [s for s in simulations if s.entry.name == "main"]
    assert driver.decided, driver.reasons()
    assert not any(trace.accumulates() for trace in driver.traces)
    assert loop_statistics(tmp_path, {"train.py": HORIZON.format(reset=RESET)}) == []  # no accumulation loop


def test_the_horizon_loop_without_a_reset_is_acc002() -> None:
    source = HORIZON.format(reset="")
    assert lint(source, "ALL") == [("ACC002", line_of(source, "self.optimizer.step()"))]


def test_an_episode_collected_until_done_then_trained_is_decided_and_silent(tmp_path: Path) -> None:
    source = EPISODE.format(reset="        optimizer.zero_grad()\n")
    assert lint(source, "ALL") == []
    assert loop_statistics(tmp_path, {"train.py": source}) == ["Accumulation loops: 1 decided, 0 undecided"]


def test_an_episode_trained_without_a_reset_is_acc002() -> None:
    source = EPISODE.format(reset="")
    assert lint(source, "ALL") == [("ACC002", line_of(source, "optimizer.step()"))]
