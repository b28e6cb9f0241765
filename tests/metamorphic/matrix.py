"""The inputs of the metamorphic property and the verdicts on them: every bad and good example of
the catalogue (``rules/*/``), every file of ``../shared/cases`` and every file or folder sample of
``../shared/patterns``; the verdict on a program is the set of codes accumlint reports on it
with every rule selected (one file: :func:`accumlint.pipeline.engine.check_source`, as the catalogue test
checks; a folder: :func:`accumlint.run.runner.check_files` on a copy, as ``accumlint check FOLDER``).
Verdicts on the originals and transformed programs are cached for the run."""

from __future__ import annotations

import functools
import random
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from accumlint.checks import ALL_RULES
from accumlint.pipeline.engine import check_source, rules_for
from accumlint.run import runner
from accumlint.settings import config
from accumlint.settings.config import (
    Settings,
    tomllib,  # tomli before Python 3.11
)
from tests.metamorphic.base import FAMILIES, REGISTRY, Program
from tests.shared_data import REPO, SHARED

SELECTED = rules_for(rule.code for rule in ALL_RULES)
EVERY_CODE = frozenset(config.known_codes())
KNOWN_FAILURES = Path(__file__).with_name("known_failures.toml")

#: Rule families by code prefix, in the report's order.
RULE_FAMILIES = {
    "ACC0": "control",
    "ACC1": "normalisation",
    "ACC2": "memory",
    "ACC3": "clip/scaler/schedule",
    "ACC4": "data-parallel",
    "ACC5": "framework",
}
SILENT = "silent original"


def rule_family(code: str) -> str:
    """``ACC0xx`` → ``control``, ...; anything else → ``other``."""
    return RULE_FAMILIES.get(code[:4], "other")


@dataclass(frozen=True)
class Subject:
    """One input: ``key`` names it in test ids and in the known failures (``rules/...``,
    ``cases/...``, ``patterns/...``); ``path`` is where it lies (a file or a folder)."""

    key: str
    path: Path

    @functools.cached_property
    def program(self) -> Program | None:
        """The program, or None where a file is not UTF-8 text."""
        try:
            if self.path.is_dir():
                files = sorted(p for p in self.path.rglob("*.py"))
                entries = tuple((p.relative_to(self.path).as_posix(), p.read_text(encoding="utf-8")) for p in files)
                names = [name for name, _ in entries]
                return Program(entries, "train.py" if "train.py" in names else names[0])
            return Program.single(self.path.name, self.path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, IndexError):
            return None


def catalogue() -> list[Subject]:
    """Every bad and good example of ``rules/*/``."""
    return [Subject(f"rules/{p.parent.name}/{p.name}", p) for p in sorted((REPO / "rules").glob("ACC*/*.py"))]


def shared() -> list[Subject]:
    """Every file of ``../shared/cases`` and every file or folder sample of ``../shared/patterns``
    (none where ``../shared`` is absent)."""
    subjects = []
    for folder in ("cases", "patterns"):
        root = SHARED / folder
        if root.is_dir():
            for path in sorted(root.iterdir()):
                if (path.suffix == ".py" and path.is_file()) or (path.is_dir() and any(path.rglob("*.py"))):
                    subjects.append(Subject(f"{folder}/{path.name}", path))
    return subjects


def subjects() -> list[Subject]:
    return catalogue() + shared()


def verdict(program: Program, path: str) -> frozenset[str]:
    """The codes accumlint reports on ``program`` (``path`` names its main file for a one-file
    check), every rule selected."""
    if program.is_single:
        return frozenset(f.code for f in check_source(path, program.text.encode(), SELECTED).findings)
    with tempfile.TemporaryDirectory(prefix="metamorphic-") as folder:
        root = Path(folder) / Path(path).name.removesuffix(".py")
        names = []
        for name, text in program.files:
            target = root / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
            names.append(str(target))
        run = runner.check_files(sorted(names), Settings(project_root=root), EVERY_CODE, jobs=1)
        return frozenset(f.code for f in run.findings)


def trace_verdict(program: Program, path: str) -> frozenset[str]:
    """The codes the group-structure properties find on the simulated traces of ``program``
    (``accumlint/checks/group_traces.py``), its imports followed as ``check`` follows them."""
    from accumlint.checks.group_traces import verdicts
    from accumlint.commands.explain import Target, explain

    with tempfile.TemporaryDirectory(prefix="metamorphic-") as folder:
        root = Path(folder) / "program"
        for name, text in program.files:
            target = root / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        (root / "pyproject.toml").write_text("[project]\nname = 'program'\n", encoding="utf-8")
        return frozenset(v.code for r in explain(Target(str(root / program.main), None)) for v in verdicts(r))


#: the verdict of each engine: the linter's check, or the trace properties
ENGINES: dict[str, Callable[[Program, str], frozenset[str]]] = {"check": verdict, "traces": trace_verdict}


@functools.cache
def original_verdict(subject: Subject, engine: str = "check") -> frozenset[str]:
    """The verdict on the unchanged subject (cached for the run)."""
    assert subject.program is not None
    return ENGINES[engine](subject.program, str(subject.path))


@functools.cache
def transformed(subject: Subject, chain: tuple[str, ...]) -> Program | None:
    """The subject after the transformations of ``chain`` in order, or None where one of them
    does not apply (cached for the run)."""
    program = subject.program if not chain else transformed(subject, chain[:-1])
    return None if program is None else REGISTRY[chain[-1]].apply(program) if chain else program


