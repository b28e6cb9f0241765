"""The resume offset as a configuration (``shared/docs/semantic-core.md`` section 2, "two epochs,
a resume offset"): a start epoch or a counter's first value read from what ``torch.load``
returned is open in the run that resumes, and only there. That run is left out of its
configuration with a note, and the fresh runs decide, instead of the whole entry staying
undecided; where every run resumes, nothing decides and the entry stays silent. A helper of another
module that loads the checkpoint (and performs no training event) is followed for it."""

from __future__ import annotations

import pytest

from accumlint.commands.explain import render_text
from tests.simulation.test_simulation import only
from tests.support import findings, lint

#: a start epoch a helper returns beside the optimizer (0 unless resuming); ``{gate}`` the update's
#: condition on ``seen``, the microbatches seen since the first epoch; the epoch loop calls the
#: epoch's own function, so its first epoch is not fixed by the loop itself
_HELPER_TUPLE = """
import torch


def restore(net, path):
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    first = 0
    if path:
        saved = torch.load(path)
        opt.load_state_dict(saved["opt"])
        first = saved["epoch"] + 1
    return opt, first


def one_epoch(net, opt, batches, epoch, accum):
    for k, x in enumerate(batches):
        seen = k + epoch * len(batches)
        (net(x).pow(2).mean() / accum).backward()
        if {gate}:
            opt.step()
            opt.zero_grad()


def fit(cfg, net, batches):
    opt, first = restore(net, cfg.resume)
    for epoch in range(first, cfg.epochs):
        one_epoch(net, opt, batches, epoch, cfg.accum)
"""

#: a microbatch counter restored in a resume branch; ``{gate}`` the update's condition on it
_RESTORED_COUNTER = """
import torch


def train(args, net, loader):
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    global_step = 0
    if args.resume:
        ckpt = torch.load(args.resume)
        net.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["opt"])
        global_step = ckpt["step"]
    for epoch in range(args.epochs):
        for x in loader:
            (net(x).mean() / args.accum).backward()
            if {gate}:
                opt.step()
                opt.zero_grad()
            global_step += 1
"""

#: a resume that skips the microbatches of the current epoch it already trained (the metamorphic
#: "resume continue" shape); the loader holds whole groups
_RESUME_SKIP = """
import torch


def train(args, net, loader):
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    start_epoch, skip = 0, 0
    if args.resume:
        ckpt = torch.load(args.resume)
        opt.load_state_dict(ckpt["opt"])
        start_epoch = ckpt["epoch"]
        skip = ckpt["microbatch"]
    assert len(loader) % args.accum == 0
    for epoch in range(start_epoch, args.epochs):
        for i, x in enumerate(loader):
            if epoch == start_epoch and i < skip:
                continue
            (net(x).mean() / args.accum).backward()
            if {gate}:
                opt.step()
                opt.zero_grad()
"""


@pytest.mark.parametrize(("source", "gate", "line"), [
    (_HELPER_TUPLE, "seen % accum == 0", 19),
    (_RESTORED_COUNTER, "global_step % args.accum == 0", 16),
    (_RESUME_SKIP, "i % args.accum == 0", 19),
])
def test_a_zero_based_gate_beside_a_resume_is_found_through_the_fresh_runs(source: str, gate: str, line: int) -> None:
    assert lint(source.replace("{gate}", gate)) == [("ACC006", line)]


@pytest.mark.parametrize(("source", "gate"), [
    (_HELPER_TUPLE, "(seen + 1) % accum == 0"),
    (_RESTORED_COUNTER, "(global_step + 1) % args.accum == 0"),
    (_RESUME_SKIP, "(i + 1) % args.accum == 0"),
])
def test_a_correct_loop_with_a_resume_stays_silent(source: str, gate: str) -> None:
    assert lint(source.replace("{gate}", gate), "ALL") == []


def test_the_resumed_run_is_left_out_and_the_fresh_runs_decide() -> None:
    result = only(_RESTORED_COUNTER.replace("{gate}", "global_step % args.accum == 0"))
    assert result.decided
    # every configuration keeps its fresh run only: the resumed one's first gate reads the restored count
    assert {dict(t.choices).get("args.resume") for t in result.traces} == {False}
    assert all(any(n.startswith("resumed runs left out: 1 run(s) start where a checkpoint says") for n in t.notes)
               for t in result.traces)


def test_explain_says_which_resumed_runs_it_left_out() -> None:
    result = only(_RESTORED_COUNTER.replace("{gate}", "global_step % args.accum == 0"))
    text = render_text("train.py", [result])
    assert "train.py:13: loop in `train` — decided" in text
    assert ("  note: resumed runs left out: 1 run(s) start where a checkpoint says (the condition "
            "`global_step % args.accum == 0` counts from `ckpt['step']`, where the resumed run starts, which a "
            "checkpoint holds); the fresh runs decide") in text.splitlines()


