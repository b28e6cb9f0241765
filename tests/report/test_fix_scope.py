"""A fix's re-check of the definitions its edit can affect (``accumlint/run/fix_scope.py``).

The restricted re-check must give the findings (hence the verdict of
:func:`accumlint.run.apply_fixes.judge`) of a re-check of the whole fixed file. Checked on every fix
of every catalogue example, read as it is and with an independent training function of its own
appended (a definition the edit cannot affect, with a finding that the restricted re-check keeps
from before), and on the metamorphic matrix (fast tier: one transformation per family; slow
tier: every transformation).
"""

from __future__ import annotations

import pytest

from accumlint.files.text_edits import apply_edits
from accumlint.pipeline import engine
from accumlint.run.apply_fixes import fix_source, judge
from accumlint.run.fix_scope import Baseline
from accumlint.spec import UNUSED_NOQA_CODE
from tests.metamorphic import REGISTRY
from tests.metamorphic.matrix import SELECTED, catalogue, transformed
from tests.metamorphic.test_metamorphic import FAST
from tests.shared_data import REPO

CATALOGUE = catalogue()

#: a training function of its own (its own names throughout): no catalogue fix can affect it,
#: and it holds an ACC304 finding (its scheduler advances on every microbatch)
INDEPENDENT = '''


def _independent_loop(side_loader, side_model, side_optimizer, side_scheduler):
    for side_index, side_batch in enumerate(side_loader):
        side_model(side_batch).mean().backward()
        side_scheduler.step()
        if (side_index + 1) % 4 == 0:
            side_optimizer.step()
            side_optimizer.zero_grad()
'''


def compare(path: str, text: str) -> tuple[int, int]:
    """Verify every fix of ``text``'s findings both ways (restricted and whole) and assert the
    same findings and the same verdict; return (fixes compared, restricted re-checks)."""
    checked = engine.check_source(path, text.encode(), SELECTED, suggest=True)
    baseline = Baseline(text, checked.findings)
    compared = restricted = 0
    for finding, fix in (checked.fixes or {}).items():
        if finding.code == UNUSED_NOQA_CODE:
            continue
        fixed = apply_edits(text, fix.edits)
        whole = engine.check_source(path, fixed.encode(), SELECTED).findings
        part = baseline.check(path, fixed, "utf-8", SELECTED)
        assert part == whole, (path, finding, baseline.last)
        assert judge(checked.findings, part, finding.code) == judge(checked.findings, whole, finding.code)
        compared += 1
        restricted += baseline.last == "restricted"
    return compared, restricted


def test_an_edit_re_checks_what_it_can_affect_and_keeps_the_rest() -> None:
    text = ("import torch\n\n\ndef train(loader, model, opt, sched):\n    for i, b in enumerate(loader):\n"
            "        model(b).mean().backward()\n        sched.step()\n        if (i + 1) % 4 == 0:\n"
            "            opt.step()\n            opt.zero_grad()\n" + INDEPENDENT)
    checked = engine.check_source("t.py", text.encode(), SELECTED, suggest=True)
    assert [(f.code, f.line) for f in checked.findings if f.code == "ACC304"] == [("ACC304", 7), ("ACC304", 17)]
    fix = next(fix for f, fix in (checked.fixes or {}).items() if (f.code, f.line) == ("ACC304", 7))
    fixed = apply_edits(text, fix.edits)
    baseline = Baseline(text, checked.findings)
    part = baseline.check("t.py", fixed, "utf-8", SELECTED)
    assert baseline.last == "restricted"
    assert part == engine.check_source("t.py", fixed.encode(), SELECTED).findings
    shift = fixed.count("\n") - text.count("\n")
    # the independent loop's finding is the one from before, moved with its definition
    assert [(f.code, f.line) for f in part if f.code == "ACC304"] == [("ACC304", 17 + shift)]


def test_an_edit_of_the_modules_own_statements_re_checks_the_whole_file() -> None:
    text = "import torch\n\n\ndef f(x):\n    return x\n"
    baseline = Baseline(text, [])
    assert baseline.check("t.py", text.replace("import torch", "import torch as t"), "utf-8", SELECTED) == []
    assert baseline.last == "the edit reaches the module's own statements"
    baseline.check("t.py", text.replace("def f", "def g"), "utf-8", SELECTED)
    assert baseline.last == "the edit adds, removes or renames a definition"


