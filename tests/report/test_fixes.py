"""``--fix``, ``--diff`` and ``--unsafe-fixes``: the codemods on the catalogue and the CLI contract."""

from __future__ import annotations

import difflib
import importlib.util
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from accumlint.files.writing import replace_file
from accumlint.fixes import APPLICABILITY, fix_applicability
from accumlint.pipeline import engine
from accumlint.run.apply_fixes import fix_source
from tests.cli_helpers import check_command as fix
from tests.shared_data import REPO

RULES = REPO / "rules"
FIXABLE_BAD = sorted(p for code in APPLICABILITY for p in RULES.glob(f"{code}-*/bad_*.py"))
GOOD = sorted(RULES.glob("*/good_*.py"))


def codes(path: Path | str, data: bytes | None = None) -> list[str]:
    data = Path(path).read_bytes() if data is None else data
    return [f.code for f in engine.check_source(str(path), data).findings]


def test_every_planned_rule_has_a_fix() -> None:
    assert APPLICABILITY == {
        "ACC001": "safe",
        "ACC006": "safe",
        "ACC101": "unsafe",
        "ACC201": "safe",
        "ACC304": "safe",
        "ACC990": "safe",  # the directive's comment edited, not a codemod
    }
    assert fix_applicability("acc101") == "unsafe" and fix_applicability("ACC002") is None
    assert len(FIXABLE_BAD) == 17


def _runnable(path: Path) -> bool:
    text = path.read_text(encoding="utf-8")
    needed = ["torch"] + [m for m in ("accelerate", "deepspeed", "lightning") if f"import {m}" in text or
                          f"from {m}" in text]
    return all(importlib.util.find_spec(m) is not None for m in needed)


