"""Reduced shapes from field trial 43 (second set): a training class in one module whose loop is
run by a script in another module, rewritten as small synthetic snippets (no fetched code).

- a runner class whose micro-loop backwards an undivided loss: since the constructor's arguments
  are read across modules, ACC103 is also reported at the script's call of the runner; a
  `# noqa: ACC103` at the backward (the opt-out the rule's help names) must silence that copy too;
- the same opt-out for a tail verdict that the caller's simulation finds (ACC005), which the
  trainer's own check reports at its gate, and the caller's call no longer repeats.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from tests.project.test_interprocedural import _TRAINER
from tests.support import findings

RUNNER = """
class Runner:
    def __init__(self, cfg, net, opt, data):
        self.cfg, self.net, self.opt, self.data = cfg, net, opt, data

    def run(self):
        for batch in self.data:
            for k in range(self.cfg.micro_steps):
                out = self.net(batch[k])
                out.backward(){noqa}
            self.opt.step()
            self.opt.zero_grad()
"""

SCRIPT = """
from runner import Runner

def main(cfg, net, opt, data):
    Runner(cfg, net, opt, data).run()
"""


def test_the_runner_module_alone_reports_its_undivided_loss(tmp_path: Path) -> None:
    # the micro-loop's bound is A; the loss reaches backward undivided
    assert findings(tmp_path, {"runner.py": RUNNER.format(noqa="")}) == [("runner.py", "ACC103", 10)]


def test_a_noqa_at_the_backward_silences_the_whole_tree(tmp_path: Path) -> None:
    files = {"runner.py": RUNNER.format(noqa="  # noqa: ACC103"), "train.py": SCRIPT}
    assert findings(tmp_path, files) == []


# the trainer of the cross-module caller tests, with a place for a noqa at its gate
TRAINER = textwrap.dedent(_TRAINER).replace("% self.accum == 0:", "% self.accum == 0:{noqa}")

FIT_SCRIPT = """
from trainer import Trainer

def main(model, optimizer, loader, accum):
    Trainer(model, optimizer, loader, accum).fit(3)

if __name__ == "__main__":
    main(*build())
"""


def test_the_tail_is_reported_at_the_gate_once(tmp_path: Path) -> None:
    # the trainer's own check runs the loop with what the script passes, and finds the tail there: the
    # script's call does not repeat it (checked alone, it would)
    files = {"trainer.py": TRAINER.format(noqa=""), "train.py": FIT_SCRIPT}
    assert findings(tmp_path, files) == [("trainer.py", "ACC005", 10)]


def test_a_noqa_at_the_gate_silences_the_callers_copy(tmp_path: Path) -> None:
    files = {"trainer.py": TRAINER.format(noqa="  # noqa: ACC005"), "train.py": FIT_SCRIPT}
    assert findings(tmp_path, files) == []
