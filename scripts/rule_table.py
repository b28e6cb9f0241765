"""Regenerate the rule table in README.md from the rule registry.

Usage: ``python scripts/rule_table.py`` rewrites the table between ``<!-- rule-table -->``
and ``<!-- /rule-table -->``; ``python scripts/rule_table.py --check`` exits 1 when the
README is out of date (the test suite runs the same comparison).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(ROOT))

from accumlint.report.catalogue import rule_infos  # noqa: E402

README = ROOT / "README.md"
START = "<!-- rule-table -->"
END = "<!-- /rule-table -->"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_table() -> str:
    """The Markdown table of every code: code, name (linked to its page), severity, default, summary."""
    lines = ["| code | name | severity | default | what it flags |", "|---|---|---|---|---|"]
    for info in rule_infos():
        name = f"`{info.name}`"
        if info.implemented_by is not None:  # the engine's own codes have no rule folder
            name = f"[{name}](rules/{info.code}-{info.name}/README.md)"
        default = "on" if info.default_enabled else "off"
        lines.append(f"| {info.code} | {name} | {info.severity.value} | {default} | {_cell(info.summary)} |")
    return "\n".join(lines)


def replace_between(text: str, start_marker: str, end_marker: str, block: str) -> str:
    """``text`` with the part between the two markers replaced by ``block`` (also used by
    ``scripts/layout_map.py``)."""
    start = text.index(start_marker) + len(start_marker)
    end = text.index(end_marker, start)
    return f"{text[:start]}\n{block}\n{text[end:]}"


def between(text: str, start_marker: str, end_marker: str) -> str:
    """The block now between the markers of ``text``."""
    start = text.index(start_marker) + len(start_marker)
    return text[start : text.index(end_marker, start)].strip("\n")


def replace_table(text: str, table: str) -> str:
    """``text`` with the rule table replaced by ``table``."""
    return replace_between(text, START, END, table)


def current_table(text: str) -> str:
    """The rule table now in ``text``."""
    return between(text, START, END)


def main(argv: list[str] | None = None) -> int:
    """Rewrite (or with ``--check`` verify) the README table; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check that the README is up to date")
    args = parser.parse_args(argv)
    text = README.read_text(encoding="utf-8")
    table = render_table()
    if args.check:
        if current_table(text) != table:
            print("README.md rule table is out of date: run python scripts/rule_table.py", file=sys.stderr)
            return 1
        return 0
    README.write_text(replace_table(text, table), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