@dataclass(frozen=True)
class Outcome:
    """A (subject, chain) pair: ``applies`` False where a transformation does not apply; else
    the original's codes, the transformed program's codes, and a compile error of its output."""

    subject: Subject
    chain: tuple[str, ...]
    applies: bool
    before: frozenset[str] = frozenset()
    after: frozenset[str] = frozenset()
    broken: str = ""

    @property
    def invariant(self) -> bool:
        return self.applies and not self.broken and self.before == self.after

    @property
    def reason(self) -> str:
        """What changed: ``lost ACC001; gained ACC005`` (or the compile error)."""
        if self.broken:
            return f"output does not compile: {self.broken}"
        parts = []
        if self.before - self.after:
            parts.append("lost " + ", ".join(sorted(self.before - self.after)))
        if self.after - self.before:
            parts.append("gained " + ", ".join(sorted(self.after - self.before)))
        return "; ".join(parts)

    @property
    def families(self) -> list[str]:
        """The rule families of the original's codes, or :data:`SILENT` where it reports none (the
        good twins, and the bad inputs the model misses today): the groups the rates are over."""
        return sorted({rule_family(c) for c in self.before}) if self.before else [SILENT]

    @property
    def changed_families(self) -> list[str]:
        """The rule families of the codes lost or gained: the rules that must change for the pair
        to pass."""
        return sorted({rule_family(c) for c in self.before ^ self.after}) or ["-"]


def compile_error(program: Program) -> str:
    """The first file of ``program`` that does not compile, with the error, or ``""``."""
    for name, text in program.files:
        try:
            compile(text, name, "exec")
        except SyntaxError as error:
            return f"{name}:{error.lineno}: {error.msg}"
    return ""


def outcome(subject: Subject, chain: Sequence[str], engine: str = "check") -> Outcome:
    """Apply ``chain`` to ``subject`` and compare the verdicts of ``engine``."""
    chain = tuple(chain)
    program = transformed(subject, chain)
    if program is None:
        return Outcome(subject, chain, False)
    before = original_verdict(subject, engine)
    broken = compile_error(program)
    after = frozenset() if broken else ENGINES[engine](program, str(subject.path))
    return Outcome(subject, chain, True, before, after, broken)


def run_matrix(items: Iterable[Subject], names: Iterable[str], engine: str = "check") -> list[Outcome]:
    """Every subject under every single transformation named."""
    names = list(names)
    return [outcome(subject, (name,), engine) for subject in items if subject.program is not None for name in names]


def load_known() -> dict[tuple[str, str], dict[str, str]]:
    """(subject key, chain as ``a+b``) → its entry of ``known_failures.toml``."""
    if not KNOWN_FAILURES.exists():
        return {}
    entries = tomllib.loads(KNOWN_FAILURES.read_text(encoding="utf-8")).get("failure", [])
    return {(entry["file"], entry["transformation"]): entry for entry in entries}


def _toml_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def write_known(outcomes: Iterable[Outcome]) -> int:
    """Write every failing pair of ``outcomes`` to ``known_failures.toml``, grouped by rule
    family; returns their number."""
    # an output that does not compile is a bug of the transformation, never an expected failure
    failing = sorted(
        (o for o in outcomes if o.applies and not o.invariant and not o.broken),
        key=lambda o: (o.changed_families[0], o.subject.key, o.chain),
    )
    lines = [
        "# Pairs (file, transformation) on which accumlint's verdict changes today: strict expected",
        "# failures of tests/metamorphic/test_metamorphic.py (a pair that starts passing fails the run until its",
        "# entry is removed). Generated from a real run by `python -m tests.metamorphic report --write-known`;",
        "# `family` is the rule family of the codes lost or gained, `reason` those codes.",
        "",
    ]
    for o in failing:
        lines += [
            "[[failure]]",
            f"file = {_toml_string(o.subject.key)}",
            f"transformation = {_toml_string('+'.join(o.chain))}",
            f"family = {_toml_string(', '.join(o.changed_families))}",
            f"reason = {_toml_string(o.reason)}",
            "",
        ]
    KNOWN_FAILURES.write_text("\n".join(lines), encoding="utf-8")
    return len(failing)


#: Compositions: a fixed list, drawn once from this seed, so that the report and the strict
#: expected failures name the same (file, chain) pairs run after run.
COMPOSITION_SEED = 29
COMPOSITION_COUNT = 160


def compositions(
    catalogue_items: Sequence[Subject], shared_items: Sequence[Subject]
) -> list[tuple[Subject, tuple[str, ...]]]:
    """``COMPOSITION_COUNT`` chains of 2 or 3 transformations of distinct families, drawn with
    ``COMPOSITION_SEED``, alternately on the catalogue and on the shared inputs (the draws are
    the same whether the shared inputs are there or not; without them those chains are left
    out). Whether a chain applies is found when it is run: one that does not is skipped."""
    chooser = random.Random(COMPOSITION_SEED)
    by_family = {family: [t.name for t in REGISTRY.values() if t.family == family] for family in FAMILIES}
    drawn = []
    for number in range(COMPOSITION_COUNT):
        pool = catalogue_items if number % 2 == 0 else shared_items
        pick = chooser.randrange(1 << 30)
        families = chooser.sample(FAMILIES, chooser.choice((2, 3)))
        chain = tuple(chooser.choice(by_family[family]) for family in families)
        if pool:
            drawn.append((pool[pick % len(pool)], chain))
    return drawn


def run_compositions() -> list[Outcome]:
    """Every drawn composition, run."""
    return [
        outcome(subject, chain) for subject, chain in compositions(catalogue(), shared()) if subject.program is not None
    ]
