"""A loop that reaches its backward and its optimizer update only through an object of another
module that relays to an object of a third (a trainer built with the optimizer wrapper that
steps, a helper function handed that wrapper). The relay's module calls no backward itself, so
the project index does not follow it by name: the object it is handed makes it part of the loop.
Trial 69 (VAR's trainer and its optimizer wrapper) showed the shape; these are its family."""

from __future__ import annotations

import textwrap
from pathlib import Path

from accumlint.report.output.text import loop_statistics
from accumlint.run import runner
from accumlint.settings.config import Settings
from tests.support import EVERY_CODE, findings, line_of, tree

#: resets the gradients before every backward: ACC001 wherever a group holds two backwards
STEPPER = """
class Stepper:
    def __init__(self, optimizer, every):
        self.optimizer, self.share = optimizer, 1 / every

    def backward_and_maybe_update(self, loss, last):
        self.optimizer.zero_grad()
        (loss * self.share).backward()
        if last:
            self.optimizer.step()
"""
#: resets after the update: right
GOOD_STEPPER = """
class Stepper:
    def __init__(self, optimizer, every):
        self.optimizer, self.share = optimizer, 1 / every

    def backward_and_maybe_update(self, loss, last):
        (loss * self.share).backward()
        if last:
            self.optimizer.step()
            self.optimizer.zero_grad()
"""
RELAY = """
class Relay:
    def __init__(self, net, stepper):
        self.net = net
        self.stepper = stepper

    def one(self, x, last):
        self._through(self.net(x).pow(2).mean(), last)

    def _through(self, loss, last):
        self.stepper.backward_and_maybe_update(loss, last)
"""
SCRIPT = """
import torch
from relay import Relay
from stepper import Stepper

every = 4
net = torch.nn.Linear(4, 1)
BUILD
for i, x in enumerate(torch.randn(8, 2, 4)):
    relay.one(x, last=(i + 1) % every == 0)
"""
IN_PLACE = "relay = Relay(net, Stepper(torch.optim.SGD(net.parameters(), lr=0.1), every))"
BY_NAME = "stepper = Stepper(torch.optim.SGD(net.parameters(), lr=0.1), every)\nrelay = Relay(net, stepper)"
BY_KEYWORD = "relay = Relay(stepper=Stepper(torch.optim.SGD(net.parameters(), lr=0.1), every), net=net)"

FUNCTION_RELAY = """
def one_microbatch(stepper, net, x, last):
    stepper.backward_and_maybe_update(net(x).pow(2).mean(), last)
"""
FUNCTION_SCRIPT = """
import torch
from relay import one_microbatch
from stepper import Stepper

every = 4
net = torch.nn.Linear(4, 1)
stepper = Stepper(torch.optim.SGD(net.parameters(), lr=0.1), every)
for i, x in enumerate(torch.randn(8, 2, 4)):
    one_microbatch(stepper, net, x, (i + 1) % every == 0)
"""


def _project(stepper: str, relay: str, script: str) -> dict[str, str]:
    return {"stepper.py": textwrap.dedent(stepper), "relay.py": textwrap.dedent(relay),
            "run.py": textwrap.dedent(script)}


def _loops(root: Path, files: dict[str, str]) -> tuple[int, int]:
    run = runner.check_files(tree(root, files), Settings(project_root=root), EVERY_CODE, jobs=1)
    decided, undecided, _ = loop_statistics(run.loops)
    return decided, undecided


def test_a_reset_reached_through_a_relay_object_is_acc001_however_it_is_built(tmp_path: Path) -> None:
    for number, build in enumerate((IN_PLACE, BY_NAME, BY_KEYWORD)):
        root = tmp_path / str(number)
        files = _project(STEPPER, RELAY, SCRIPT.replace("BUILD", build))
        assert findings(root, files) == [("run.py", "ACC001", line_of(files["run.py"], "relay.one("))], build


def test_a_relay_function_handed_the_stepper_is_part_of_the_loop(tmp_path: Path) -> None:
    files = _project(STEPPER, FUNCTION_RELAY, FUNCTION_SCRIPT)
    assert [code for _, code, _ in findings(tmp_path, files)] == ["ACC001"]


def test_the_right_stepper_behind_a_relay_is_silent_and_decided(tmp_path: Path) -> None:
    files = _project(GOOD_STEPPER, RELAY, SCRIPT.replace("BUILD", BY_NAME))
    assert findings(tmp_path / "a", files) == []
    assert _loops(tmp_path / "b", files) == (1, 0)


def test_two_scripts_with_their_own_loops_over_one_stepper_are_two_loops(tmp_path: Path) -> None:
    files = _project(GOOD_STEPPER, FUNCTION_RELAY, FUNCTION_SCRIPT)
    files["other.py"] = files["run.py"].replace("every = 4", "every = 2")
    assert _loops(tmp_path, files) == (2, 0)
