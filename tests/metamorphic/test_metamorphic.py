"""Metamorphic tests (issue 29): a semantics-preserving refactoring of a training program never
changes the set of codes accumlint reports on it. The inputs are every example of the catalogue,
every file of ``../shared/cases`` and every sample of ``../shared/patterns``; the refactorings
are :mod:`tests.metamorphic`'s. A pair (input, transformation) on which today's model changes
its verdict is a strict expected failure listed in ``tests/metamorphic/known_failures.toml``
(written from a real run by ``python -m tests.metamorphic report --write-known``), so that a
pair that starts passing is noticed.

Fast tier: one transformation per family on a rotating sixteenth of the catalogue. Slow tier:
every input under every transformation, seeded compositions of two or three, and the
transformed runnable examples, which must still train bit for bit the same."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from accumlint.pipeline.engine import check_source
from tests.metamorphic import FAMILIES, REGISTRY, Program
from tests.metamorphic.matrix import (
    SELECTED,
    Outcome,
    Subject,
    catalogue,
    compile_error,
    compositions,
    load_known,
    outcome,
    shared,
    subjects,
    transformed,
)
from tests.shared_data import DATA, REPO, needs_shared, require_shared

KNOWN = load_known()
CATALOGUE = catalogue()
#: our own inputs for the shapes the catalogue lacks (a loop in a method), so that the fast tier
#: covers every transformation without ../shared
OWN_SUBJECTS = [Subject(f"data/{p.name}", p) for p in sorted((DATA / "metamorphic").glob("*.py"))]
#: One transformation per family for the fast tier.
FAST = (
    "rename.locals",
    "gate.remainder_last",
    "wrap.try_finally",
    "loop.while_next",
    "extract.function",
    "config.argparse",
    "roles.dict",
    "values.loss_helper",
)


def _id(subject: Subject, chain: tuple[str, ...]) -> str:
    return f"{subject.key}::{'+'.join(chain)}"


def _pairs(pairs: list[tuple[Subject, tuple[str, ...]]]) -> list:
    return [pytest.param(subject, chain, id=_id(subject, chain)) for subject, chain in pairs]


def _fast_slice() -> list[tuple[Subject, tuple[str, ...]]]:
    """Family k's transformation on the catalogue examples whose index is k modulo 16."""
    return [(subject, (name,)) for k, name in enumerate(FAST) for subject in CATALOGUE[k % 16 :: 16]]


def _check(subject: Subject, chain: tuple[str, ...], request: pytest.FixtureRequest) -> Outcome:
    """The property on one pair: skipped where the chain does not apply; the output compiles;
    the codes are the original's, unless the pair is a known failure (then strictly expected to
    fail)."""
    result = outcome(subject, chain)
    if not result.applies:
        pytest.skip("the transformation does not apply: not counted")
    assert not result.broken, result.broken
    known = KNOWN.get((subject.key, "+".join(chain)))
    if known:
        request.applymarker(pytest.mark.xfail(strict=True, reason=f"[{known['family']}] {known['reason']}"))
    assert result.after == result.before, result.reason
    return result


def test_every_family_has_transformations_with_docstrings() -> None:
    for family in FAMILIES:
        assert any(t.family == family for t in REGISTRY.values()), family
    for transformation in REGISTRY.values():
        assert len(transformation.doc) > 40, transformation.name  # what it preserves, when it applies
    assert {REGISTRY[name].family for name in FAST} == set(FAMILIES)


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_each_transformation_applies_somewhere_and_compiles(name: str) -> None:
    """Each transformation applies to some catalogue example (or, for shapes the catalogue lacks,
    such as a training loop in a method, to one of ours in tests/data/metamorphic, or a shared
    input); its output compiles and differs."""
    for subject in [*CATALOGUE, *OWN_SUBJECTS, *shared()]:
        program = transformed(subject, (name,)) if subject.program is not None else None
        if program is not None:
            assert compile_error(program) == ""
            assert program.files != subject.program.files
            return
    if not shared():
        pytest.skip(f"{name} applies to no catalogue example; the shared inputs are absent")
    pytest.fail(f"{name} applies to no input")


def test_a_transformation_that_does_not_apply_returns_none() -> None:
    program = Program.single("plain.py", "x = 1\nprint(x + 1)\n")
    for name, transformation in REGISTRY.items():
        if transformation.family != "rename":  # a plain script still has names to rename
            assert transformation.apply(program) is None, name


def test_known_failures_name_real_pairs() -> None:
    keys = {subject.key for subject in subjects()}
    for (key, chain), entry in KNOWN.items():
        assert all(name in REGISTRY for name in chain.split("+")), entry
        assert key in keys or not key.startswith("rules/"), entry
        assert entry["reason"] and entry["family"], entry