def test_a_caller_of_the_edited_definition_is_re_checked() -> None:
    """The loop calls the edited helper (the model inlines it): both are the region, and the
    region is every definition here, so the whole file is checked."""
    text = ("def micro(b, sched):\n    b.backward()\n    sched.step()\n\n\n"
            "def run(loader, opt, sched):\n    for i, b in enumerate(loader):\n        micro(b, sched)\n"
            "        if (i + 1) % 4 == 0:\n            opt.step()\n            opt.zero_grad()\n")
    baseline = Baseline(text, [])
    baseline.check("t.py", text.replace("    sched.step()\n", "    pass\n"), "utf-8", SELECTED)
    assert baseline.last == "the edit can affect every definition"


@pytest.mark.parametrize("subject", CATALOGUE, ids=lambda s: s.key)
def test_the_catalogue_fixes_verify_the_same_restricted(subject) -> None:
    text = subject.path.read_text(encoding="utf-8")
    compare(subject.path.name, text)
    compare(subject.path.name, text.rstrip("\n") + INDEPENDENT)


def test_the_fixable_examples_are_re_checked_restricted() -> None:
    """Not every fix falls back to the whole file: with the independent function appended, the
    catalogue's fixes are mostly re-checked restricted (each one compared above)."""
    compared = restricted = 0
    for subject in CATALOGUE:
        if subject.key.split("/")[1][:6] in {"ACC001", "ACC006", "ACC101", "ACC201", "ACC304"}:
            counts = compare(subject.path.name, subject.path.read_text(encoding="utf-8").rstrip("\n") + INDEPENDENT)
            compared, restricted = compared + counts[0], restricted + counts[1]
    assert compared >= 10 and restricted >= compared // 2


def _matrix(names: tuple[str, ...]) -> list[tuple[object, str]]:
    return [(subject, name) for name in names for subject in CATALOGUE
            if subject.key.split("/")[1][:6] in {"ACC001", "ACC006", "ACC101", "ACC201", "ACC304"}]


def _compare_transformed(subject, name: str) -> None:
    """Each file of the transformed program, with :data:`INDEPENDENT` appended (the restricted
    re-check has a definition to leave out)."""
    program = transformed(subject, (name,))
    if program is None:
        pytest.skip("the transformation does not apply")
    for file_name, text in program.files:
        compare(file_name, text.rstrip("\n") + INDEPENDENT)


@pytest.mark.parametrize(("subject", "name"), _matrix(FAST), ids=lambda v: getattr(v, "key", v))
def test_the_metamorphic_fast_slice_verifies_the_same_restricted(subject, name: str) -> None:
    _compare_transformed(subject, name)


@pytest.mark.slow
@pytest.mark.parametrize(("subject", "name"), _matrix(tuple(sorted(REGISTRY))), ids=lambda v: getattr(v, "key", v))
def test_the_metamorphic_matrix_verifies_the_same_restricted(subject, name: str) -> None:
    _compare_transformed(subject, name)


def test_fix_source_applies_the_same_fixes(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--fix`` re-checks restricted too: both fixes applied, none of the findings left."""
    ways: list[str] = []
    real = Baseline.check

    def spy(self: Baseline, *args: object) -> list:
        found = real(self, *args)  # type: ignore[arg-type]
        ways.append(self.last)
        return found

    monkeypatch.setattr(Baseline, "check", spy)
    text = ("import torch\n\n\ndef train(loader, model, opt, sched):\n    for i, b in enumerate(loader):\n"
            "        model(b).mean().backward()\n        sched.step()\n        if (i + 1) % 4 == 0:\n"
            "            opt.step()\n            opt.zero_grad()\n" + INDEPENDENT)
    result = fix_source("t.py", text.encode(), SELECTED, unsafe=True)
    assert result.applied["ACC304"] == 2
    after = engine.check_source("t.py", result.fixed, SELECTED).findings
    assert [f for f in after if f.code == "ACC304"] == []
    assert ways[:2] == ["restricted", "restricted"]  # each fix re-checked without the other loop


@pytest.mark.slow
def test_a_large_script_verifies_the_same_restricted() -> None:
    """The 3,000-line benchmark script (over the size from which a check reads only the kept
    definitions, :mod:`accumlint.pipeline.kept_blocks`): every fix restricted, each equal to the whole."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("training_script", REPO / "benchmarks" / "training_script.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = module.build(3000)
    assert len(text.encode()) >= engine.KEPT_BLOCKS_FROM_BYTES
    compared, restricted = compare("train_big.py", text)
    assert compared >= 10 and restricted == compared
