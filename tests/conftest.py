"""Shared fixtures: a tiny fake rule registry, so CLI tests do not depend on the real rules."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import libcst as cst
import pytest

from accumlint import checks, spec
from accumlint.checks.base import Hit, Rule
from accumlint.checks.gate import EVERYWHERE
from accumlint.pipeline import engine
from accumlint.spec import registry
from accumlint.spec.findings import Severity


class _CallCollector(cst.CSTVisitor):
    def __init__(self, target: str) -> None:
        self.target = target
        self.calls: list[cst.Call] = []

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        name = func.attr.value if isinstance(func, cst.Attribute) else getattr(func, "value", None)
        if name == self.target:
            self.calls.append(node)


class CallRule(Rule):
    """Flags every call whose function (or method) is named ``target``."""

    target: ClassVar[str]
    principle = "P0"
    gate = EVERYWHERE

    def check(self, model: object) -> Iterator[Hit]:
        collector = _CallCollector(self.target)
        model.module.visit(collector)  # type: ignore[attr-defined]
        for call in collector.calls:
            yield Hit(call, f"`{self.target}` is called here", f"do not call `{self.target}`")


class FakeZeroGrad(CallRule):
    code = "ACC001"
    name = "fake-zero-grad"
    severity = Severity.ERROR
    summary = "flags zero_grad calls"
    target = "zero_grad"


class FakeClip(CallRule):
    code = "ACC301"
    name = "fake-clip"
    severity = Severity.WARNING
    summary = "flags clip_grad_norm_ calls"
    target = "clip_grad_norm_"


class FakeInfo(CallRule):
    code = "ACC901"
    name = "fake-batchnorm"
    severity = Severity.INFO
    summary = "flags BatchNorm1d calls (off by default)"
    default_enabled = False
    target = "BatchNorm1d"


class FakeCrash(Rule):
    code = "ACC002"
    name = "fake-crash"
    severity = Severity.ERROR
    principle = "P0"
    summary = "always crashes"
    gate = EVERYWHERE

    def check(self, model: object) -> Iterator[Hit]:
        raise RuntimeError("boom")


FAKE_RULES: list[type[Rule]] = [FakeZeroGrad, FakeClip, FakeInfo]


def install_rules(monkeypatch: pytest.MonkeyPatch, rules: list[type[Rule]]) -> None:
    """Make ``rules`` the whole registry (class list, engine instances and the code table)."""
    monkeypatch.setattr(checks, "ALL_RULES", list(rules))
    entries = tuple(
        spec.RuleSpec(rule.code, rule.name, rule.severity, "-", ("fake", rule.__name__), summary=rule.summary,
                      meaning="", fix="", default_enabled=rule.default_enabled)
        for rule in rules)
    monkeypatch.setattr(registry, "RULES", entries)
    monkeypatch.setattr(spec, "RULES", entries)
    monkeypatch.setattr(engine, "ALL_RULES_INSTANCES", tuple(rule() for rule in rules))


@pytest.fixture
def fake_rules(monkeypatch: pytest.MonkeyPatch) -> list[type[Rule]]:
    """Replace the registry with three fake rules: ACC001 and ACC301 (on), ACC901 (off by default)."""
    install_rules(monkeypatch, FAKE_RULES)
    return FAKE_RULES


@pytest.fixture(autouse=True, scope="session")
def _user_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The cache's per-user key (platformdirs' user cache directory) in a folder of this session,
    not in the home directory of whoever runs the tests."""
    import os

    previous = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("user-cache"))
    yield
    if previous is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = previous


@pytest.fixture(autouse=True, scope="session")
def _report_on_stdout() -> Iterator[None]:
    """``ACCUMLINT_OUTPUT_FILE`` of whoever runs the tests would send every report to a file."""
    import os

    previous = os.environ.pop("ACCUMLINT_OUTPUT_FILE", None)
    yield
    if previous is not None:
        os.environ["ACCUMLINT_OUTPUT_FILE"] = previous


#: The slow tier (``pytest -m slow``; the fast tier is ``-m "not slow"``): tests that run torch,
#: the runtime guard, a subprocess per example, worker processes or the fuzzer. Listed here, in
#: one place, by module (every test in it; a prefix of its path under ``tests/``) or by
#: ``module::test``; ``@pytest.mark.slow`` on a test works as well (the tests that read ``../shared``
#: carry ``tests.shared_data.needs_shared``).
SLOW_MODULES = ("guard/", "engine/test_fuzz.py", "report/test_precommit.py", "report/test_fix_safety.py",
                "catalogue/test_new_rule.py",
                # slow since the flat layout's prefix "test_new_rule" matched it too: kept, the tiers unchanged
                "model/test_new_rule_facts.py")