@pytest.mark.parametrize("bad", FIXABLE_BAD, ids=lambda p: f"{p.parent.name[:6]}/{p.name}")
def test_fix_repairs_every_bad_example(bad: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code = bad.parent.name[:6]
    target = tmp_path / bad.name
    shutil.copy(bad, target)
    monkeypatch.chdir(tmp_path)
    assert code in codes(target)

    status, _, _ = fix("--fix", "--unsafe-fixes", "--output-format", "concise", bad.name)
    fixed = target.read_text(encoding="utf-8")
    compile(fixed, str(target), "exec")  # still parses
    assert code not in codes(target)  # the linter accepts it for that code
    assert status == (1 if codes(target) else 0)

    # only the fixed statements changed: every other line is byte-identical
    before = bad.read_text(encoding="utf-8").splitlines(keepends=True)
    after = target.read_text(encoding="utf-8").splitlines(keepends=True)
    changed = [line for line in difflib.unified_diff(before, after, n=0) if line[:1] in "+-"][2:]
    assert 1 <= len(changed) <= 5, changed

    # a second run changes nothing
    again = target.read_bytes()
    assert fix("--fix", "--unsafe-fixes", bad.name)[0] in (0, 1)
    assert target.read_bytes() == again

    if _runnable(target):  # and it runs (on CPU, a few seconds)
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        ran = subprocess.run([sys.executable, str(target)], capture_output=True, text=True, timeout=300, env=env)
        assert ran.returncode == 0, ran.stderr[-2000:]


@pytest.mark.parametrize("good", GOOD, ids=lambda p: f"{p.parent.name[:6]}/{p.name}")
def test_fix_changes_no_good_example(good: Path) -> None:
    data = good.read_bytes()
    result = fix_source(str(good), data, engine.ALL_RULES_INSTANCES, unsafe=True)
    assert result.fixed == data
    assert dict(result.applied) == {}


EXPECTED_DIFF = """\
--- a/train.py
+++ b/train.py
@@ -2,7 +2,7 @@
 optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\r
 assert len(loader) % 4 == 0\r
 for i, batch in enumerate(loader):\r
-    optimizer.zero_grad()\r
     (model(batch).mean() / 4).backward()\r
     if (i + 1) % 4 == 0:\r
         optimizer.step()\r
+        optimizer.zero_grad()\r
"""

SOURCE = (
    "import torch\r\n"
    "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\r\n"
    "assert len(loader) % 4 == 0\r\n"
    "for i, batch in enumerate(loader):\r\n"
    "    optimizer.zero_grad()\r\n"
    "    (model(batch).mean() / 4).backward()\r\n"
    "    if (i + 1) % 4 == 0:\r\n"
    "        optimizer.step()\r\n"
)


def test_diff_writes_nothing_and_exits_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_bytes(SOURCE.encode())
    status, out, err = fix("--diff", "train.py")
    assert status == 1
    assert out.replace("\r\n", "\n") == EXPECTED_DIFF.replace("\r\n", "\n").replace("\r", "")
    assert err == "Would fix 1 finding.\n"
    assert (tmp_path / "train.py").read_bytes() == SOURCE.encode()

    status, out, _ = fix("--fix", "train.py")
    assert status == 0
    assert out == "Found 1 finding (1 fixed, 0 remaining).\n"
    fixed = (tmp_path / "train.py").read_bytes()
    assert fixed.count(b"\r\n") == SOURCE.count("\r\n") and b"\n" not in fixed.replace(b"\r\n", b"")  # CRLF kept
    assert fixed.endswith(b"        optimizer.step()\r\n        optimizer.zero_grad()\r\n")
    assert fix("--diff", "train.py")[:2] == (0, "")  # nothing pending any more


def test_unsafe_fixes_only_on_request(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    bad = RULES / "ACC101-double-normalization" / "bad_accelerate_backward_divided.py"
    shutil.copy(bad, tmp_path / "train.py")
    status, out, err = fix("--fix", "--output-format", "concise", "train.py")
    assert status == 1
    assert (tmp_path / "train.py").read_bytes() == bad.read_bytes()
    assert err == "1 unsafe fix can be applied with the `--unsafe-fixes` option.\n"
    assert out.splitlines()[0].startswith("train.py:39:24: ACC101")
    status, out, _ = fix("--fix", "--unsafe-fixes", "--output-format", "concise", "train.py")
    assert (status, out) == (0, "Found 1 finding (1 fixed, 0 remaining).\n")
    assert b"loss = loss / ACCUMULATION_STEPS" not in (tmp_path / "train.py").read_bytes()


def test_fix_respects_selection_and_fixes_notebook_cells(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_bytes(SOURCE.encode())
    notebook = {
        "cells": [{"cell_type": "code", "metadata": {}, "outputs": [], "source": SOURCE.replace("\r\n", "\n")}],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    (tmp_path / "nb.ipynb").write_text(json.dumps(notebook), encoding="utf-8")
    before = (tmp_path / "nb.ipynb").read_bytes()
    assert fix("--fix", "--ignore", "ACC001", ".")[0] == 0
    assert (tmp_path / "train.py").read_bytes() == SOURCE.encode()
    assert (tmp_path / "nb.ipynb").read_bytes() == before
    status, out, _ = fix("--fix", "--output-format", "concise", ".")
    assert (status, out) == (0, "Found 2 findings (2 fixed, 0 remaining).\n")
    assert b"optimizer.zero_grad()\r\n" in (tmp_path / "train.py").read_bytes()
    # the cell's source stays one string, fixed as the .py file is (its own line ends)
    [cell] = json.loads((tmp_path / "nb.ipynb").read_bytes())["cells"]
    assert cell["source"] == (tmp_path / "train.py").read_bytes().decode().replace("\r\n", "\n")


def test_replace_file_keeps_the_mode_and_leaves_no_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "run.py"
    target.write_bytes(b"old\n")
    target.chmod(0o750)
    link = tmp_path / "link.py"
    link.symlink_to(target)
    replace_file(link, b"new\n")
    assert target.read_bytes() == b"new\n"
    assert link.is_symlink()
    assert stat.S_IMODE(target.stat().st_mode) == 0o750
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.py", "run.py"]


#: ACC006 on a counter of updates: its rule proposes `(step + 1) % A`, and the fixed file still
#: has the finding, so the fix fails verification
UNVERIFIED_FIX = b"""\
from transformers import Trainer

class ClipTrainer(Trainer):
    def training_step(self, model, inputs, num_items_in_batch=None):
        loss = super().training_step(model, inputs, num_items_in_batch)
        if (self.state.global_step + 1) % self.args.gradient_accumulation_steps == 0:
            self.log_grad_norms(model)
        return loss
"""


def test_a_report_shows_the_declared_fix_and_verification_has_the_last_word(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "trainer.py").write_bytes(UNVERIFIED_FIX)
    # the report: the rule's fix, not checked again
    status, out, _ = fix("--no-cache", "--output-format", "concise", "trainer.py")
    assert status == 1 and out.splitlines()[0].startswith("trainer.py:6:12: ACC006 [*] ")
    [finding] = json.loads(fix("--no-cache", "--output-format", "json", "trainer.py")[1])
    assert finding["fix"]["applicability"] == "safe" and finding["fix"]["edits"]
    # --show-fixes shows only verified fixes; --diff and --fix say why this one is not applied
    status, out, _ = fix("--no-cache", "--show-fixes", "--output-format", "concise", "trainer.py")
    assert out.splitlines()[0].startswith("trainer.py:6:12: ACC006 `self.state.global_step`")
    assert "fixable" not in out
    reason = "note: trainer.py:6:12: ACC006 fix not applied: the fixed file would not have fewer ACC006 findings\n"
    status, out, err = fix("--no-cache", "--diff", "trainer.py")
    assert (status, out, err) == (0, "", reason + "No fixes to apply.\n")
    status, out, err = fix("--no-cache", "--fix", "--output-format", "concise", "trainer.py")
    assert err == reason and (tmp_path / "trainer.py").read_bytes() == UNVERIFIED_FIX
    assert out.endswith("Found 1 finding.\n")  # after --fix, no [*]: its fix was just refused


def test_a_fix_that_reveals_what_its_code_masked_is_applied_only_as_unsafe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.shared_data import DATA

    case = DATA / "fix_cases" / "scheduler_each_microbatch.py"  # the shape of shared case 011
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_bytes(case.read_bytes())
    status, out, err = fix("--no-cache", "--fix", "--output-format", "concise", "train.py")
    assert err == ("note: train.py:26:17: ACC304 fix held back (applied with `--unsafe-fixes`): it reveals "
                   "ACC305, which ACC304 masked (fix that too)\n"
                   "1 unsafe fix can be applied with the `--unsafe-fixes` option.\n")
    assert out.endswith("1 fixable with `--fix --unsafe-fixes`.\n")
    assert (tmp_path / "train.py").read_bytes() == case.read_bytes()
    status, out, _ = fix("--no-cache", "--fix", "--unsafe-fixes", "--output-format", "concise", "train.py")
    # ACC005: the loop's epoch tail leaks (read off the simulated runs), before and after the fix alike
    assert sorted(codes(tmp_path / "train.py")) == ["ACC005", "ACC305"]
    fixed = (tmp_path / "train.py").read_text().splitlines()
    at = fixed.index("                scaler.step(optimizer)")
    assert fixed[at + 1:at + 3] == ["                if schedule is not None:", "                    schedule.step()"]


#: losses kept for one backward after the loop (ACC201's deferred group), the backward spelled three
#: ways: `.detach()` would leave that backward without a graph; the twin backpropagates each
#: microbatch and only prints the kept losses
_KEPT_FOR_A_BACKWARD = """\
import torch

def step(model, batches, optimizer, A):
    losses = []
    for _ in range(A):
        loss = model(next(batches)).sum()
        losses.append(loss){each}
    {after}
    optimizer.step()
"""


@pytest.mark.parametrize(("each", "after", "applicability"), [
    ("", "torch.stack(losses).sum().backward()", "unsafe"),
    ("", "total = torch.stack(losses).mean()\n    total.backward()", "unsafe"),
    ("", "torch.autograd.backward(sum(losses))", "unsafe"),
    ("\n        (loss / A).backward()", "print(torch.stack(losses).sum().item())", "safe"),
])
def test_the_acc201_fix_is_unsafe_where_the_kept_values_feed_a_backward(
        each: str, after: str, applicability: str) -> None:
    from tests.support import DEFAULT_RULES

    data = _KEPT_FOR_A_BACKWARD.format(each=each, after=after).encode()
    checked = engine.check_source("train.py", data, DEFAULT_RULES, suggest=True)
    [finding] = [f for f in checked.findings if f.code == "ACC201"]
    assert finding.line == 7
    assert checked.fixes[finding].applicability == applicability
    assert [e.content for e in checked.fixes[finding].edits] == ["        losses.append(loss.detach())\n"]


def test_the_acc201_fix_is_safe_where_only_the_owner_of_the_kept_values_reaches_a_backward() -> None:
    """``self.seen`` is kept; ``self`` also reaches the backward (through the scaler): not the kept values."""
    from tests.support import DEFAULT_RULES

    data = b"""\
class Loop:
    def run(self, batches, A):
        for i, batch in enumerate(batches):
            loss = self.model(batch).mean()
            self.scaler.scale(loss / A).backward()
            self.seen.append(loss)
            if (i + 1) % A == 0:
                self.scaler.step(self.opt)
                self.scaler.update()
                self.opt.zero_grad()
"""
    checked = engine.check_source("train.py", data, DEFAULT_RULES, suggest=True)
    [finding] = [f for f in checked.findings if f.code == "ACC201"]
    assert finding.line == 6
    assert checked.fixes[finding].applicability == "safe"
    assert [e.content for e in checked.fixes[finding].edits] == ["            self.seen.append(loss.detach())\n"]