@pytest.mark.parametrize(("subject", "chain"), _pairs(_fast_slice()))
def test_fast_slice_keeps_the_verdict(subject: Subject, chain: tuple[str, ...], request: pytest.FixtureRequest) -> None:
    _check(subject, chain, request)


@pytest.mark.slow
@pytest.mark.parametrize(("subject", "chain"), _pairs([(s, (name,)) for s in subjects() for name in REGISTRY]))
def test_every_transformation_keeps_the_verdict(
    subject: Subject, chain: tuple[str, ...], request: pytest.FixtureRequest
) -> None:
    _check(subject, chain, request)


@pytest.mark.slow
@pytest.mark.parametrize(("subject", "chain"), _pairs(compositions(CATALOGUE, shared())))
def test_compositions_keep_the_verdict(
    subject: Subject, chain: tuple[str, ...], request: pytest.FixtureRequest
) -> None:
    _check(subject, chain, request)


@pytest.mark.slow
@settings(max_examples=40, derandomize=True, database=None, deadline=None, phases=[Phase.explicit, Phase.generate])
@given(data=st.data())
def test_drawn_compositions_stay_valid_programs(data: st.DataObject) -> None:
    """Hypothesis draws a catalogue example and 2-3 transformations: where the chain applies,
    every output compiles, the same chain gives the same text again, and the linter reads it
    (no parse error, no internal error). The verdict itself is the seeded list's business
    (``test_compositions_keep_the_verdict``), whose strict expected failures stay reproducible."""
    subject = data.draw(st.sampled_from(CATALOGUE), label="example")
    chain = tuple(data.draw(st.lists(st.sampled_from(sorted(REGISTRY)), min_size=2, max_size=3, unique=True)))
    program = subject.program
    for name in chain:
        program = REGISTRY[name].apply(program) if program is not None else None
    if program is None:
        return  # does not apply: nothing to check
    assert compile_error(program) == ""
    again = subject.program
    for name in chain:
        again = REGISTRY[name].apply(again)
    assert again == program
    if program.is_single:
        result = check_source(str(subject.path), program.text.encode(), SELECTED)
        assert result.internal_errors == [] and "ACC000" not in {f.code for f in result.findings}


@needs_shared
def test_shared_inputs_are_present() -> None:
    """The slow matrix covers ../shared's cases and patterns (skipped where they are absent)."""
    require_shared("cases")
    require_shared("patterns")
    assert len(shared()) >= 60


#: Plain-torch catalogue examples (bad and good twin) with an `enumerate` loop, a canonical gate
#: and a module constant A: nearly every transformation applies to them.
RUNNABLE = (
    "rules/ACC006-irregular-update-boundary/bad_zero_based_modulo.py",
    "rules/ACC006-irregular-update-boundary/good_zero_based_modulo.py",
    "rules/ACC001-zero-grad-inside-group/bad_grad_set_to_none_loop.py",
    "rules/ACC001-zero-grad-inside-group/good_grad_set_to_none_loop.py",
)


def _write(program: Program, folder: Path) -> dict[str, str]:
    for name, text in program.files:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf-8")
    return {"name": folder.name, "folder": str(folder), "main": program.main}


@pytest.mark.slow
@pytest.mark.parametrize("key", RUNNABLE)
def test_transformed_examples_train_the_same(key: str, tmp_path: Path) -> None:
    """The original and every transformation of it that applies, run in one interpreter: the
    same printed loss curve and the same parameters after every optimizer step, bit for bit."""
    pytest.importorskip("torch")
    subject = next(s for s in CATALOGUE if s.key == key)
    programs = [_write(subject.program, tmp_path / "original")]
    for name in REGISTRY:
        program = transformed(subject, (name,))
        if program is not None:
            programs.append(_write(program, tmp_path / name))
    programs.append({**programs[0], "name": "original-again"})  # the run itself is deterministic
    # every family applies (the bad ACC006 twin's gate `i % A == 0` is no canonical gate to respell)
    assert {REGISTRY[p["name"]].family for p in programs[1:-1]} >= set(FAMILIES) - {"gate" if "bad_" in key else ""}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(
        [sys.executable, "-m", "tests.metamorphic.run_programs"],
        input=json.dumps(programs),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(done.stdout)
    original = results["original"]
    assert original["error"] == "" and original["steps"] > 0 and original["stdout"], original
    assert results["original-again"] == original
    for name, result in results.items():
        assert result == original, (name, result["error"] or result["stdout"])
