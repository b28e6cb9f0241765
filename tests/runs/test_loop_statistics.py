"""``check --statistics`` counts the accumulation loops the simulator decided and, by reason, those
it left undecided: from the workers, from the cache, in text and in JSON."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from accumlint.report.output.text import loop_statistics, reason_kind
from accumlint.run import cache
from accumlint.spec.findings import LoopVerdict
from tests.cli_helpers import cli
from tests.runs.test_cache import spy_checks

#: decided: A is `accumulation_steps`, the update applies groups of A microbatches
DECIDED = """\
import torch

model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = [torch.randn(8, 4) for _ in range(16)]
accumulation_steps = 4

for i, batch in enumerate(loader):
    loss = model(batch).mean() / accumulation_steps
    loss.backward()
    if (i + 1) % accumulation_steps == 0:
        optimizer.step()
        optimizer.zero_grad()
"""
#: undecided: whether a backpropagated microbatch's group is updated depends on its data (a skip
#: before the backward is a skipped microbatch, the exceptional path: decided)
UNDECIDED = """\
def train(model, loader, optimizer, accumulation_steps):
    for i, batch in enumerate(loader):
        loss = model(batch).mean() / accumulation_steps
        loss.backward()
        if loss.item() > 10.0:
            continue
        if (i + 1) % accumulation_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
"""
#: not an accumulation loop: it updates after every microbatch
PLAIN = """\
for batch in loader:
    loss = model(batch).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
"""
#: not an accumulation loop: straight-line code, one backward and one update, no loop at all
STRAIGHT = """\
import torch

net = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
net(torch.randn(2, 4)).sum().backward()
opt.step()
"""
#: one loop, counted once: `one_epoch`'s loop is decided by the runs of `main`, which calls it
#: with A = 4 (its own runs, with A unknown, leave it to them)
CALLED = """\
def one_epoch(model, loader, optimizer, accumulation_steps):
    for i, batch in enumerate(loader):
        (model(batch).mean() / accumulation_steps).backward()
        if (i + 1) % accumulation_steps == 0:
            optimizer.step()
            optimizer.zero_grad()


def main(model, loader, optimizer):
    for epoch in range(2):
        one_epoch(model, loader, optimizer, 4)
"""
REASON = "the condition `…` on the microbatch's data decides an event"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(cache.CACHE_DIR_ENV, raising=False)
    for name, text in {"decided.py": DECIDED, "undecided.py": UNDECIDED, "plain.py": PLAIN,
                       "called.py": CALLED, "straight.py": STRAIGHT}.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    return tmp_path


def test_statistics_count_the_loops_decided_and_undecided_by_reason(project: Path) -> None:
    # ACC001 alone: no finding in these files, the loops are counted all the same
    text = cli("check", "--no-cache", "--statistics", "--select", "ACC001", ".")
    assert text.exit_code == 0, text.output
    assert text.stdout.splitlines() == ["Accumulation loops: 2 decided, 1 undecided", f"1\tundecided: {REASON}"]
    as_json = cli("check", "--no-cache", "--statistics", "--select", "ACC001", "--output-format", "json", ".")
    assert json.loads(as_json.stdout) == {"findings": [], "accumulation_loops": {
        "decided": 2, "undecided": 1, "reasons": [{"reason": REASON, "count": 1}]}}


def test_a_cached_file_still_counts_its_loops(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    checked = spy_checks(monkeypatch, project)
    (project / "other.py").write_text(UNDECIDED.replace("10.0", "20.0"), encoding="utf-8")
    expected = ["Accumulation loops: 2 decided, 2 undecided", f"2\tundecided: {REASON}"]
    cold = cli("check", "--jobs", "2", "--statistics", "--select", "ACC001", ".")
    assert (cold.stdout.splitlines(), len(checked.names())) == (expected, 6)
    checked.clear()
    warm = cli("check", "--jobs", "2", "--statistics", "--select", "ACC001", ".")
    assert (warm.stdout.splitlines(), checked.names()) == (expected, [])


#: one loop in a module of its own (`one_epoch` of CALLED), started by two scripts: three entry points, one loop
FIT = CALLED.split("\n\n\ndef main")[0] + "\n"
STARTS_FIT = """\
import torch