SLOW_TESTS = frozenset({
    "catalogue/test_catalogue.py::test_example_runs_on_cpu",
    "report/test_fixes.py::test_fix_repairs_every_bad_example",
    "catalogue/test_registry.py::test_import_runtime_guard_loads_no_libcst",
    "catalogue/test_registry.py::test_the_guard_prints_the_specs_words",
    "catalogue/test_registry.py::test_a_run_answered_from_the_cache_loads_neither_libcst_nor_the_rules",
    "catalogue/test_registry.py::test_the_spec_loads_neither_libcst_nor_torch",
})


#: ``pytest --rule CODE``: the modules that test each rule's folder (its cases, snapshot and scripts
#: under both engines, and the refactorings of its scripts), whose tests name the code in their id ...
RULE_MODULES = frozenset({"catalogue/test_rule_folders.py", "catalogue/test_catalogue.py",
                          "guard/test_guard_catalogue.py", "metamorphic/test_metamorphic.py"})
#: ... and the precision sets on real code, which a rule that runs by default can break (a new
#: finding there is a false positive until proved otherwise): every test in them.
PRECISION_MODULES = ("precision/test_corpus.py", "precision/test_cases.py", "precision/test_field_trial.py",
                     "precision/test_field_shapes.py", "precision/test_field_misses_s5.py",
                     "precision/test_fresh_trial.py", "precision/test_trial", "project/test_patterns.py",
                     "project/test_patterns_flow.py")

TESTS = Path(__file__).resolve().parent


def module_of(path: Path) -> str:
    """A test module's path under ``tests/`` (``catalogue/test_catalogue.py``): the key of the lists above
    (a module outside ``tests/``, named on the command line, by its file name)."""
    resolved = path.resolve()
    return resolved.relative_to(TESTS).as_posix() if resolved.is_relative_to(TESTS) else path.name


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--rule", action="append", default=[], metavar="CODE",
        help="run one rule's tests (repeatable): its folder's cases, snapshot and scripts under the "
             "linter and the runtime guard, the refactorings of its scripts, and, for a rule on by "
             "default, the precision sets on real code")


_ENGINE_CODES = frozenset(entry.code for entry in spec.ENGINE_CODES)  # ACC000, ACC990: no folder


def _selected_rules(config: pytest.Config) -> tuple[str, ...]:
    """The codes given to ``--rule`` (comma-separated or repeated), upper-cased.

    Raises ``pytest.UsageError`` for a code the spec does not declare."""
    codes = tuple(code.strip().upper() for value in config.getoption("rule") for code in value.split(",")
                  if code.strip())
    unknown = [code for code in codes if code not in spec.BY_CODE or code in _ENGINE_CODES]
    if unknown:
        raise pytest.UsageError(f"--rule: no rule {', '.join(unknown)} in accumlint/spec/__init__.py")
    return codes


def _wanted_module(module: str, codes: tuple[str, ...]) -> bool:
    """Whether a test module holds tests that ``--rule`` keeps: the rule modules always, the precision
    sets when one of the rules runs by default."""
    if module in RULE_MODULES:
        return True
    return module.startswith(PRECISION_MODULES) and any(spec.BY_CODE[code].default_enabled for code in codes)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Under ``--rule``, the other test modules are not even imported (collection stays short)."""
    codes = _selected_rules(config)
    name = collection_path.name
    if codes and name.startswith("test_") and name.endswith(".py") and not _wanted_module(
            module_of(collection_path), codes):
        return True
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        module = module_of(item.path)
        if module.startswith(SLOW_MODULES) or f"{module}::{item.originalname}" in SLOW_TESTS:
            item.add_marker(pytest.mark.slow)
    codes = _selected_rules(config)
    if codes:
        # in a rule module, a test of another rule's folder (or of the whole catalogue) is left out
        kept = [item for item in items
                if module_of(item.path) not in RULE_MODULES or any(code in item.nodeid for code in codes)]
        kept_ids = {id(item) for item in kept}
        config.hook.pytest_deselected(items=[item for item in items if id(item) not in kept_ids])
        items[:] = kept


@pytest.fixture
def fresh_accelerate():
    """Accelerate keeps its state in process-wide singletons: reset them around each test (before it too:
    an HF ``Trainer`` test leaves its gradient state behind)."""
    pytest.importorskip("accelerate")
    from accelerate.state import AcceleratorState, GradientState

    def reset() -> None:
        AcceleratorState._reset_state(reset_partial_state=True)
        GradientState._reset_state()

    reset()
    yield
    reset()
