"""Regenerate the project layout map in README.md from the packages' and modules' docstrings.

Usage: ``python scripts/layout_map.py`` rewrites the map between ``<!-- layout -->`` and
``<!-- /layout -->``; ``--check`` exits 1 when the README is out of date (the test suite runs the
same comparison).

Each entry is the first sentence of its module's docstring (a package's: its ``__init__.py``),
for every module and package at the top of ``accumlint/`` and ``runtime_guard/``, the modules of
an ``accumlint`` sub-package of at most :data:`MOST_LISTED`, and every script of ``benchmarks/``
and ``scripts/``. A first sentence longer than :data:`LONGEST` is an error, so the map stays a
map. What is not Python (the catalogue, the tests, the examples, the changelog, CI) is described
in :data:`OTHER`.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rule_table import README, ROOT, between, replace_between  # noqa: E402

START = "<!-- layout -->"
END = "<!-- /layout -->"
#: the longest first sentence a module may open its docstring with (characters)
LONGEST = 120
#: a sub-package's modules are listed when it has at most this many (the model, the frameworks'
#: tables and the rules are one line each: their docstrings say what is inside)
MOST_LISTED = 12
#: where descriptions start, and where a line wraps
COLUMN, WIDTH = 24, 110
#: the packages whose top-level modules and sub-packages the map lists, and the folders of scripts
PACKAGES = ("accumlint", "runtime_guard")
#: the packages whose sub-packages' modules are listed too (the guard's are one line each)
DEEP = ("accumlint",)
SCRIPT_FOLDERS = ("benchmarks", "scripts")
#: the entries that are not Python, in the order the map shows them after the packages
OTHER = {
    "rules/": "the rule catalogue: rules/<CODE>-<name>/README.md, bad_*.py / good_*.py examples, cases.toml "
              "(snippet cases) and snapshot.txt (the bad scripts' findings)",
    "tests/": "the tests (pytest): the fast and slow tiers, where each subject's tests live (tests/README.md)",
    "examples/": "train_buggy.py and its fixed twin train_fixed.py, the quick start's example",
    "CHANGELOG.md": "what changed in each release",
    ".ci/run": "CI entry point: a fresh venv, the README's test command, ruff",
}


class LayoutError(ValueError):
    """A module without a docstring, or one whose first sentence is longer than :data:`LONGEST`."""


def summary(path: Path) -> str:
    """The first sentence of ``path``'s docstring, on one line, RST literals as Markdown ones.

    Raises :class:`LayoutError` when there is no docstring or the sentence is too long."""
    docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
    if not docstring:
        raise LayoutError(f"{path.relative_to(ROOT)}: no docstring")
    text = " ".join(docstring.split("\n\n")[0].split())
    end = re.search(r"(?<=[\w`)\]'\"])\.(?:\s|$)", text)
    sentence = re.sub(r"``([^`]+)``", r"`\1`", text[: end.start()] if end else text)
    sentence = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", sentence)  # :func:`x` -> `x`
    if len(sentence) > LONGEST:
        raise LayoutError(f"{path.relative_to(ROOT)}: the docstring's first sentence has {len(sentence)} "
                          f"characters (at most {LONGEST}); end it sooner")
    return sentence


def _line(name: str, description: str, indent: int) -> list[str]:
    head = f"{' ' * indent}{name}"
    head = head.ljust(COLUMN) if len(head) < COLUMN else head + " "
    return textwrap.wrap(description, WIDTH, initial_indent=head, subsequent_indent=" " * COLUMN,
                         break_on_hyphens=False)


def _entries(folder: Path) -> list[tuple[str, Path]]:
    """(name as shown, the file whose docstring describes it) for a folder's modules and packages."""
    entries = []
    for child in sorted(folder.iterdir()):
        if child.name.startswith(("_", ".")):
            continue
        if child.is_dir() and (child / "__init__.py").is_file():
            entries.append((f"{child.name}/", child / "__init__.py"))
        elif child.suffix == ".py":
            entries.append((child.name, child))
    return entries


def render_map() -> str:
    """The layout map, as the fenced block the README shows."""
    lines: list[str] = []
    for package in PACKAGES:
        lines += _line(f"{package}/", summary(ROOT / package / "__init__.py"), 0)
        for name, path in _entries(ROOT / package):
            lines += _line(name, summary(path), 2)
            inner = _entries(path.parent) if path.name == "__init__.py" and package in DEEP else []
            if len(inner) <= MOST_LISTED:
                for inner_name, inner_path in inner:
                    lines += _line(inner_name, summary(inner_path), 4)
    for folder in SCRIPT_FOLDERS:
        lines.append(f"{folder}/")
        for name, path in _entries(ROOT / folder):
            lines += _line(name, summary(path), 2)
    for name, description in OTHER.items():
        lines += _line(name, description, 0)
    return "\n".join(["```", *lines, "```"])


def main(argv: list[str] | None = None) -> int:
    """Rewrite (or with ``--check`` verify) the README's layout map; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check that the README is up to date")
    args = parser.parse_args(argv)
    text = README.read_text(encoding="utf-8")
    try:
        layout = render_map()
    except LayoutError as error:
        print(error, file=sys.stderr)
        return 1
    if args.check:
        if between(text, START, END) != layout:
            print("README.md layout map is out of date: run python scripts/layout_map.py", file=sys.stderr)
            return 1
        return 0
    README.write_text(replace_between(text, START, END, layout), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