def test_runs_that_all_resume_decide_nothing() -> None:
    # the count always comes from a checkpoint: no fresh run, so the open start stays undecided and silent
    always = _RESTORED_COUNTER.replace("    if args.resume:\n", "    if True:\n")
    source = always.replace("{gate}", "global_step % args.accum == 0")
    assert lint(source, "ALL") == []
    result = only(source)
    assert not result.decided
    assert any("where the resumed run starts, which a checkpoint holds" in reason for reason in result.reasons())


def test_an_open_start_not_read_from_a_checkpoint_still_leaves_the_entry_undecided() -> None:
    # the start epoch is a setting (`cfg.first`) in every run: no fresh run stands apart from it
    source = _HELPER_TUPLE.replace("{gate}", "seen % accum == 0").replace(
        "range(first, cfg.epochs)", "range(cfg.first, cfg.epochs)")
    assert lint(source, "ALL") == []
    result = only(source)
    assert not result.decided
    assert not any("resumed runs left out" in note for t in result.traces for note in t.notes)


#: the helper that loads the checkpoint in a module of its own, which performs no training event
_SOLVER = """
import torch


def build_optimizer(net, resume):
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    start_epoch = 0
    if resume:
        ckpt = torch.load(resume)
        opt.load_state_dict(ckpt.pop("optimizer"))
        start_epoch = ckpt.pop("epoch") + 1
    return opt, start_epoch
"""

#: a trainer that gets its optimizer and start epoch from that helper in its constructor
_TRAINER = """
from solver.optim import build_optimizer


class Trainer:
    def __init__(self, args, net, loader):
        self.args, self.net, self.loader = args, net, loader
        self.optimizer, self.start_epoch = build_optimizer(net, args.resume)
        self.epoch = 0

    def train(self):
        for epoch in range(self.start_epoch, self.args.epochs):
            self.epoch = epoch
            self.train_one_epoch()

    def train_one_epoch(self):
        for i, x in enumerate(self.loader):
            ni = i + self.epoch * len(self.loader)
            (self.net(x).mean() / self.args.accum).backward()
            if {gate}:
                self.optimizer.step()
                self.optimizer.zero_grad()
"""


@pytest.mark.parametrize(("gate", "expected"), [
    ("ni % self.args.accum == 0", [("engine.py", "ACC006", 20)]),
    ("(ni + 1) % self.args.accum == 0", []),
])
def test_a_start_epoch_from_a_checkpoint_helper_of_another_module(tmp_path, gate: str,
                                                                   expected: list[tuple[str, str, int]]) -> None:
    # the helper performs no event, yet it is followed (it loads a checkpoint): its fresh runs start at 0
    files = {"pyproject.toml": "[project]\nname = 'p'\n", "solver/__init__.py": "", "solver/optim.py": _SOLVER,
             "engine.py": _TRAINER.replace("{gate}", gate)}
    assert findings(tmp_path, files) == expected


#: the whole training phase behind a test of where the run starts: a helper returns 0 for a fresh run and
#: `ckpt.get("epoch", -1) + 1` of a checkpoint; a run that starts past the last epoch trains nothing
_FINISHED_GUARD = """
import argparse
import torch


def resume_point(path, net):
    if not path:
        return 0
    ckpt = torch.load(path)
    net.load_state_dict(ckpt["net"])
    return ckpt.get("epoch", -1) + 1


def one_epoch(net, opt, loader, accum):
    opt.zero_grad()
    for k, x in enumerate(loader):
        (net(x).pow(2).mean() / accum).backward()
        if {gate}:
            opt.step()
            opt.zero_grad()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--resume", default="")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--accum", type=int, default=4)
    args = parser.parse_args()
    net = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    loader = torch.utils.data.DataLoader(list(range(8)))
    start = resume_point(args.resume, net)
    if start >= args.epochs:
        print("finished already")
    else:
        for epoch in range(start, args.epochs):
            one_epoch(net, opt, loader, args.accum)
"""


def test_a_checkpoint_default_is_where_the_run_resumes_not_a_setting() -> None:
    # `ckpt.get("epoch", -1)` of a loaded checkpoint is no run-level constant (-1 + 1 would be a counter
    # meeting `args.epochs`, "a training phase of its own"): the guard is a run-level test, the loop decided;
    # the 0-based gate is ACC006, and the tail the reset at each epoch's start drops is ACC005 beside it
    # (judged in the runs of two epochs: a resumed run with one left is no run of it)
    assert lint(_FINISHED_GUARD.replace("{gate}", "k % accum == 0")) == [("ACC005", 18), ("ACC006", 18)]
    assert lint(_FINISHED_GUARD.replace("{gate}", "(k + 1) % accum == 0"), "ALL") == []
    assert only(_FINISHED_GUARD.replace("{gate}", "(k + 1) % accum == 0")).decided
