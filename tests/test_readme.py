"""The README stays true: its rule table is the registry's, its quick start the two commands."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"

RUN_COMMAND = (
    'python -m venv .venv && . .venv/bin/activate && pip install -e ".[guard]" torch==2.13.0 '
    "&& accumlint check examples/; python -m runtime_guard demo examples/"
)
TEST_COMMAND = (
    'python -m venv .venv && . .venv/bin/activate && pip install -e ".[dev,guard]" torch==2.13.0 && pytest'
)


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("rule_table", REPO / "scripts" / "rule_table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
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