from trainer import one_epoch

model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
one_epoch(model, [torch.randn(8, 4) for _ in range(16)], optimizer, ACCUMULATION)
"""


def test_a_loop_that_several_scripts_start_counts_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "trainer.py").write_text(FIT, encoding="utf-8")
    for name, a in (("pretrain.py", "4"), ("finetune.py", "8")):
        (tmp_path / name).write_text(STARTS_FIT.replace("ACCUMULATION", a), encoding="utf-8")
    result = cli("check", "--no-cache", "--statistics", ".")
    assert result.stdout.splitlines() == ["Accumulation loops: 1 decided, 0 undecided"]
    # a loop of its own in another file still counts
    (tmp_path / "decided.py").write_text(DECIDED, encoding="utf-8")
    result = cli("check", "--no-cache", "--statistics", ".")
    assert result.stdout.splitlines() == ["Accumulation loops: 2 decided, 0 undecided"]


def test_a_loop_is_decided_where_one_of_its_entry_points_decides_it() -> None:
    here, there = (("/p/trainer.py", 4), ("/p/trainer.py", 6)), (("/p/other.py", 3),)
    assert loop_statistics([LoopVerdict(here, ("first",)), LoopVerdict(here, ()), LoopVerdict(here, ("second",))]) \
        == (1, 0, [])
    assert loop_statistics([LoopVerdict(here, ("first",)), LoopVerdict(there, ("first",)),
                            LoopVerdict(here, ("second",))]) == (0, 2, [("first", 2), ("second", 1)])
    # no sites (a file the check could not name): each verdict is a loop of its own
    assert loop_statistics([LoopVerdict((), ()), LoopVerdict((), ("first",))]) == (1, 1, [("first", 1)])


def test_a_reason_counts_whatever_code_it_quotes() -> None:
    assert reason_kind("the condition `x > 1` depends on `flag`, which a caller the project does not show "
                       "computes") == "the condition `…` depends on `…`, which a caller the project does not show " \
                                     "computes"
    assert reason_kind("its caller, the entry 'main', runs it") == "its caller, the entry '…', runs it"
    assert reason_kind("calls nest deeper than 12 at `f`") == "calls nest deeper than 12 at `…`"
    # an apostrophe is no quote
    reason = "no run reached a backward (the loop's events stay out of the simulation's reach)"
    assert reason_kind(reason) == reason


TRAIN_FLAG_AMONG_SETTINGS = """
    import torch


    def main(args, model, optimizer, loader, eval_loader):
        if args.fp16:
            dtype = torch.float16
        else:
            dtype = torch.float32
        for epoch in range(args.epochs):
            if args.do_train:
                model.train()
                for step, batch in enumerate(loader):
                    loss = model(batch.to(dtype)) / args.accum
                    loss.backward()
                    if step % args.accum == 0:
                        optimizer.step()
                        optimizer.zero_grad()
            if args.do_eval:
                model.eval()
                for batch in eval_loader:
                    model(batch)
            if args.save_every_epoch:
                saved = epoch
            else:
                saved = None
        if args.output_dir is not None:
            path = args.output_dir
        else:
            path = "out"
"""


def test_check_runs_the_branch_that_trains_first(tmp_path: Path) -> None:
    # `check` simulates a few runs per configuration: a run-level flag whose only branch with a
    # backward is its body (`if args.do_train:`) takes that branch first, or the runs spent on
    # the later settings all skip training ("no run reached a backward")
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent(TRAIN_FLAG_AMONG_SETTINGS))
    result = cli("check", "--no-cache", "--statistics", str(path))
    assert "Accumulation loops: 1 decided, 0 undecided" in result.stdout.splitlines()
    assert "irregular-update-boundary" in result.stdout  # the 0-based gate's first group of one
