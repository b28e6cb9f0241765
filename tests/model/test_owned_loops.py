"""Framework-owned loops (``accumlint/model/owned_loops.py``): the ``cb_`` family of
../shared/patterns, and reduced cases of our own in ``tests/data/owned_loops`` (and
``owned_loops_field``, from the field trial) whose first line
says what they must report (``# expect: ACC001 line 18 -- why`` or ``# expect: nothing -- why``),
every rule selected."""

from __future__ import annotations

import re
from pathlib import Path

import libcst as cst
import pytest

from accumlint.model import FileModel
from accumlint.model.kinds import EventKind
from tests import shared_data
from tests.project.test_patterns import assert_row, check
from tests.shared_data import SHARED, needs_shared, pattern_rows, require_shared, shared_params

DATA = shared_data.DATA / "owned_loops"
#: reduced from the field trial of issue 15 (public projects on these frameworks), in our own words
FIELD = shared_data.DATA / "owned_loops_field"
_EXPECT = re.compile(r"# expect: (?:nothing|(ACC\d{3}) line (\d+)) -- ")


@needs_shared
@pytest.mark.parametrize("row", shared_params(pattern_rows(("cb_",)), "patterns", "expected.tsv"),
                         ids=lambda row: row["file"])
def test_cb_pattern(row: dict[str, str]) -> None:
    require_shared("patterns", row["file"])
    assert_row(row, SHARED / "patterns")


@needs_shared
def test_cb_patterns_present() -> None:
    require_shared("patterns", "cb_ignite_process.py")
    assert len(pattern_rows(("cb_",))) >= 4


def _case(path: Path):
    """A case, marked as a strict xfail when its name says the model does not handle it yet."""
    if path.name.startswith("xfail_"):
        return pytest.param(path, marks=pytest.mark.xfail(strict=True, reason="shape not handled yet (see header)"))
    return path


@pytest.mark.parametrize("path", [_case(p) for p in sorted([*DATA.glob("*.py"), *FIELD.glob("*.py")])],
                         ids=lambda p: p.name)
def test_reduced_case(path: Path) -> None:
    match = _EXPECT.match(path.read_text().splitlines()[0])
    assert match is not None, "first line must say what the case expects"
    found = [(code, line) for _, code, line in check(path)]
    if match.group(1) is None:
        assert found == []
    else:
        assert found == [(match.group(1), int(match.group(2)))]


def _events(source: str, scope_name: str) -> list[EventKind]:
    model = FileModel(cst.parse_module(source))
    scope = next(s for s in model.scopes if s.name == scope_name)
    return [event.kind for event in model.events[scope]]


def test_ignite_handlers_walked_in_framework_order() -> None:
    """ITERATION_STARTED handlers before the process function, ITERATION_COMPLETED after it,
    whatever their order in the file."""
    source = (DATA / "ignite_handler_ok.py").read_text()
    assert _events(source, "step") == [EventKind.BACKWARD, EventKind.UPDATE, EventKind.RESET]
    flipped = source.replace("Events.ITERATION_COMPLETED", "Events.ITERATION_STARTED")
    assert _events(flipped, "step") == [EventKind.RESET, EventKind.BACKWARD, EventKind.UPDATE]


@needs_shared
def test_callback_runner_backward_before_after_backward_hook() -> None:
    """The runner's backward is a site of the loop, before the after-backward hook's clip."""
    source = (SHARED / "patterns" / "cb_callback_pair_clip.py")
    require_shared("patterns", source.name)
    kinds = _events(source.read_text(), "on_backward_end")
    assert kinds[:2] == [EventKind.BACKWARD, EventKind.CLIP]
    assert EventKind.UPDATE in kinds


def test_ignite_counter_is_one_based() -> None:
    """The same gate on ``state.iteration`` is silent; on a loop's own 0-based index it would
    fire one microbatch late, so the difference is the row's counter start."""
    source = (DATA / "ignite_zero_based_gate_bad.py").read_text()
    assert [code for _, code, _ in check(DATA / "ignite_zero_based_gate_bad.py")] == ["ACC006"]
    fixed = source.replace("(eng.state.iteration + 1) % k", "eng.state.iteration % k")
    model = FileModel(cst.parse_module(fixed))
    scope = next(s for s in model.scopes if s.name == "step")
    assert any("eng.state.iteration" in name for name in scope.counter_starts)
    assert scope.counter_starts["eng.state.iteration"] == 1
