"""One vocabulary for both engines (accumlint/spec/vocabulary.py): the linter's event kinds and the
guard's trace letters come from one declaration, and so do the principles and families."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from accumlint import spec
from accumlint.model import kinds
from accumlint.spec import vocabulary
from accumlint.spec.vocabulary import KIND_OF_LETTER, LETTERS, EventKind
from tests.shared_data import REPO

GUARD = REPO / "runtime_guard"

#: the letter constants of runtime_guard/events.py, by the kind they name
CONSTANTS = {
    "FORWARD": EventKind.FORWARD, "BACKWARD": EventKind.BACKWARD, "RESET": EventKind.RESET, "CLIP": EventKind.CLIP,
    "UPDATE": EventKind.UPDATE, "SCHEDULER_STEP": EventKind.SCHEDULER_STEP, "SCALE": EventKind.SCALE,
    "UNSCALE": EventKind.UNSCALE, "SCALER_STEP": EventKind.SCALER_STEP, "SCALER_UPDATE": EventKind.SCALER_UPDATE,
    "EPOCH_END": EventKind.EPOCH_END,
}


@pytest.mark.slow  # imports runtime_guard, hence torch
def test_every_guard_letter_is_one_vocabulary_kind_and_back() -> None:
    from runtime_guard import events as guard_events

    # the letters the cards and reports have always written, in the legends' order
    assert LETTERS == "FBZCSLKXsUE"
    assert list(guard_events.EVENTS) == list(LETTERS) and len(set(LETTERS)) == len(LETTERS)
    for letter, (word, observed) in guard_events.EVENTS.items():
        kind = KIND_OF_LETTER[letter]
        assert (kind.letter, kind.word, kind.observed) == (letter, word, observed)
    traced = {kind for kind in EventKind if kind.letter is not None}
    assert set(KIND_OF_LETTER.values()) == traced
    assert {name: getattr(guard_events, name) for name in CONSTANTS} == {n: k.letter for n, k in CONSTANTS.items()}
    assert set(CONSTANTS.values()) == traced  # a constant for every traced kind, none for the others
    # kinds only the linter's model produces have no letter, word or meaning on the guard's side
    for kind in (EventKind.ASSIGN, EventKind.HELPER_CALL, EventKind.GRAD_RESCALE, EventKind.UPDATE_HOOK):
        assert (kind.letter, kind.word, kind.observed) == (None, None, None)
    with pytest.raises(ValueError, match="does not trace"):
        guard_events._letter(EventKind.ASSIGN)


def test_the_linter_reads_the_same_declarations() -> None:
    assert kinds.EventKind is vocabulary.EventKind and kinds.Cadence is vocabulary.Cadence
    assert spec.PRINCIPLES is vocabulary.PRINCIPLES and spec.FAMILIES is vocabulary.FAMILIES
    assert spec.Principle is vocabulary.Principle and spec.Family is vocabulary.Family
    # the kinds keep the words the linter's messages and tests use
    assert (EventKind.BACKWARD.value, EventKind.RESET.value, EventKind("optimizer update")) == (
        "backward", "gradient reset", EventKind.UPDATE)
    assert EventKind.SCHEDULER_STEP == "scheduler step" and isinstance(EventKind.CLIP, str)


@pytest.mark.slow  # imports runtime_guard, hence torch
def test_the_legends_name_the_letters_and_words_of_the_vocabulary() -> None:
    from runtime_guard import events as guard_events

    assert guard_events.legend("F B Z ‖ S") == (
        "F = forward of the probed model (one microbatch), B = backward reaching its parameters, "
        "Z = gradient reset (zero_grad), S = optimizer update attempt, ‖ after the group's last backward")
    assert guard_events.timeline_legend("F B | F B ‖ scaler.step sched") == (
        "F = forward of the probed model (one microbatch), B = backward reaching its parameters, "
        "sched = LR scheduler step, scaler.step = GradScaler.step, | between microbatches, "
        "‖ after the group's last backward")


def _guard_sources() -> list[tuple[Path, ast.Module]]:
    return [(path, ast.parse(path.read_text(encoding="utf-8"))) for path in sorted(GUARD.rglob("*.py"))]


def test_the_guard_names_its_letters_instead_of_writing_them() -> None:
    """Every traced event is written and compared through the constants of runtime_guard/events.py:
    a letter typed as a string (``self.services.event("B")``, ``e.kind == "Z"``) would not follow the
    vocabulary."""
    raw = []
    for path, tree in _guard_sources():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "event" and node.args:
                if not isinstance(node.args[0], ast.Name) or node.args[0].id not in CONSTANTS:
                    raw.append(f"{path.name}:{node.lineno} event({ast.unparse(node.args[0])})")
            if isinstance(node, ast.Compare) and getattr(node.left, "attr", None) == "kind":
                for right in node.comparators:
                    if isinstance(right, ast.Constant) and isinstance(right.value, str):
                        raw.append(f"{path.name}:{node.lineno} {ast.unparse(node)}")
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "count" and node.args:
                if isinstance(node.args[0], ast.Constant) and node.args[0].value in KIND_OF_LETTER:
                    raw.append(f"{path.name}:{node.lineno} {ast.unparse(node)}")
    assert raw == []
    # and the observers do write every traced kind (no dead letter in the vocabulary)
    written = {node.args[0].id for _, tree in _guard_sources() for node in ast.walk(tree)
               if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "event" and node.args
               and isinstance(node.args[0], ast.Name)}
    assert written == set(CONSTANTS)


@pytest.mark.slow  # a subprocess
def test_the_vocabulary_loads_neither_libcst_nor_torch() -> None:
    done = subprocess.run(
        [sys.executable, "-c", "import sys, accumlint.spec.vocabulary, accumlint.spec; "
         "print(sorted({m.split('.')[0] for m in sys.modules} & {'libcst', 'torch'}))"],
        capture_output=True, text=True, check=True, cwd=REPO)
    assert done.stdout.strip() == "[]"
