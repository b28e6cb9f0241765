"""The run context (:mod:`accumlint.pipeline.run_context`): what a check reads of its run (the project
whose modules the model follows, whether fixes are computed) is passed to it, so two checks
with different contexts in one process see only their own."""

from __future__ import annotations

import ast
from pathlib import Path

from accumlint import project
from accumlint.pipeline import engine, run_context
from accumlint.pipeline.run_context import ALONE, RunContext
from accumlint.run import runner
from accumlint.settings.config import Settings
from tests.project.test_interprocedural import SRC_LAYOUT, tree

CODES = frozenset({"ACC000", "ACC001"})


def _train(tmp_path: Path) -> tuple[list[str], str, bytes]:
    """The src layout whose train.py resets the gradients every microbatch and calls its
    backward only through a project helper (ACC001 at line 6, seen only in the project)."""
    paths = tree(tmp_path, SRC_LAYOUT)
    train = next(path for path in paths if path.endswith("train.py"))
    return paths, train, Path(train).read_bytes()


def _where(result: engine.FileResult) -> list[tuple[str, int]]:
    return [(finding.code, finding.line) for finding in result.findings]


def test_checks_with_different_contexts_in_one_process_see_only_their_own(tmp_path: Path) -> None:
    paths, train, data = _train(tmp_path)
    rules = engine.rules_for(CODES)
    in_project = RunContext(project.ProjectIndex.for_files(paths, str(tmp_path)), suggest=True)
    first = engine.check_source(train, data, rules, in_project)
    alone = engine.check_source(train, data, rules)  # no project, no fixes: nothing left over
    again = engine.check_source(train, data, rules, in_project)
    assert _where(first) == [("ACC001", 6)]
    assert first.fixes == {}  # computed (its fixer leaves a reset beside a helper's backward alone)
    assert [Path(path).name for path in first.dependencies] == ["steps.py"]
    assert (_where(alone), alone.fixes, alone.dependencies) == ([], None, {})
    assert (_where(again), again.fixes, again.dependencies) == (_where(first), first.fixes, first.dependencies)


def test_a_run_leaves_nothing_behind_for_the_next_check(tmp_path: Path) -> None:
    """A run with fixes in its project, then one file checked alone, then a run without fixes."""
    paths, train, data = _train(tmp_path)
    settings = Settings(project_root=tmp_path)
    suggesting = runner.check_files(paths, settings, CODES, jobs=1, suggest=True)
    assert [(Path(f.path).name, f.code, f.line) for f in suggesting.findings] == [("train.py", "ACC001", 6)]
    assert suggesting.suggested == {train}  # its fixes were computed
    assert _where(runner.check_one(train, data, CODES)) == []  # no project root: the helper is not followed
    plain = runner.check_files(paths, settings, CODES, jobs=1)
    assert plain.findings == suggesting.findings
    assert (plain.fixes, plain.suggested) == ({}, set())


def test_the_context_is_a_frozen_value_of_a_leaf_module() -> None:
    assert ALONE == RunContext() and (ALONE.project, ALONE.suggest, ALONE.ignore_noqa) == (None, False, False)
    tree_ = ast.parse(Path(run_context.__file__).read_text(encoding="utf-8"))
    runtime = [node for node in tree_.body
               if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("accumlint")]
    assert runtime == []  # only under TYPE_CHECKING: every stage may take one
    for removed in ("activate", "active"):
        assert not hasattr(project, removed)
    assert not hasattr(runner, "_suggesting") and not hasattr(runner, "checking_in")


_NOQA_LOOP = b"""\
for step, batch in enumerate(loader):
    optimizer.zero_grad()  # noqa: ACC001
    loss = model(batch).mean() / accumulation_steps
    loss.backward()
    if (step + 1) % accumulation_steps == 0:
        optimizer.step()
"""


def test_ignore_noqa_is_the_contexts_not_the_process(tmp_path: Path) -> None:
    """``--ignore-noqa`` reaches a check only through its context: in this process, in a
    worker (:func:`runner.check_one`), and in a run of files; no switch is left set after."""
    train = tmp_path / "train.py"
    train.write_bytes(_NOQA_LOOP)
    rules = engine.rules_for(CODES)
    path = str(train)
    assert _where(engine.check_source(path, _NOQA_LOOP, rules)) == []
    assert _where(engine.check_source(path, _NOQA_LOOP, rules, RunContext(ignore_noqa=True))) == [("ACC001", 2)]
    assert _where(engine.check_source(path, _NOQA_LOOP, rules)) == []  # nothing left over
    assert _where(runner.check_one(path, _NOQA_LOOP, CODES, ignore_noqa=True)) == [("ACC001", 2)]
    assert _where(runner.check_one(path, _NOQA_LOOP, CODES)) == []
    settings = Settings(project_root=tmp_path)
    ignoring = runner.check_files([path], settings, CODES, jobs=1, ignore_noqa=True)
    assert [(f.code, f.line) for f in ignoring.findings] == [("ACC001", 2)]
    assert runner.check_files([path], settings, CODES, jobs=1).findings == []
    from accumlint.noqa import suppression

    assert not any(hasattr(suppression, name) for name in ("_ignoring", "ignore_directives", "ignoring_directives"))
