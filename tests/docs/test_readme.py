"""The README stays true: its rule table is the registry's, its quick start the two commands."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

from accumlint import __version__
from tests.shared_data import REPO

README = REPO / "README.md"

RUN_COMMAND = (
    'python -m venv .venv && . .venv/bin/activate && pip install -e ".[guard]" torch==2.13.0 '
    "&& accumlint check examples/; python -m runtime_guard demo examples/"
)
TEST_COMMAND = (
    'python -m venv .venv && . .venv/bin/activate && pip install -e ".[dev,guard]" torch==2.13.0 && pytest'
)


def load_script(name: str = "rule_table") -> ModuleType:
    """``scripts/NAME.py`` as a module (the scripts are not a package)."""
    import sys

    qualified = f"scripts_{name}"
    if qualified in sys.modules:
        return sys.modules[qualified]
    spec = importlib.util.spec_from_file_location(qualified, REPO / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[qualified] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_readme_rule_table_matches_the_registry() -> None:
    script = load_script()
    text = README.read_text(encoding="utf-8")
    assert script.current_table(text) == script.render_table(), "run: python scripts/rule_table.py"


def test_rule_table_rows(fake_rules: object) -> None:
    table = load_script().render_table().splitlines()
    rows = [[cell.strip() for cell in row.strip("|").split(" | ")] for row in table[2:]]
    assert rows == [
        [
            "ACC000",
            "`parse-error`",
            "error",
            "on",
            "a file could not be read, decoded or parsed, so it was not checked",
        ],
        [
            "ACC001",
            "[`fake-zero-grad`](rules/ACC001-fake-zero-grad/README.md)",
            "error",
            "on",
            "flags zero_grad calls",
        ],
        [
            "ACC301",
            "[`fake-clip`](rules/ACC301-fake-clip/README.md)",
            "warning",
            "on",
            "flags clip_grad_norm_ calls",
        ],
        [
            "ACC901",
            "[`fake-batchnorm`](rules/ACC901-fake-batchnorm/README.md)",
            "info",
            "off",
            "flags BatchNorm1d calls (off by default)",
        ],
        [
            "ACC990",
            "`unused-noqa`",
            "info",
            "off",
            "a `# noqa` directive names an ACC code that suppresses nothing there",
        ],
    ]


def test_replace_table_keeps_the_rest() -> None:
    script = load_script()
    text = "intro\n<!-- rule-table -->\nold\n<!-- /rule-table -->\noutro\n"
    assert (
        script.replace_table(text, "| new |")
        == "intro\n<!-- rule-table -->\n| new |\n<!-- /rule-table -->\noutro\n"
    )


def test_readme_layout_map_matches_the_docstrings() -> None:
    script = load_script("layout_map")
    text = README.read_text(encoding="utf-8")
    layout = script.render_map()
    assert script.between(text, script.START, script.END) == layout, "run: python scripts/layout_map.py"
    # every top-level module and package of both packages is on the map, with its own summary
    for package in ("accumlint", "runtime_guard"):
        for child in (REPO / package).iterdir():
            if child.suffix == ".py" and not child.name.startswith("_") or (child / "__init__.py").is_file():
                assert f"\n  {child.name}{'/' if child.is_dir() else ''} " in layout, child
    assert "\n  run/ " in layout
    assert "\n    pool.py             The worker pool of a run: LibCST stages in worker processes" in layout


def test_layout_map_takes_the_first_sentence_and_refuses_a_long_one(tmp_path: Path) -> None:
    script = load_script("layout_map")
    short = tmp_path / "short.py"
    short.write_text('"""Reads ``x.py`` files (see :func:`read`). More here.\n\nDetails."""\n', encoding="utf-8")
    long = tmp_path / "long.py"
    long.write_text(f'"""{"word " * 40}and on.\n"""\n', encoding="utf-8")
    none = tmp_path / "none.py"
    none.write_text("x = 1\n", encoding="utf-8")
    script.ROOT = tmp_path  # paths in the messages are relative to it
    try:
        assert script.summary(short) == "Reads `x.py` files (see `read`)"
        with pytest.raises(script.LayoutError, match="first sentence has 206 characters"):
            script.summary(long)
        with pytest.raises(script.LayoutError, match="no docstring"):
            script.summary(none)
    finally:
        script.ROOT = REPO


def test_quick_start_comes_first_with_exactly_the_two_commands() -> None:
    text = README.read_text(encoding="utf-8")
    lines = text.splitlines()
    assert lines[0].startswith("# ") and lines[1] == "" and lines[2]
    assert lines[4] == "## Quick start"
    quick_start = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", quick_start, flags=re.DOTALL)
    assert [block.strip() for block in blocks] == [RUN_COMMAND, TEST_COMMAND]


@pytest.mark.parametrize(
    "section",
    [
        "What it catches", "Runtime guard", "Configuration", "Suppression", "Exit codes", "Output formats",
        "Project layout",
    ],
)
def test_readme_sections(section: str) -> None:
    assert f"\n## {section}\n" in README.read_text(encoding="utf-8")


# --- the README's commands run as written ---------------------------------------------


def _section(text: str, heading: str) -> str:
    return text.split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]


def _usage_commands() -> list[str]:
    """The lines of the Usage block, without their trailing comments."""
    block = re.findall(r"```sh\n(.*?)```", _section(README.read_text(encoding="utf-8"), "## Usage"), re.DOTALL)[0]
    return [line.split("  #", 1)[0].strip() for line in block.splitlines() if line.strip()]


def _actions_commands() -> list[str]:
    """The ``run: accumlint ...`` steps of the GitHub Actions workflow."""
    text = _section(README.read_text(encoding="utf-8"), "### GitHub Actions")
    steps = [m.strip() for m in re.findall(r"- run: (accumlint .*)", text)]
    return steps + re.findall(r"`(accumlint check --output-format gitlab [^`]*)`", text)


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A small project with the paths the README's commands name: train.py, src/, nb/."""
    import json
    import shutil

    shutil.copy(REPO / "examples" / "train_buggy.py", tmp_path / "train.py")
    (tmp_path / "src").mkdir()
    shutil.copy(REPO / "examples" / "train_fixed.py", tmp_path / "src" / "train_fixed.py")
    (tmp_path / "nb").mkdir()
    cell = {"cell_type": "code", "metadata": {}, "source": "x = 1\n", "outputs": [], "execution_count": 1}
    notebook = {"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / "nb" / "explore.ipynb").write_text(json.dumps(notebook), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _run(command: str, cwd: Path) -> tuple[int, str]:
    import os
    import subprocess
    import sys

    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])}
    done = subprocess.run(
        ["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL
    )
    return done.returncode, done.stdout + done.stderr


def test_usage_commands_run_as_written(sandbox: Path) -> None:
    commands = _usage_commands()
    assert len(commands) >= 15 and "accumlint server" in commands
    for command in commands:
        status, out = _run(command, sandbox)
        # 0: clean, 1: findings; never 2 (a usage or configuration error)
        assert status in (0, 1), f"{command}: exit {status}\n{out}"


def test_ci_commands_run_as_written(sandbox: Path) -> None:
    commands = _actions_commands()
    assert commands == [
        "accumlint check --output-format github .",
        "accumlint check --output-format sarif --exit-zero . > accumlint.sarif",
        "accumlint check --output-format gitlab --exit-zero . > gl-code-quality-report.json",
    ]
    for command in commands:
        status, out = _run(command, sandbox)
        assert status in (0, 1), f"{command}: exit {status}\n{out}"
    import json

    assert json.loads((sandbox / "accumlint.sarif").read_text(encoding="utf-8"))["version"] == "2.1.0"
    report = json.loads((sandbox / "gl-code-quality-report.json").read_text(encoding="utf-8"))
    assert {issue["check_name"] for issue in report} >= {"ACC001"}


def test_precommit_rev_is_the_release_tag_of_a_tree_holding_the_hook() -> None:
    """The snippet's ``rev`` is this version's tag, made from a tree whose ``.pre-commit-hooks.yaml``
    has the ``accumlint`` hook (where the tag is in this clone, the tagged tree is read too)."""
    import shutil
    import subprocess

    text = _section(README.read_text(encoding="utf-8"), "### pre-commit")
    [rev] = re.findall(r"rev: (\S+)", text)
    assert rev == f"v{__version__}"
    assert "- id: accumlint\n" in (REPO / ".pre-commit-hooks.yaml").read_text(encoding="utf-8")
    if shutil.which("git") is None or not (REPO / ".git").exists():
        return
    shown = subprocess.run(["git", "show", f"{rev}:.pre-commit-hooks.yaml"], cwd=REPO, capture_output=True, text=True)
    if shown.returncode == 0:  # before `git tag` (scripts/release.py prints it) the tag is not there yet
        assert "- id: accumlint\n" in shown.stdout


# --- what the docs tell users to install ------------------------------------------------


def _docs() -> list[Path]:
    return [*load_script("release").doc_files(REPO), REPO / "CHANGELOG.md"]


def test_the_docs_pin_this_versions_tag_and_nothing_else() -> None:
    """Every pre-commit ``rev:`` of accumlint and every git install URL in README.md,
    CONTRIBUTING.md and docs/ names ``v<__version__>`` (``scripts/release.py`` rewrites them)."""
    release = load_script("release")
    tag = f"v{__version__}"
    pins = {path.name: release.find_pins(path.read_text(encoding="utf-8")) for path in release.doc_files(REPO)}
    wrong = [(name, pin.line, pin.kind, pin.ref) for name, found in pins.items() for pin in found if pin.ref != tag]
    assert wrong == [], f"pin {tag} (python scripts/release.py bumps them)"
    # (not vacuous: the pre-commit snippet's rev, the Actions and "Installing" git URLs)
    assert {pin.kind for pin in pins["README.md"]} == {"git", "rev"}


def test_after_marks_name_the_current_release() -> None:
    """A feature of main that no tag has yet is marked ``*(after <__version__>)*``: a mark naming
    an older version was missed by a release (``scripts/release.py`` turns the current ones into
    ``*(since NEW)*``)."""
    release = load_script("release")
    marks = {path.name: release.after_marks(path.read_text(encoding="utf-8")) for path in release.doc_files(REPO)}
    stale = {name: found for name, found in marks.items() if set(found) - {__version__}}
    assert stale == {}, f"mark features of main *(after {__version__})*"


def test_find_pins_sees_every_form_of_pin() -> None:
    release = load_script("release")
    text = (
        "  - repo: https://github.com/astral-sh/ruff-pre-commit\n    rev: v0.6.9\n"
        "  - repo: https://github.com/accumlint/accumlint.git\n    rev: '0123abc'  # pinned\n"
        "- uses: actions/checkout@v4\n"
        "pip install 'accumlint @ git+https://github.com/accumlint/accumlint'\n"
        "pip install git+https://github.com/accumlint/accumlint.git@main#egg=accumlint\n"
        "git+https://github.com/accumlint/accumlint-extras@v1\n"
    )
    assert [(pin.line, pin.kind, pin.ref) for pin in release.find_pins(text)] == [
        (4, "rev", "0123abc"), (6, "git", ""), (7, "git", "main"),
    ]


def _index_installs(text: str) -> list[str]:
    """The requirements of ``pip install`` commands in ``text`` that name accumlint without a URL
    (``accumlint``, ``accumlint[lsp]``): what only a package index could serve."""
    found = []
    for rest in re.findall(r"pip install (.*?)(?=pip install|$)", text, flags=re.MULTILINE):
        rest = re.split(r"`|&&|;|\|", rest, maxsplit=1)[0]  # the command ends there
        for name in re.finditer(r"(?<![\w./-])accumlint(\[[\w,-]*\])?(?![\w\[./-])", rest):
            if not re.match(r"\s*@", rest[name.end():]):  # `accumlint[lsp] @ git+https://...` is a URL
                found.append(name.group(0))
    return found


def test_index_installs_are_told_from_clone_and_url_installs() -> None:
    text = (
        'pip install "accumlint[lsp]"\n`pip install accumlint` and pip install -U accumlint[guard] && x\n'
        'pip install ".[lsp]"; pip install "accumlint[lsp] @ git+https://github.com/accumlint/accumlint@v1"\n'
        "HINT = \"needs torch: pip install 'accumlint[guard]'\"\n"
    )
    assert _index_installs(text) == ["accumlint[lsp]", "accumlint", "accumlint[guard]", "accumlint[guard]"]


def test_nothing_tells_users_to_install_accumlint_from_an_index() -> None:
    """accumlint is on no package index: the docs and the messages of the code install it from a
    clone (``pip install ".[lsp]"``) or from the git URL at a tag."""
    sources = [*_docs(), *sorted((REPO / "accumlint").rglob("*.py")), *sorted((REPO / "runtime_guard").rglob("*.py"))]
    found = {path.relative_to(REPO).as_posix(): _index_installs(path.read_text(encoding="utf-8")) for path in sources}
    assert {name: words for name, words in found.items() if words} == {}
